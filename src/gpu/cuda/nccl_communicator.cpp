// NCCL communicators (nccl_communicator.h).
#include "gpu/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>

#include "gpu/cuda/cuda_check.h"

namespace maestro {

namespace {

void nccl_check(ncclResult_t st, const char* what, const char* file, int line) {
  if (st != ncclSuccess)
    throw CollectiveError(fmt::format("{}:{}: NCCL error {} ({}) in {}", file, line, int(st), ncclGetErrorString(st), what));
}
#define NCCL_OK(call) nccl_check((call), #call, __FILE__, __LINE__)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {
    MAESTRO_CUDA_CHECK(cudaSetDevice(device_));
    MAESTRO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (!aborted_) ncclCommDestroy(comm_);
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
    if (aborted_.exchange(true)) return;
    reason_ = reason;
    ncclCommAbort(comm_);  // wakes a rank blocked in a collective
  }

 private:
  void begin() {
    if (aborted_) throw CollectiveError(reason_);
    MAESTRO_CUDA_CHECK(cudaSetDevice(device_));
  }
  void finish() {
    const cudaError_t st = cudaStreamSynchronize(stream_);
    if (aborted_) throw CollectiveError(reason_);
    if (st != cudaSuccess) throw CollectiveError(fmt::format("NCCL collective on device {}: {}", device_, cudaGetErrorString(st)));
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::string reason_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size());
  NCCL_OK(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
  std::vector<std::shared_ptr<Communicator>> group;
  for (size_t i = 0; i < devices.size(); ++i)
    group.push_back(std::make_shared<NcclCommunicator>(comms[i], int(i), int(devices.size()), devices[i]));
  return group;
}

}  // namespace maestro
