// check_collectives: runs every call of transport/collectives.h's
// Communicator over a whole group — one thread per rank, buffers in each
// rank's backend memory — and checks each result exactly against the sums
// worked out on the host. What bench/gpu's `nccl` check runs on the NCCL
// communicators of the GPUs it finds (one GPU: a group of one rank, since
// NCCL allows no two ranks on one GPU), so that the NCCL code runs even on
// a machine with a single GPU.
//
// Inputs are small whole numbers (exact in fp32), so a sum is exact in any
// order and a correct result matches bit for bit whichever order the
// implementation adds in; each element's value depends on its index, so a
// shard at the wrong offset is caught. Covered: all_reduce, reduce_scatter
// and all_gather out of place and in place (the sharded optimizer's way),
// broadcast from every root, at sizes that divide evenly among the ranks
// and that do not, and last abort(): every rank's next call must throw
// CollectiveError naming the reason. Inputs are written by the backends
// (copy_from_host, queued work on a GPU) right before each call, so a
// communicator that does not wait for its backend's work may read stale
// bytes and fail (a race on a GPU: likely caught, not certainly). Host code against Backend and Communicator only:
// unit-tested here over the in-process group with CPU backends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/backend.h"
#include "transport/collectives.h"

namespace maestro {

struct CollectiveCheck {
  std::string call;    // "reduce_scatter(in place) n=4097"
  size_t wrong = 0;    // elements not as expected, over every rank
  std::string error;   // a rank's exception, or ""
  bool ok() const { return wrong == 0 && error.empty(); }
};

// group[r] is rank r (group[r]->rank() == r, size() == group.size()), its
// buffers in backends[r]'s memory. Sizes: 1, 4,099 and 2^20 + 3 elements,
// and 2^20 · size (an even split). Throws std::invalid_argument when the
// group's ranks are not 0..size−1 in order or the counts differ.
std::vector<CollectiveCheck> check_collectives(const std::vector<std::shared_ptr<Communicator>>& group,
                                               const std::vector<Backend*>& backends);

}  // namespace maestro
