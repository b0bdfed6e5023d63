// TensorRef: a small, copyable handle to a tensor's bytes held by a transport.
// Actors pass TensorRefs in messages instead of tensors: the handle names a
// reference-counted buffer and the shape of the fp32 tensor in it, so handing
// a tensor from one section replica to another never copies it. When the last
// handle drops, the buffer goes back to the pool it came from.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace maestro {

// One pooled block of fp32 storage. Owned by a shared_ptr whose deleter
// returns it to its BufferPool (see local_transport.h).
struct Buffer {
  std::vector<float> data;  // [capacity]
};

struct TensorRef {
  std::shared_ptr<Buffer> buffer;  // null for an empty ref
  std::vector<int64_t> shape;      // row-major; numel() <= buffer->data.size()

  int64_t numel() const;
  bool empty() const { return buffer == nullptr; }
  std::span<float> values();              // [numel()]
  std::span<const float> values() const;  // [numel()]
};

}  // namespace maestro
