// The in-process collectives (see collectives.h). Each call is two
// barriers: at the first, every rank has published its buffers and the
// last to arrive checks that the calls match; then every rank computes its
// own part reading the others' buffers (a reduce over its shard in rank
// order, written to every rank's output; or a copy into its own output);
// at the second, all parts are written, so no rank returns — and reuses a
// buffer — while another still reads it.
#include "transport/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace maestro {

Shard shard_of(size_t n, int size, int rank) {
  const size_t base = n / size_t(size), extra = n % size_t(size), r = size_t(rank);
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

namespace {

enum class Op { AllReduce, ReduceScatter, AllGather, Broadcast };

const char* op_name(Op op) {
  switch (op) {
    case Op::AllReduce: return "all_reduce";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::AllGather: return "all_gather";
    case Op::Broadcast: return "broadcast";
  }
  return "?";
}

struct Call {
  Op op = Op::AllReduce;
  float* out = nullptr;
  const float* in = nullptr;
  size_t n = 0;
  int root = 0;
};

struct LocalGroup {
  explicit LocalGroup(int size) : size(size), calls(size_t(size)) {}

  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  uint64_t generation = 0;
  std::string aborted;
  std::string mismatch;  // of the current call, set by the last to arrive
  std::vector<Call> calls;

  // Blocks until all ranks have arrived (the last runs `last` first).
  template <class Last>
  void barrier(std::unique_lock<std::mutex>& lock, Last last) {
    if (!aborted.empty()) throw CollectiveError(aborted);
    const uint64_t gen = generation;
    if (++waiting == size) {
      last();
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !aborted.empty(); });
    }
    if (generation == gen) throw CollectiveError(aborted);
  }

  void run(int rank, const Call& call) {
    {
      std::unique_lock lock(mu);
      calls[size_t(rank)] = call;
      barrier(lock, [&] { mismatch = check(); });
      if (!mismatch.empty()) throw CollectiveError(mismatch);
    }
    compute(rank);
    std::unique_lock lock(mu);
    barrier(lock, [] {});
  }

  std::string check() const {
    const Call& c0 = calls[0];
    for (int r = 1; r < size; ++r) {
      const Call& c = calls[size_t(r)];
      if (c.op != c0.op || c.n != c0.n || c.root != c0.root)
        return fmt::format("mismatched collectives: rank 0 called {}(n = {}, root {}), rank {} {}(n = {}, root {})",
                           op_name(c0.op), c0.n, c0.root, r, op_name(c.op), c.n, c.root);
    }
    if (c0.op == Op::Broadcast && (c0.root < 0 || c0.root >= size))
      return fmt::format("broadcast from root {} in a group of {}", c0.root, size);
    return {};
  }

  // This rank's part of the current call (all calls are published and equal).
  void compute(int rank) {
    const Call& mine = calls[size_t(rank)];
    const size_t n = mine.n;
    switch (mine.op) {
      case Op::AllReduce: {  // reduce this rank's shard, write it to every rank
        const Shard sh = shard_of(n, size, rank);
        for (size_t i = sh.offset; i < sh.offset + sh.count; ++i) {
          float s = calls[0].in[i];
          for (int r = 1; r < size; ++r) s += calls[size_t(r)].in[i];
          for (int r = 0; r < size; ++r) calls[size_t(r)].out[i] = s;
        }
        break;
      }
      case Op::ReduceScatter: {
        const Shard sh = shard_of(n, size, rank);
        for (size_t i = 0; i < sh.count; ++i) {
          float s = calls[0].in[sh.offset + i];
          for (int r = 1; r < size; ++r) s += calls[size_t(r)].in[sh.offset + i];
          mine.out[i] = s;
        }
        break;
      }
      case Op::AllGather:
        for (int r = 0; r < size; ++r) {
          const Shard sh = shard_of(n, size, r);
          if (sh.count) std::memmove(mine.out + sh.offset, calls[size_t(r)].in, sh.count * sizeof(float));
        }
        break;
      case Op::Broadcast:
        if (rank != mine.root && n) std::memcpy(mine.out, calls[size_t(mine.root)].in, n * sizeof(float));
        break;
    }
  }

  void abort(const std::string& reason) {
    std::lock_guard lock(mu);
    if (aborted.empty()) aborted = reason.empty() ? "collective group aborted" : reason;
    cv.notify_all();
  }
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  const char* name() const override { return "local"; }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  void all_reduce(float* data, size_t n) override { group_->run(rank_, {Op::AllReduce, data, data, n, 0}); }
  void reduce_scatter(float* out, const float* in, size_t n) override {
    group_->run(rank_, {Op::ReduceScatter, out, in, n, 0});
  }
  void all_gather(float* out, const float* in, size_t n) override {
    group_->run(rank_, {Op::AllGather, out, in, n, 0});
  }
  void broadcast(float* data, size_t n, int root) override { group_->run(rank_, {Op::Broadcast, data, data, n, root}); }
  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_local_group(int size) {
  if (size < 1) throw std::invalid_argument(fmt::format("a collective group of {} ranks", size));
  auto group = std::make_shared<LocalGroup>(size);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<LocalCommunicator>(group, r));
  return out;
}

}  // namespace maestro
