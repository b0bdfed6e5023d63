// max |a − b| / max |b|: the relative error the GPU tests bound (the scale
// of llm.c's and the CUDA self-check's comparisons, gpu/backend_compare.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace maestro::test_support {

inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

}  // namespace maestro::test_support
