// TensorRef accessors.
#include "transport/tensor_ref.h"

namespace maestro {

int64_t TensorRef::numel() const {
  if (!buffer) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::span<float> TensorRef::values() {
  if (!buffer) return {};
  return {buffer->data.data(), static_cast<size_t>(numel())};
}

std::span<const float> TensorRef::values() const {
  if (!buffer) return {};
  return {buffer->data.data(), static_cast<size_t>(numel())};
}

}  // namespace maestro
