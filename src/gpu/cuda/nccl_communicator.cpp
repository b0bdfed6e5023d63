// NCCL communicators (nccl_communicator.h).
#include "gpu/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda/cuda_check.h"

namespace maestro {

namespace {

void nccl_check(ncclResult_t st, const char* what, const char* file, int line) {
  if (st != ncclSuccess)
    throw CollectiveError(fmt::format("{}:{}: NCCL error {} ({}) in {}", file, line, int(st), ncclGetErrorString(st), what));
}
#define NCCL_OK(call) nccl_check((call), #call, __FILE__, __LINE__)

// What this process's ranks of one group share: abort() on any rank ends
// every one of them, so a rank blocked in a collective wakes (the runtime
// aborts one member of each dp group when a run ends, transport/
// collectives.h; across processes each process aborts its own). comms
// [local index]: null until connected (a group spanning processes,
// connect_nccl_ranks).
struct NcclGroupState {
  std::vector<ncclComm_t> comms;
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string reason;
};

class NcclCommunicator final : public Communicator {
 public:
  // Rank `rank` of `size`, this process's `local`-th of the group, on CUDA
  // device `device`. Touches no device until its first collective (or
  // connect_nccl_ranks), so a group spanning processes can be laid out
  // before its peers are known.
  NcclCommunicator(std::shared_ptr<NcclGroupState> group, size_t local, int rank, int size, int device)
      : group_(std::move(group)), local_(local), rank_(rank), size_(size), device_(device) {}
  ~NcclCommunicator() override {
    if (stream_ == nullptr && comm() == nullptr) return;
    cudaSetDevice(device_);
    if (!group_->aborted && comm() != nullptr) ncclCommDestroy(comm());
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  // This rank's communicator in its group's state: null until connected.
  ncclComm_t& slot() const { return group_->comms[local_]; }
  // From now on each collective waits for the work queued on `producer`
  // (the rank's backend's stream, on this rank's device) up to the call.
  void order_after(cudaStream_t producer) { producer_ = producer; }

  void all_reduce(float* data, size_t n) override {
    begin();
    settle(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm(), stream_), "ncclAllReduce");
    finish();
  }
  void reduce_scatter(float* out, const float* in, size_t n) override {
    begin();
    if (n % size_t(size_) == 0) {
      settle(ncclReduceScatter(in, out, n / size_t(size_), ncclFloat32, ncclSum, comm(), stream_), "ncclReduceScatter");
    } else {
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        const Shard s = shard_of(n, size_, r);
        NCCL_OK(ncclReduce(in + s.offset, out, s.count, ncclFloat32, ncclSum, r, comm(), stream_));
      }
      settle(ncclGroupEnd(), "ncclGroupEnd (uneven reduce-scatter)");
    }
    finish();
  }
  void all_gather(float* out, const float* in, size_t n) override {
    begin();
    if (n % size_t(size_) == 0) {
      settle(ncclAllGather(in, out, n / size_t(size_), ncclFloat32, comm(), stream_), "ncclAllGather");
    } else {
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        const Shard s = shard_of(n, size_, r);
        NCCL_OK(ncclBroadcast(r == rank_ ? in : out + s.offset, out + s.offset, s.count, ncclFloat32, r, comm(), stream_));
      }
      settle(ncclGroupEnd(), "ncclGroupEnd (uneven all-gather)");
    }
    finish();
  }
  void broadcast(float* data, size_t n, int root) override {
    begin();
    settle(ncclBroadcast(data, data, n, ncclFloat32, root, comm(), stream_), "ncclBroadcast");
    finish();
  }
  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(group_->mu);
      if (group_->aborted) return;
      group_->reason = reason.empty() ? "collective group aborted" : reason;
      group_->aborted = true;
    }
    for (ncclComm_t c : group_->comms)  // wakes every rank blocked in a collective
      if (c != nullptr) ncclCommAbort(c);
  }

 private:
  ncclComm_t comm() const { return slot(); }
  // The buffers were written by the rank's backend on its own stream: the
  // collective's stream waits (on the device, the host does not) for an
  // event recorded there now, so sections sharing the GPU on other streams
  // go on. A rank not told its backend's stream (order_after) waits for
  // every stream of the device instead.
  void begin() {
    if (group_->aborted) throw CollectiveError(reason());
    if (comm() == nullptr)
      throw CollectiveError(fmt::format("NCCL rank {} of {} on device {}: not connected to its peers", rank_, size_, device_));
    MAESTRO_CUDA_CHECK(cudaSetDevice(device_));
    if (stream_ == nullptr) MAESTRO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (producer_ == nullptr) {
      MAESTRO_CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    if (ready_ == nullptr) MAESTRO_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    MAESTRO_CUDA_CHECK(cudaEventRecord(ready_, producer_));
    MAESTRO_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  // A communicator made non-blocking (one spanning processes) may answer
  // ncclInProgress: the call is queued once its asynchronous state leaves
  // that (an abort from another thread ends the wait).
  void settle(ncclResult_t st, const char* what) {
    while (st == ncclInProgress && !group_->aborted) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm(), &st) != ncclSuccess) break;
    }
    if (group_->aborted) throw CollectiveError(reason());
    nccl_check(st, what, __FILE__, __LINE__);
  }
  void finish() {
    const cudaError_t st = cudaStreamSynchronize(stream_);
    if (group_->aborted) throw CollectiveError(reason());
    if (st != cudaSuccess) throw CollectiveError(fmt::format("NCCL collective on device {}: {}", device_, cudaGetErrorString(st)));
  }
  std::string reason() {
    std::lock_guard lock(group_->mu);
    return group_->reason;
  }

  std::shared_ptr<NcclGroupState> group_;
  size_t local_;
  int rank_, size_, device_;
  cudaStream_t stream_ = nullptr;    // the collectives', made at the first one
  cudaStream_t producer_ = nullptr;  // the backend's (order_after); not owned
  cudaEvent_t ready_ = nullptr;      // recorded on producer_ at each collective
};

}  // namespace

bool order_nccl_after(Communicator& rank, void* cuda_stream) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&rank);
  if (nccl == nullptr || cuda_stream == nullptr) return false;
  nccl->order_after(static_cast<cudaStream_t>(cuda_stream));
  return true;
}

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices) {
  auto state = std::make_shared<NcclGroupState>();
  state->comms.resize(devices.size());
  NCCL_OK(ncclCommInitAll(state->comms.data(), int(devices.size()), devices.data()));
  std::vector<std::shared_ptr<Communicator>> group;
  for (size_t i = 0; i < devices.size(); ++i)
    group.push_back(std::make_shared<NcclCommunicator>(state, i, int(i), int(devices.size()), devices[i]));
  return group;
}

std::vector<uint8_t> make_nccl_unique_id() {
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  const auto* p = reinterpret_cast<const uint8_t*>(id.internal);
  return {p, p + sizeof id.internal};
}

std::vector<std::shared_ptr<Communicator>> make_nccl_ranks(int size, const std::vector<int>& ranks,
                                                           const std::vector<int>& devices) {
  if (ranks.size() != devices.size()) throw std::invalid_argument("make_nccl_ranks: one device per rank");
  auto state = std::make_shared<NcclGroupState>();
  state->comms.assign(ranks.size(), nullptr);
  std::vector<std::shared_ptr<Communicator>> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size)
      throw std::invalid_argument(fmt::format("make_nccl_ranks: rank {} of a group of {}", ranks[i], size));
    out.push_back(std::make_shared<NcclCommunicator>(state, i, ranks[i], size, devices[i]));
  }
  return out;
}

void connect_nccl_ranks(const std::vector<NcclConnection>& ranks, std::chrono::milliseconds timeout) {
  std::vector<NcclCommunicator*> comms;
  for (const NcclConnection& c : ranks) {  // everything checked before any NCCL call
    auto* nccl = dynamic_cast<NcclCommunicator*>(c.rank.get());
    if (nccl == nullptr) throw std::invalid_argument(fmt::format("{}: not an NCCL rank", c.group));
    if (c.id.size() != sizeof(ncclUniqueId))
      throw std::invalid_argument(fmt::format("{}: an NCCL unique id of {} bytes (NCCL's has {})", c.group, c.id.size(),
                                              sizeof(ncclUniqueId)));
    if (nccl->slot() != nullptr)
      throw std::logic_error(fmt::format("{}: NCCL rank {} connected twice", c.group, nccl->rank()));
    comms.push_back(nccl);
  }
  if (comms.empty()) return;
  // One group call for all of them: the ranks this process holds of one
  // communicator (which must init together) and of several (whose order
  // may differ between processes) never wait on each other. Non-blocking,
  // so that a peer that never comes bounds the wait instead of hanging it.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto abort_all = [&] {
    for (NcclCommunicator* c : comms) {
      if (c->slot() != nullptr) ncclCommAbort(c->slot());
      c->slot() = nullptr;
    }
  };
  NCCL_OK(ncclGroupStart());
  std::string failed;  // the first call that failed: the group is ended, then this thrown
  for (size_t i = 0; i < comms.size() && failed.empty(); ++i) {
    NcclCommunicator& c = *comms[i];
    ncclUniqueId id;
    std::memcpy(id.internal, ranks[i].id.data(), sizeof id.internal);
    if (const cudaError_t st = cudaSetDevice(c.device()); st != cudaSuccess) {
      failed = fmt::format("{}: NCCL rank {} of {}: cudaSetDevice({}): {}", ranks[i].group, c.rank(), c.size(),
                           c.device(), cudaGetErrorString(st));
    } else if (const ncclResult_t nst = ncclCommInitRankConfig(&c.slot(), c.size(), id, c.rank(), &config);
               nst != ncclSuccess && nst != ncclInProgress) {
      failed = fmt::format("{}: NCCL rank {} of {} on device {}: ncclCommInitRankConfig: NCCL error {} ({})",
                           ranks[i].group, c.rank(), c.size(), c.device(), int(nst), ncclGetErrorString(nst));
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (failed.empty() && ended != ncclSuccess && ended != ncclInProgress)
    failed = fmt::format("{}: ncclGroupEnd (communicator init): NCCL error {} ({})", ranks[0].group, int(ended),
                         ncclGetErrorString(ended));
  if (!failed.empty()) {
    abort_all();
    throw CollectiveError(failed);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclResult_t st = ncclInProgress;
    while (true) {
      const ncclResult_t q = ncclCommGetAsyncError(comms[i]->slot(), &st);
      if (q != ncclSuccess) st = q;
      if (st != ncclInProgress) break;
      if (std::chrono::steady_clock::now() > deadline) {
        abort_all();
        throw CollectiveError(fmt::format("{}: NCCL rank {} of {} on device {} did not connect to its peers within {:.1f} s",
                                          ranks[i].group, comms[i]->rank(), comms[i]->size(), comms[i]->device(),
                                          timeout.count() / 1e3));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (st != ncclSuccess) {
      const std::string what = fmt::format("{}: NCCL rank {} of {} on device {} cannot connect: NCCL error {} ({}): {}",
                                           ranks[i].group, comms[i]->rank(), comms[i]->size(), comms[i]->device(),
                                           int(st), ncclGetErrorString(st), ncclGetLastError(nullptr));
      abort_all();
      throw CollectiveError(what);
    }
  }
}

}  // namespace maestro
