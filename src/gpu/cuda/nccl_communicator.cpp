// NCCL communicators (nccl_communicator.h).
#include "gpu/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_check.h"

namespace maestro {

namespace {

void nccl_check(ncclResult_t st, const char* what, const char* file, int line) {
  if (st != ncclSuccess)
    throw CollectiveError(fmt::format("{}:{}: NCCL error {} ({}) in {}", file, line, int(st), ncclGetErrorString(st), what));
}
#define NCCL_OK(call) nccl_check((call), #call, __FILE__, __LINE__)

// What the ranks of one group share: abort() on any rank ends every rank's
// communicator, so a rank blocked in a collective wakes (the runtime aborts
// one member of each dp group when a run ends, transport/collectives.h).
struct NcclGroupState {
  std::vector<ncclComm_t> comms;
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string reason;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroupState> group, int rank, int device)
      : group_(std::move(group)), comm_(group_->comms[size_t(rank)]), rank_(rank), size_(int(group_->comms.size())),
        device_(device) {
    MAESTRO_CUDA_CHECK(cudaSetDevice(device_));
    MAESTRO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (!group_->aborted) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float* data, size_t n) override {
    begin();
    NCCL_OK(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_));
    finish();
  }
  void reduce_scatter(float* out, const float* in, size_t n) override {
    begin();
    if (n % size_t(size_) == 0) {
      NCCL_OK(ncclReduceScatter(in, out, n / size_t(size_), ncclFloat32, ncclSum, comm_, stream_));
    } else {
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        const Shard s = shard_of(n, size_, r);
        NCCL_OK(ncclReduce(in + s.offset, out, s.count, ncclFloat32, ncclSum, r, comm_, stream_));
      }
      NCCL_OK(ncclGroupEnd());
    }
    finish();
  }
  void all_gather(float* out, const float* in, size_t n) override {
    begin();
    if (n % size_t(size_) == 0) {
      NCCL_OK(ncclAllGather(in, out, n / size_t(size_), ncclFloat32, comm_, stream_));
    } else {
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        const Shard s = shard_of(n, size_, r);
        NCCL_OK(ncclBroadcast(r == rank_ ? in : out + s.offset, out + s.offset, s.count, ncclFloat32, r, comm_, stream_));
      }
      NCCL_OK(ncclGroupEnd());
    }
    finish();
  }
  void broadcast(float* data, size_t n, int root) override {
    begin();
    NCCL_OK(ncclBroadcast(data, data, n, ncclFloat32, root, comm_, stream_));
    finish();
  }
  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(group_->mu);
      if (group_->aborted) return;
      group_->reason = reason.empty() ? "collective group aborted" : reason;
      group_->aborted = true;
    }
    for (ncclComm_t c : group_->comms) ncclCommAbort(c);  // wakes every rank blocked in a collective
  }

 private:
  // The buffers were written by the rank's backend on its own stream, which
  // this communicator does not know: wait for the device's queued work
  // (every stream of the device — sections sharing the GPU wait too; an
  // event handed over by the backend would wait for less).
  void begin() {
    if (group_->aborted) throw CollectiveError(reason());
    MAESTRO_CUDA_CHECK(cudaSetDevice(device_));
    MAESTRO_CUDA_CHECK(cudaDeviceSynchronize());
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
  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices) {
  auto state = std::make_shared<NcclGroupState>();
  state->comms.resize(devices.size());
  NCCL_OK(ncclCommInitAll(state->comms.data(), int(devices.size()), devices.data()));
  std::vector<std::shared_ptr<Communicator>> group;
  for (size_t i = 0; i < devices.size(); ++i) group.push_back(std::make_shared<NcclCommunicator>(state, int(i), devices[i]));
  return group;
}

}  // namespace maestro
