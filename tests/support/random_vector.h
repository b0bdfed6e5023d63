// n normally distributed floats (mean 0, standard deviation `scale`) from
// a seeded mt19937: the random inputs of the op tests (tests/cpu, tests/gpu).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace maestro::test_support {

inline std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace maestro::test_support
