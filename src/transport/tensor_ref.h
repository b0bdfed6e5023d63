// TensorRef: a small, copyable handle to a tensor's bytes held by a
// transport. Actors pass TensorRefs in messages instead of tensors: the
// handle names a reference-counted Buffer — a block of a pool the
// transport registered — plus the tensor's shape and storage dtype, so
// handing a tensor from one section replica to another never copies it.
// When the last handle drops, the block goes back to its pool.
//
// The block knows where it is registered (owner transport, pool, byte
// offset) and on which device it lives: that is the handle a peer needs
// to write into it (Transport::describe gives it as a TensorDescriptor).
// A hand-off kept in a GPU's memory (actors/section_runner.h, "resident
// hand-offs") is a block of its producer's backend, in no pool, with the
// marker of the work that writes it (Backend::ready_marker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "nn/dtype.h"

namespace maestro {

// One block of storage. Owned by a shared_ptr whose deleter returns it to
// its pool (local_transport.cpp); a standalone block (TensorRef::of) is in
// no pool (owner 0) and cannot be described to a peer.
struct Buffer {
  std::byte* data = nullptr;
  size_t capacity = 0;       // bytes
  uint64_t owner = 0;        // Transport::id() of the transport that registered the pool; 0 = none
  uint64_t pool = 0;         // the pool's id within its owner
  uint64_t offset = 0;       // bytes from the pool's start
  Device device = Device::Host;
  std::vector<std::byte> standalone;  // the bytes of a standalone block
  std::shared_ptr<void> ready;        // device memory: what a reader's stream waits for first (null: written)
};

struct TensorRef {
  std::shared_ptr<Buffer> buffer;  // null for an empty ref
  std::vector<int64_t> shape;      // row-major; bytes() <= buffer->capacity
  DType dtype = DType::F32;

  // A standalone host fp32 tensor holding `values` (tests, constants). [shape]
  static TensorRef of(std::vector<float> values, std::vector<int64_t> shape = {});
  // A standalone host tensor holding a copy of `bytes` (a tensor received by
  // value). Throws std::invalid_argument when they are not shape × dtype.
  static TensorRef of_bytes(std::span<const std::byte> bytes, std::vector<int64_t> shape, DType dtype);

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool empty() const { return buffer == nullptr; }
  Device device() const { return buffer ? buffer->device : Device::Host; }
  // The elements of an F32 host tensor; throws std::logic_error for
  // another dtype or device.                                  [numel()]
  std::span<float> values();
  std::span<const float> values() const;
  std::span<std::byte> raw();  // [bytes()] host tensors only
  std::span<const std::byte> raw() const;
};

}  // namespace maestro
