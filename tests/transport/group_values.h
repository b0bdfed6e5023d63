// Test values for collectives (collectives_test, ring_communicator_test):
// per-rank vectors where the order of a sum shows in the bits, and the
// rank-order fold every Communicator must match bitwise.
#pragma once

#include <random>
#include <vector>

namespace maestro {

using F = std::vector<float>;

// Values where the order of a sum shows in the bits: large ones that cancel
// and small ones they swallow.
inline F rank_values(int rank, size_t n, unsigned seed) {
  std::mt19937 rng(seed * 131 + unsigned(rank));
  std::uniform_real_distribution<float> u(-1, 1);
  F v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 3 == 0 ? 1e8f * (rank % 2 ? -1.0f : 1.0f) : 0.0f) + u(rng);
  return v;
}

// Every rank's values, [rank][n].
inline std::vector<F> group_values(int size, size_t n, unsigned seed) {
  std::vector<F> xs;
  for (int r = 0; r < size; ++r) xs.push_back(rank_values(r, n, seed));
  return xs;
}

// Element i summed in rank order: ((x0 + x1) + x2) + ...
inline F fold(const std::vector<F>& xs) {
  F s = xs[0];
  for (size_t r = 1; r < xs.size(); ++r)
    for (size_t i = 0; i < s.size(); ++i) s[i] += xs[r][i];
  return s;
}

}  // namespace maestro
