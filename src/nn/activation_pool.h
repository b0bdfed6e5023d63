// ActivationPool: a grow-only pool of Backend buffers for the activations of
// micro-batches in flight. A buffer taken is held by a ForwardContext until
// the context dies, then returns to the pool for the next micro-batch; once
// the pool has grown to the largest set of micro-batches in flight, a step
// allocates nothing. Buffers are freed when the pool dies.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "nn/backend.h"

namespace maestro {

class ActivationPool {
 public:
  explicit ActivationPool(Backend& backend) : backend_(backend) {}
  ~ActivationPool();
  ActivationPool(const ActivationPool&) = delete;
  ActivationPool& operator=(const ActivationPool&) = delete;

  // A buffer of at least n floats (the smallest free one that fits, else a
  // new one); its contents are whatever the last user left.
  float* take(size_t n);
  void give_back(float* p);
  size_t allocated_floats() const;  // total held by the pool, in use or free

 private:
  Backend& backend_;
  mutable std::mutex mu_;
  std::multimap<size_t, float*> free_;  // capacity -> buffer
  std::map<float*, size_t> capacity_;   // every buffer the pool allocated
};

}  // namespace maestro
