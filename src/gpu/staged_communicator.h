// StagedCommunicator: a Communicator (transport/collectives.h) for a rank
// whose buffers live in its backend's memory (a GPU's), over a group that
// only reaches host memory — the dp ring over the transfer engine between
// processes (transport/ring_communicator.h; UCX here registers host memory
// only, ucx_transport.h). Each call copies the rank's input to a host
// buffer (Backend::copy_to_host, which first waits for the work queued on
// the rank's stream), runs the same collective in place on the host group,
// and copies the result back (Backend::copy_from_host). Sums, shards and
// errors are the host group's; abort() is forwarded.
//
// The runtime wraps a section's cross-process ring in one when the section
// runs on the CUDA backend (actors/run_setup.cpp); with NCCL the group
// takes NCCL across the processes instead where its ranks are on GPUs of
// their own (actors/processes.cpp, connect_peers), and groups held whole by
// one process are NCCL communicators (gpu/cuda/nccl_communicator.h).
// The host buffer is kept between calls and, with a HostPinning (the
// runtime passes cudaHostRegister's, gpu/device_query.h), page-locked, so
// the device copies are DMA; pageable where pinning fails or is not given.
#pragma once

#include <memory>
#include <string>

#include "nn/backend.h"
#include "transport/collectives.h"
#include "transport/transport.h"

namespace maestro {

class StagedCommunicator final : public Communicator {
 public:
  // `backend` holds the rank's buffers and must outlive this communicator.
  StagedCommunicator(std::shared_ptr<Communicator> host_group, Backend& backend, HostPinning pinning = {});
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  const char* name() const override { return "staged"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void all_reduce(float* data, size_t n) override;
  void reduce_scatter(float* out, const float* in, size_t n) override;
  void all_gather(float* out, const float* in, size_t n) override;
  void broadcast(float* data, size_t n, int root) override;
  void abort(const std::string& reason) override { host_->abort(reason); }

 private:
  float* host(size_t n);  // the host buffer, at least n floats
  void to_host(float* dst, const float* src, size_t n);
  void from_host(float* dst, const float* src, size_t n);

  void free_buffer();

  std::shared_ptr<Communicator> host_;
  Backend& backend_;
  HostPinning pinning_;
  std::unique_ptr<float[]> buffer_;  // [capacity_]
  size_t capacity_ = 0;
  bool pinned_ = false;
};

}  // namespace maestro
