// Collectives: all-reduce, reduce-scatter, all-gather and broadcast over a
// group of ranks — the section replicas of one data-parallel group today,
// the tensor-parallel ranks of a replica next (issue 13). The runtime is
// written against `Communicator`; `make_local_group` is the in-process
// implementation (ranks are threads of one process, buffers host memory);
// NCCL (GPU ranks, device pointers, work enqueued on the rank's stream)
// and the multi-process transfer engine implement the same calls.
//
// Contract: every rank of a group calls the same collectives in the same
// order with the same n (and root); a mismatch is a CollectiveError on
// every rank. Sums are elementwise in rank order, ((x_0 + x_1) + x_2) + …,
// never in arrival order, so the result is bitwise the same on every rank,
// in every run, whichever rank arrives first. A call returns when its
// result may be read (in-process: when it is written).
//
// Shards: reduce-scatter and all-gather cut n elements into `size`
// contiguous shards (shard_of), lower ranks taking the one extra element
// when n is not a multiple of size. Both may run in place, as NCCL's and
// MPI's do (the sharded optimizer does, docs/runtime.md): reduce_scatter
// with out == in + this rank's shard offset, all_gather with in == out +
// that offset.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace maestro {

struct Shard {
  size_t offset = 0, count = 0;
};
// Rank `rank`'s shard of n elements over `size` ranks.
Shard shard_of(size_t n, int size, int rank);

// A collective that cannot complete: mismatched calls, or an aborted group.
struct CollectiveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[n] = Σ_r data_r[n], in place on every rank.
  virtual void all_reduce(float* data, size_t n) = 0;
  // in[n] on every rank; out[shard_of(n, size, rank).count] = Σ_r in_r over this rank's shard.
  virtual void reduce_scatter(float* out, const float* in, size_t n) = 0;
  // in[shard_of(n, size, rank).count] on every rank; out[n] = the shards at their offsets.
  virtual void all_gather(float* out, const float* in, size_t n) = 0;
  // data[n] = data_root[n] on every rank.
  virtual void broadcast(float* data, size_t n, int root) = 0;

  // Ends the group: every rank waiting in a collective, and every later
  // call, throws CollectiveError(reason). For a run that stops while a
  // rank may be waiting for a peer that will never come.
  virtual void abort(const std::string& reason) = 0;
};

// `size` communicators of one in-process group, [rank]; each is used by one
// thread at a time (its replica's compute worker).
std::vector<std::shared_ptr<Communicator>> make_local_group(int size);

}  // namespace maestro
