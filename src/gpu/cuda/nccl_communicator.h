// NCCL communicators implementing transport/collectives.h's Communicator
// for GPU ranks: buffers are device memory of the rank's device, work is
// queued on the communicator's stream after an event of the rank's backend
// stream (order_nccl_after), and each call returns once its result is
// written (the stream is synchronised), as the contract asks.
// Sums are NCCL's: the same bits on every rank, but not the rank-ordered
// sum of the in-process group. Uneven shards (n not a multiple of size) go
// through grouped ncclReduce / ncclBroadcast per shard, even ones through
// ncclReduceScatter / ncclAllGather. Every NCCL status is checked; a
// failure is a CollectiveError naming the call, file and line. Each call
// first waits, on the device, for the work its backend queued (which wrote
// the buffer) — for the whole device's when the rank does not know that
// backend's stream; abort() on one rank aborts the whole group.
// The runtime gets these through make_dp_group (gpu/backend_factory.h).
//
// A group spanning processes (a dp group whose replicas several processes
// host) is one NCCL communicator across them, as torch.distributed makes
// it: the process holding rank 0 makes the group's unique id
// (make_nccl_unique_id: ncclGetUniqueId, which needs no GPU), the run hands
// it to every process (over CAF, actors/processes.h), each process lays out
// its ranks before (make_nccl_ranks) and connects them all in one call
// (connect_nccl_ranks) while the others do. Those communicators are
// non-blocking, so that connecting is bounded in time and a collective
// waiting on a dead peer ends when the process aborts its group.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/nccl_layout.h"  // NcclConnection
#include "transport/collectives.h"

namespace maestro {

// One communicator per device of `devices` (rank i on devices[i]), all in
// this process (ncclCommInitAll) — one group of gpu/nccl_layout.h.
std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices);

// Orders every later collective of `rank` after the work queued on
// `cuda_stream` (a cudaStream_t of the rank's device: its backend's,
// cuda_backend_stream) up to the call, by an event, instead of after all of
// its device's work. False, and nothing changed, when `rank` is not an
// NCCL rank or the stream is null.
bool order_nccl_after(Communicator& rank, void* cuda_stream);

// A new group's unique id: NCCL_UNIQUE_ID_BYTES bytes.
std::vector<uint8_t> make_nccl_unique_id();
// This process's ranks `ranks` (rank i on devices[i]) of a group of `size`
// ranks spanning processes: not connected (a collective on them throws)
// until connect_nccl_ranks. Abort on one aborts this process's others.
std::vector<std::shared_ptr<Communicator>> make_nccl_ranks(int size, const std::vector<int>& ranks,
                                                           const std::vector<int>& devices);
// Connects every rank of `ranks` (all of this process's, of every group:
// one NCCL group call) — it returns once every peer of every group has
// connected too. Refuses an id of the wrong size or a rank that is not
// make_nccl_ranks's (std::invalid_argument) before any NCCL call; throws
// CollectiveError for an NCCL failure or when `timeout` passes first (every
// rank of the call is then aborted).
void connect_nccl_ranks(const std::vector<NcclConnection>& ranks, std::chrono::milliseconds timeout);

}  // namespace maestro
