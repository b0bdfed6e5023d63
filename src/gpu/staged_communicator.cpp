// StagedCommunicator (see staged_communicator.h): backend memory -> host,
// the host group's collective in place, host -> backend memory.
#include "gpu/staged_communicator.h"

namespace maestro {

StagedCommunicator::StagedCommunicator(std::shared_ptr<Communicator> host_group, Backend& backend,
                                       HostPinning pinning)
    : host_(std::move(host_group)), backend_(backend), pinning_(std::move(pinning)) {}

StagedCommunicator::~StagedCommunicator() { free_buffer(); }

void StagedCommunicator::free_buffer() {
  if (pinned_) pinning_.unpin(buffer_.get());
  pinned_ = false;
  buffer_.reset();
  capacity_ = 0;
}

float* StagedCommunicator::host(size_t n) {
  if (capacity_ < n) {  // grows to what it is asked for; every caller writes before it reads
    free_buffer();
    buffer_ = std::make_unique_for_overwrite<float[]>(n);
    capacity_ = n;
    pinned_ = pinning_.pin && pinning_.pin(buffer_.get(), n * sizeof(float));
  }
  return buffer_.get();
}

void StagedCommunicator::to_host(float* dst, const float* src, size_t n) {
  if (n > 0) backend_.copy_to_host(dst, src, n * sizeof(float));
}

void StagedCommunicator::from_host(float* dst, const float* src, size_t n) {
  if (n > 0) backend_.copy_from_host(dst, src, n * sizeof(float));
}

// data[n] on the device -> h[n] -> Σ in place -> data.
void StagedCommunicator::all_reduce(float* data, size_t n) {
  float* h = host(n);
  to_host(h, data, n);
  host_->all_reduce(h, n);
  from_host(data, h, n);
}

// in[n] -> h[n]; the host group's in-place form leaves this rank's shard of
// the sum at h + offset -> out[count].
void StagedCommunicator::reduce_scatter(float* out, const float* in, size_t n) {
  const Shard mine = shard_of(n, size(), rank());
  float* h = host(n);
  to_host(h, in, n);
  host_->reduce_scatter(h + mine.offset, h, n);
  from_host(out, h + mine.offset, mine.count);
}

// in[count] -> h + offset; the host group's in-place all-gather fills h[n] -> out[n].
void StagedCommunicator::all_gather(float* out, const float* in, size_t n) {
  const Shard mine = shard_of(n, size(), rank());
  float* h = host(n);
  to_host(h + mine.offset, in, mine.count);
  host_->all_gather(h, h + mine.offset, n);
  from_host(out, h, n);
}

// The root's data[n] -> h; every rank's h = the root's -> data.
void StagedCommunicator::broadcast(float* data, size_t n, int root) {
  float* h = host(n);
  if (rank() == root) to_host(h, data, n);
  host_->broadcast(h, n, root);
  from_host(data, h, n);
}

}  // namespace maestro
