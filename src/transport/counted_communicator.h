// CountedCommunicator: a Communicator that passes every call on to another
// and counts the bytes it all-reduced — the runtime's measured collective
// volume (a replica's tensor-parallel all-reduce bytes per step, reported
// beside the planner's estimate: docs/PERFORMANCE.md). Counts are atomic:
// the rank's worker adds, the trainer reads after the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/collectives.h"

namespace maestro {

class CountedCommunicator final : public Communicator {
 public:
  explicit CountedCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(float* data, size_t n) override {
    all_reduce_bytes_ += n * sizeof(float);
    inner_->all_reduce(data, n);
  }
  void reduce_scatter(float* out, const float* in, size_t n) override { inner_->reduce_scatter(out, in, n); }
  void all_gather(float* out, const float* in, size_t n) override { inner_->all_gather(out, in, n); }
  void broadcast(float* data, size_t n, int root) override { inner_->broadcast(data, n, root); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

  // Σ n·sizeof(float) over this rank's all_reduce calls so far.
  uint64_t all_reduce_bytes() const { return all_reduce_bytes_.load(); }

 private:
  std::shared_ptr<Communicator> inner_;
  std::atomic<uint64_t> all_reduce_bytes_{0};
};

}  // namespace maestro
