// Ordered local collectives (see collectives.h).
#include "transport/collectives.h"

#include <stdexcept>

namespace maestro {

TensorRef sum_in_order(Transport& transport, const std::vector<TensorRef>& parts) {
  if (parts.empty()) throw std::invalid_argument("sum_in_order: no inputs");
  if (parts.size() == 1) return parts[0];
  for (const TensorRef& p : parts)
    if (p.shape != parts[0].shape) throw std::invalid_argument("sum_in_order: shapes differ");
  TensorRef out = transport.copy_of(parts[0].shape, parts[0].values().data());
  std::span<float> acc = out.values();
  for (size_t r = 1; r < parts.size(); ++r) {
    std::span<const float> x = parts[r].values();
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
  }
  return out;
}

double sum_of_squares(const TensorRef& t) {
  double s = 0;
  for (float v : t.values()) s += double(v) * double(v);
  return s;
}

}  // namespace maestro
