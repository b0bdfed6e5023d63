// The `local` transport: tensors handed between actors of one process
// without copying, and one-sided puts between LocalTransports of one
// process (what the tests and a future per-replica transport use).
//
// Memory is host memory in registered pools. Blocks have power-of-two
// capacities (at least 256 bytes), carved from a pool's unused end and,
// once freed (the last TensorRef dropped), kept on a free list per pool
// and capacity for the next tensor of that class — so a steady-state
// training step allocates nothing. The default pool grows by registering
// another 16 MiB (or larger) region when it is full; a pool from
// register_pool() has the size it was given.
//
// Thread-safe: replicas' compute workers allocate, release and put
// concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "transport/transport.h"

namespace maestro {

class LocalTransport final : public Transport {
 public:
  LocalTransport();
  // Where the memory of every region it adds comes from — by default
  // aligned_alloc and free; the UCX transport has UCX allocate and register
  // it (ucp_mem_map, rdma/ucx_transport.h). `region` is the id descriptors
  // carry as `pool`. `allocate` runs under the transport's lock before any
  // tensor lives there and returns 64-byte-aligned memory or throws;
  // `release` runs once per region, when the transport and every TensorRef
  // into the region are gone.
  struct RegionMemory {
    std::function<std::byte*(uint64_t region, size_t bytes)> allocate;
    std::function<void(uint64_t region, std::byte* base, size_t bytes)> release;
  };
  explicit LocalTransport(RegionMemory memory);
  void pin_host_memory(HostPinning pinning) override;  // Transport's; a region is unpinned before it is released
  ~LocalTransport() override;
  LocalTransport(const LocalTransport&) = delete;
  LocalTransport& operator=(const LocalTransport&) = delete;

  const char* name() const override { return "local"; }
  uint64_t id() const override;
  uint64_t register_pool(size_t bytes, Device device) override;
  TensorRef allocate(std::vector<int64_t> shape, DType dtype = DType::F32, uint64_t pool = kDefaultPool) override;
  TensorDescriptor describe(const TensorRef& tensor) const override;
  // Synchronous: the bytes are copied (or the put refused) and `done` has
  // run when put() returns. Reaches every LocalTransport of the process.
  void put(const TensorRef& src, const TensorDescriptor& dst, PutCompletion done) override;
  TransportStats stats() const override;

  // Internal (local_transport.cpp): shared with the blocks' deleters, so it
  // outlives the transport while refs do, and with the process's table of
  // transports that puts look targets up in.
  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace maestro
