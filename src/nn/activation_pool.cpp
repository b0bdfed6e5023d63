// The grow-only activation pool (see activation_pool.h).
#include "nn/activation_pool.h"

#include <algorithm>

namespace maestro {

ActivationPool::~ActivationPool() {
  for (auto& [p, n] : capacity_) backend_.release(p);
}

float* ActivationPool::take(size_t n) {
  std::lock_guard lock(mu_);
  auto it = free_.lower_bound(n);
  if (it != free_.end()) {
    float* p = it->second;
    free_.erase(it);
    return p;
  }
  const size_t cap = (std::max<size_t>(n, 1) + 1023) / 1024 * 1024;  // whole 4 KiB pages, so near sizes share buffers
  float* p = backend_.allocate(cap);
  capacity_[p] = cap;
  return p;
}

void ActivationPool::give_back(float* p) {
  std::lock_guard lock(mu_);
  free_.emplace(capacity_.at(p), p);
}

size_t ActivationPool::allocated_floats() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& [p, c] : capacity_) n += c;
  return n;
}

}  // namespace maestro
