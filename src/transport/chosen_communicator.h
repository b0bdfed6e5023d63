// ChosenCommunicator: a Communicator that is one of several candidates,
// chosen once the peers are known — a GPU dp group spanning processes is
// NCCL across them when its ranks are on distinct GPUs and the staged ring
// over the transfer engine when two share one (actors/processes.cpp,
// connect_peers); the runner takes its communicator at set-up, before
// either is known. Every process chooses from the same information, so the
// ranks of a group agree. A collective before the choice is a
// CollectiveError; abort() reaches every candidate (the one chosen and the
// ones left, which may hold resources of their own).
#pragma once

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/collectives.h"

namespace maestro {

class ChosenCommunicator final : public Communicator {
 public:
  // Candidates of one rank and size.
  explicit ChosenCommunicator(std::vector<std::shared_ptr<Communicator>> candidates)
      : candidates_(std::move(candidates)) {
    if (candidates_.empty()) throw std::invalid_argument("ChosenCommunicator: no candidates");
    for (const auto& c : candidates_)
      if (c->rank() != candidates_[0]->rank() || c->size() != candidates_[0]->size())
        throw std::invalid_argument("ChosenCommunicator: candidates of different ranks or sizes");
  }
  // Takes candidate `i` from now on (once; before any collective).
  void choose(size_t i) {
    if (i >= candidates_.size()) throw std::out_of_range("ChosenCommunicator::choose");
    chosen_.store(int(i));
  }
  // The candidate chosen, null before.
  std::shared_ptr<Communicator> chosen() const {
    const int i = chosen_.load();
    return i < 0 ? nullptr : candidates_[size_t(i)];
  }

  const char* name() const override {
    const auto c = chosen();
    return c ? c->name() : "unchosen";
  }
  int rank() const override { return candidates_[0]->rank(); }
  int size() const override { return candidates_[0]->size(); }
  void all_reduce(float* data, size_t n) override { get().all_reduce(data, n); }
  void reduce_scatter(float* out, const float* in, size_t n) override { get().reduce_scatter(out, in, n); }
  void all_gather(float* out, const float* in, size_t n) override { get().all_gather(out, in, n); }
  void broadcast(float* data, size_t n, int root) override { get().broadcast(data, n, root); }
  void abort(const std::string& reason) override {
    for (const auto& c : candidates_) c->abort(reason);
  }

 private:
  Communicator& get() const {
    const int i = chosen_.load();
    if (i < 0) throw CollectiveError("a collective before its group chose how to communicate (not connected)");
    return *candidates_[size_t(i)];
  }

  std::vector<std::shared_ptr<Communicator>> candidates_;
  std::atomic<int> chosen_{-1};
};

}  // namespace maestro
