// NCCL communicators implementing transport/collectives.h's Communicator
// for GPU ranks: buffers are device memory of the rank's device, work is
// queued on the communicator's stream, and each call returns once its
// result is written (the stream is synchronised), as the contract asks.
// Sums are NCCL's: the same bits on every rank, but not the rank-ordered
// sum of the in-process group. Uneven shards (n not a multiple of size) go
// through grouped ncclReduce / ncclBroadcast per shard, even ones through
// ncclReduceScatter / ncclAllGather. Every NCCL status is checked; a
// failure is a CollectiveError naming the call, file and line. Each call
// first waits for its device's queued work (the rank's backend wrote the
// buffer on its own stream); abort() on one rank aborts the whole group.
// The runtime gets these through make_dp_group (gpu/backend_factory.h).
#pragma once

#include <memory>
#include <vector>

#include "transport/collectives.h"

namespace maestro {

// One communicator per device of `devices` (rank i on devices[i]), all in
// this process (ncclCommInitAll) — one group of gpu/nccl_layout.h.
std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices);

}  // namespace maestro
