// Transport: how tensors move between section replicas — the interface the
// runtime is written against. `local` (local_transport.h) is the first
// implementation (one process, shared memory); a UCX transport (issue 12:
// ucp_mem_map'd pools, rkeys, ucp_put_nbx) implements the same calls.
//
// The model is one-sided writes into registered memory, as RDMA does it:
//   1. a consumer allocates a tensor in one of its registered pools and
//      describes it — a TensorDescriptor, plain data that can cross a
//      process (the messages' `inspect`);
//   2. the producer puts its tensor into that descriptor; the completion
//      runs once the bytes are in place (or the put was refused);
//   3. a small message tells the consumer the tensor is there.
// A put is checked against the registered pool before any byte moves: an
// unknown owner or pool, a block that is not live, a range outside it, or
// a dtype / size that differs from the source is refused with a message
// naming it. Puts from one caller to one transport complete in issue order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/dtype.h"
#include "transport/tensor_ref.h"

namespace maestro {

// Where a tensor's bytes are, as a peer needs it to write there.
struct TensorDescriptor {
  uint64_t owner = 0;   // Transport::id() of the transport that registered the pool
  uint64_t pool = 0;    // the pool, unique within its owner
  uint64_t offset = 0;  // bytes from the pool's start
  uint64_t bytes = 0;   // the tensor's size
  DType dtype = DType::F32;
  Device device = Device::Host;
  uint64_t block = 0;     // the block holding it: [block, block + capacity) of the pool, so a
  uint64_t capacity = 0;  // producer that sees only the pool's registration can bound a put
  bool operator==(const TensorDescriptor&) const = default;
};

// For CAF (messages that carry a descriptor across processes) and any other
// field-by-field inspector: every field, in order.
template <class Inspector>
auto inspect(Inspector& f, TensorDescriptor& x) {
  return f(x.owner, x.pool, x.offset, x.bytes, x.dtype, x.device, x.block, x.capacity);
}

struct TransportStats {
  int64_t allocations = 0;  // blocks carved from pool memory never used before
  int64_t reuses = 0;       // blocks handed out again from a free list
  int64_t live = 0;         // blocks currently referenced by a TensorRef
  int64_t pooled = 0;       // blocks waiting in free lists
  int64_t pools = 0;        // pools registered
  int64_t pool_bytes = 0;   // their total size
  int64_t pinned_bytes = 0;  // of those, page-locked for a GPU's copies (LocalTransport::pin_host_memory)
  int64_t puts = 0;         // puts completed
  int64_t bytes_put = 0;    // bytes they wrote
  int64_t refused = 0;      // puts refused (nothing written)
};

// Page-locking of host memory that a GPU backend copies to and from
// (cudaHostRegister: gpu/device_query.h), so a device's copies run as DMA at
// the link's speed rather than through the driver's bounce buffers.
// `pin(base, bytes)` returns false where it could not (the memory stays
// pageable: slower, not wrong); `unpin(base)` runs before pinned memory is
// freed.
struct HostPinning {
  std::function<bool(void* base, size_t bytes)> pin;
  std::function<void(void* base)> unpin;
};

// Runs once per put: error is "" when the bytes are in place, else why the
// put was refused (nothing was written then).
using PutCompletion = std::function<void(const std::string& error)>;

class Transport {
 public:
  static constexpr uint64_t kDefaultPool = 0;  // the transport's own growable host pool(s)

  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Non-zero, unique among the transports a run's processes can reach: the
  // `owner` of its descriptors.
  virtual uint64_t id() const = 0;

  // Registers `bytes` of `device` memory as a pool that tensors can be
  // allocated in and peers can put into; returns the pool's id (never
  // kDefaultPool). Throws std::invalid_argument for memory this transport
  // cannot register.
  virtual uint64_t register_pool(size_t bytes, Device device) = 0;
  // A zero-filled tensor of this shape and dtype in `pool`. Throws
  // std::invalid_argument for a negative dimension or an unknown pool,
  // std::runtime_error when a registered pool is full.
  virtual TensorRef allocate(std::vector<int64_t> shape, DType dtype = DType::F32, uint64_t pool = kDefaultPool) = 0;
  // The descriptor of a tensor this transport allocated. Throws
  // std::invalid_argument for one it did not.
  virtual TensorDescriptor describe(const TensorRef& tensor) const = 0;
  // One-sided write of src's bytes into the tensor `dst` describes (on this
  // transport or a peer it reaches); `done` runs exactly once.
  virtual void put(const TensorRef& src, const TensorDescriptor& dst, PutCompletion done) = 0;
  virtual TransportStats stats() const = 0;
  // From now on every host region of the transport, those already there
  // included, is pinned (once): a GPU backend's copies out of the tensors
  // it receives are then DMA straight from them, and its copies into those
  // it hands on too. stats().pinned_bytes counts what was. Set it once,
  // before the run's hand-offs: std::logic_error the second time,
  // std::invalid_argument without pin or unpin.
  virtual void pin_host_memory(HostPinning pinning) = 0;
  // Called by a thread that spins waiting on this transport (its put's
  // completion, a peer's put into its memory): make progress here, on the
  // caller, instead of waiting for a progress thread to be scheduled.
  // Returns whether anything happened. A transport with nothing to
  // progress (in-process copies) does nothing.
  virtual bool progress() { return false; }

  // A tensor holding a copy of host `values` (shape's numel floats).
  TensorRef copy_of(std::vector<int64_t> shape, const float* values);
};

}  // namespace maestro
