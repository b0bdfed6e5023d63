// UcxTransport: the transfer engine between processes and hosts (issue 12).
// Tensors move by one-sided writes into the receiver's registered memory
// with UCX — rdma-core verbs (RC/DC) on InfiniBand/RoCE, CMA and shared
// memory between processes of one host, TCP elsewhere; `tls` (UCX_TLS)
// chooses, UCX's default picks the best it finds.
//
// Memory: pools and blocks as LocalTransport (it does the bookkeeping);
// every region of memory it adds is allocated and registered by UCX
// (ucp_mem_map with UCP_MEM_MAP_ALLOCATE, memory type passed) and its rkey
// packed (ucp_rkey_pack). UCX allocating it matters: its shared-memory
// transports can then map the region into a peer on the same host, so a put
// is the producer's memcpy into the consumer's memory (malloc'd memory is
// reachable only through CMA or the consumer's own progress). The memory
// and the UCP context outlive the transport while TensorRefs hold it. This
// build registers host memory only: register_pool(…, Device::Cuda) is
// refused, and GPU tensors are staged through host memory by the caller,
// pinned (actors/run_setup.cpp; a UCX built with CUDA would allocate device
// memory under the same call).
//
// Peers: endpoint_info() is plain bytes — this transport's id, its UCX
// worker address, and (id, base, size, rkey) of every registered region.
// Another process's UcxTransport::connect(those bytes) creates an endpoint
// and unpacks the rkeys; the bytes travel however the caller likes (CAF in
// the runtime). Register the receive pools before sending the info; a
// region added later (the default pool growing, a receive pool added:
// actors/peer_tensors.h) reaches a peer when the info is sent and
// connect()ed again — the peer's regions become those announced, and a
// region announced as before keeps its rkey, so puts into it may run
// meanwhile.
//
// put(src, dst): dst.owner == id() is a local copy (LocalTransport's
// checks); otherwise the producer checks dtype, size and device, that the
// peer and the region are known, and that [offset, offset + bytes) lies in
// the descriptor's block and the block in the region as the peer
// registered it — a violation is refused before any byte moves. Then
// ucp_put_nbx and a flush (one outstanding per peer, covering every put
// issued before it); `done` runs once the bytes are in the peer's memory:
// inside put() when the flush completes at once (shared memory) and nothing
// earlier is still in flight, else on the progress thread (completions of
// one transport, refusals included, run in issue order). What UCX cannot
// know one-sided: whether the consumer still holds the block — the
// consumer keeps its TensorRef until the producer's completion message
// arrives.
//
// One progress thread per transport drives the UCX worker (it must run for
// TCP, where the receiver's worker writes the bytes): it spins while a
// flush is outstanding or UCX reports events, and for a millisecond after,
// then polls every 50 µs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace maestro {

struct UcxOptions {
  std::string tls;  // UCX_TLS for this transport ("" = the environment's, else UCX's choice), e.g. "tcp", "cma,sysv,self"
};

class UcxTransport final : public Transport {
 public:
  // Throws std::runtime_error naming the UCX call when UCX cannot start.
  explicit UcxTransport(UcxOptions options = {});
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const char* name() const override { return "ucx"; }
  uint64_t id() const override;  // random 64-bit, non-zero: unique across processes and hosts
  uint64_t register_pool(size_t bytes, Device device) override;
  TensorRef allocate(std::vector<int64_t> shape, DType dtype = DType::F32, uint64_t pool = kDefaultPool) override;
  TensorDescriptor describe(const TensorRef& tensor) const override;
  // To a peer: `done` runs inside put() when UCX completes the write at once
  // (shared memory), else later on the progress thread; synchronous into
  // this transport's own memory.
  void put(const TensorRef& src, const TensorDescriptor& dst, PutCompletion done) override;
  TransportStats stats() const override;
  // Pins the regions UCX allocated as well (cudaHostRegister beside UCX's
  // own registration), so a GPU's uploads from received tensors are DMA.
  void pin_host_memory(HostPinning pinning) override;
  // UCX's worker progressed and finished flushes completed on the caller,
  // while the progress thread stands down (until 200 µs after the last
  // call), so a spinning waiter and the progress thread do not take turns
  // on the worker's lock and the cores (docs/PERFORMANCE.md §8: the tcp
  // 4 KiB round trip 0.90-1.07x ucx_perftest's speed over 16 alternating
  // rounds, the sleeping waiter 0.39-0.45x). Returns whether UCX had events.
  bool progress() override;

  // Plain bytes for peers (see above).
  std::vector<std::byte> endpoint_info() const;
  // Connects to (or refreshes) the peer whose endpoint_info these are; `name`
  // ("worker 2 on host-b") appears in its errors. Returns the peer's id.
  // Throws std::invalid_argument for bytes that are not endpoint info,
  // std::runtime_error when UCX cannot reach the peer.
  uint64_t connect(std::span<const std::byte> peer_info, const std::string& name = "");
  // Flushes every endpoint (each bounded by `bound`) while the peers are
  // alive, so that destroying this transport later sends nothing: the
  // goodbye of a run over processes, where peers exit at their own pace and
  // flushing an endpoint to an exited peer makes UCX log "Endpoint timeout".
  // Every process quiesces before any exits; a later put or connect undoes it.
  void quiesce(std::chrono::milliseconds bound = std::chrono::milliseconds(2000));

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace maestro
