// PeerTensors: how a flow tensor crosses a process (issue 12) — by a
// one-sided UCX put into the consumer's registered pool, never as bytes in a
// CAF message. Installed as the process's TensorExporter (wire_format.h)
// while a run spans processes:
//   1. a message leaving the process (TaskDone from a worker, RunTask from
//      the scheduler) carries each host tensor as a handle (this process's
//      transport id, a key); the tensor stays in an export table;
//   2. the consumer's replica (replica.cpp) sees placeholders in its
//      RunTask, allocates each tensor in this process's receive pools
//      (registered UCX pools: the first, `kReceivePoolBytes`, before the
//      handshake, so every peer has its rkey), and asks the owner's tensor
//      server FetchTensor{key, descriptor, announcement};
//   3. the owner's server puts the tensor into that descriptor
//      (UcxTransport::put: ucp_put_nbx + flush; bounds checked before any
//      byte moves) and answers once the bytes are there; the replica then
//      runs the task on the local copies.
// The receive pools grow: a tensor that fits in none (KD teacher logits of
// a long sample and a real vocabulary pass 256 MiB) registers another pool,
// at least as large as all before it together and as the tensor's block,
// and a fetch into a pool registered after the handshake carries this
// process's endpoint info (`announcement`), which the owner's server
// connect()s before its put: the peer learns the new rkey exactly when it
// first needs it. Pools stay until the run ends (the peak in flight).
// A handle coming back to its owner is the owner's tensor again (no copy).
// A handle has one use: the scheduler hands each flow tensor and stage
// hand-off to one task (StepExecution), and each message leaving a process
// exports its tensors under new keys. So an export is dropped at that use —
// once its put into the consumer's pool has landed, or when the handle
// arrives back in its owner's process — and the owner's block is free for
// the next output while the step runs. (A failed put keeps it: the run
// stops.) What is never used (a step that failed) is dropped when the
// step's gradients are reduced (ReduceGrads: by then every task of the
// step is done), with the step's pipeline geometries, which are exported
// the same way and kept until then.
#pragma once

#include <atomic>
#include <caf/all.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/messages.h"
#include "rdma/ucx_transport.h"

namespace maestro {

// consumer -> the owner's tensor server: put the exported tensor `key` into
// `dst` (a block of the consumer's receive pool). `announcement`: empty, or
// the consumer's endpoint info when dst's pool was registered after the
// handshake (PeerTensors::announcement). Replies std::string: "" = the
// bytes are there, else why not (nothing written).
struct FetchTensor {
  uint64_t key = 0;
  TensorDescriptor dst;
  std::vector<uint8_t> announcement;
};
MAESTRO_INSPECT(FetchTensor, x.key, x.dst, x.announcement)
// tensor server -> itself, from the transport's progress thread: a put ended.
struct PutEnded {
  uint64_t token = 0;
  std::string error;
  uint64_t bytes = 0;
};
MAESTRO_INSPECT(PutEnded, x.token, x.error, x.bytes)

class PeerTensors final : public TensorExporter {
 public:
  static constexpr size_t kReceivePoolBytes = size_t(256) << 20;  // the first receive pool, per process
  // Registers the first receive pool, of `first_pool_bytes`, in `transport`
  // (before its endpoint info is sent). Throws what register_pool throws.
  explicit PeerTensors(std::shared_ptr<UcxTransport> transport, size_t first_pool_bytes = kReceivePoolBytes);

  uint64_t owner() const override { return transport_->id(); }
  uint64_t export_tensor(const TensorRef& t) override;
  TensorRef imported(uint64_t owner, uint64_t key, std::vector<int64_t> shape, DType dtype) override;

  uint64_t export_geometry(std::shared_ptr<const StageGeometry> g) override;
  std::shared_ptr<const StageGeometry> exported_geometry(uint64_t key) const override;

  TensorRef exported(uint64_t key) const;  // empty when unknown (or dropped)
  void drop_export(uint64_t key);          // its one use is done (below)
  void forget_exports();                   // every export and geometry: the step ended
  size_t exports() const;
  UcxTransport& transport() { return *transport_; }
  // A tensor to receive into: a block of the first receive pool with room,
  // else of a new one (above). Throws what register_pool throws (memory).
  TensorRef receive_buffer(std::vector<int64_t> shape, DType dtype);
  // What a fetch into `dst` (from receive_buffer) tells the owner: this
  // process's endpoint info when dst's pool is newer than the handshake,
  // else nothing.
  std::vector<uint8_t> announcement(const TensorRef& dst) const;
  size_t receive_pools() const;

  // What this process's tensor server put into consumers' pools.
  void count_put(uint64_t bytes) { ++puts_, bytes_put_ += bytes; }
  uint64_t puts() const { return puts_; }
  uint64_t bytes_put() const { return bytes_put_; }

  // Every process's tensor server, by transport id; and a name for errors.
  void set_servers(std::map<uint64_t, std::pair<caf::actor, std::string>> servers);
  std::pair<caf::actor, std::string> server_of(uint64_t owner) const;

 private:
  std::shared_ptr<UcxTransport> transport_;
  mutable std::mutex mu_, pools_mu_;
  std::vector<std::pair<uint64_t, size_t>> pools_;  // receive pools (id, bytes), oldest first; [0] in the handshake
  uint64_t next_key_ = 1;
  std::unordered_map<uint64_t, TensorRef> exports_;
  std::unordered_map<uint64_t, std::shared_ptr<const StageGeometry>> geometries_;
  std::map<uint64_t, std::pair<caf::actor, std::string>> servers_;
  std::atomic<uint64_t> puts_{0}, bytes_put_{0};
};

// The process's PeerTensors while installed (tensor_exporter()), else null.
PeerTensors* peer_tensors();
// Installs `p` as the process's exporter (null uninstalls).
void install_peer_tensors(PeerTensors* p);

// The tensor server of this process: FetchTensor -> std::string.
caf::actor spawn_tensor_server(caf::actor_system& sys, PeerTensors* tensors);

// Whether a task's inputs hold placeholders to fetch first.
bool has_remote_inputs(const std::vector<FlowTensor>& inputs);

}  // namespace maestro
