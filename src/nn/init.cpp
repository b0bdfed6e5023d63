// Counter-based parameter initialisation (see init.h).
#include "nn/init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace maestro {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Uniform in (0, 1]: the top 53 bits, shifted off zero.
double unit(uint64_t bits) { return (double(bits >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

void init_tensor(float* dst, const TensorShape& t, const std::string& full_name, uint64_t seed, int threads) {
  const int64_t n = t.numel();
  if (t.shape.size() == 1 && ends_with(t.name, ".bias")) {
    for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
    return;
  }
  if (t.shape.size() == 1 && ends_with(t.name, ".weight")) {
    for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f;
    return;
  }
  const uint64_t key = splitmix64(splitmix64(seed) ^ fnv1a(full_name));
  const auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double u1 = unit(splitmix64(key + 2 * uint64_t(i)));
      const double u2 = unit(splitmix64(key + 2 * uint64_t(i) + 1));
      dst[i] = float(0.02 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  };
  // ~43 ns an element on one core (a 1.3B model: about a minute), so big
  // tensors fill on several threads, in chunks of at least 2^20 elements.
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t chunks = std::min<int64_t>(threads, std::max<int64_t>(1, n >> 20));
  if (chunks == 1) return fill(0, n);
  std::vector<std::jthread> workers;
  for (int64_t c = 1; c < chunks; ++c) workers.emplace_back(fill, n * c / chunks, n * (c + 1) / chunks);
  fill(0, n / chunks);
}

}  // namespace maestro
