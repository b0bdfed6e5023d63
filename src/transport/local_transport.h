// The `local` transport: tensors handed between actors of one process
// without copying. A producer allocates a TensorRef from the pool, writes
// into it and sends the handle; the consumer reads the same memory. Buffers
// are reference-counted and return to the pool's free lists when the last
// handle drops, so a steady-state training step allocates nothing.
//
// Thread-safe: replicas' compute workers allocate and release concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/tensor_ref.h"

namespace maestro {

struct PoolStats {
  int64_t allocations = 0;  // buffers created with new storage
  int64_t reuses = 0;       // buffers handed out again from a free list
  int64_t live = 0;         // buffers currently referenced by a TensorRef
  int64_t pooled = 0;       // buffers waiting in free lists
};

class LocalTransport {
 public:
  LocalTransport();
  ~LocalTransport();
  LocalTransport(const LocalTransport&) = delete;
  LocalTransport& operator=(const LocalTransport&) = delete;

  // A zero-filled tensor of this shape, in a buffer of at least its size
  // (capacities are rounded up to a power of two so buffers are reusable).
  TensorRef allocate(std::vector<int64_t> shape);
  // A tensor holding a copy of `values` (shape's numel must match).
  TensorRef copy_of(std::vector<int64_t> shape, const float* values);

  PoolStats stats() const;
  const char* name() const { return "local"; }

 private:
  struct Pool;  // shared with the buffers' deleters, so it outlives the transport if refs do
  std::shared_ptr<Pool> pool_;
};

}  // namespace maestro
