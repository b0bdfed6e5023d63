// RingCommunicator: the collectives of collectives.h between processes (or
// hosts), over any Transport — UCX between processes, `local` in tests.
// Ranks form a ring r -> r+1 -> … -> 0; every message is a one-sided put
// into the next rank's registered mailbox, so the receiver's CPU only
// reads memory:
//   - two slots (header + up to `chunk` floats each), written by the
//     previous rank; a flag word per slot, written after the slot's put
//     completed (the transport's completion = the bytes are there), holds
//     the message's sequence number;
//   - an ack word, written by the next rank once it has read a slot: a
//     sender waits for it before reusing a slot (two messages in flight).
// Messages carry (op, n, root) in their header; a receiver that sees
// another call than its own throws CollectiveError (calls mismatched) at
// once, the ranks waiting behind it when their wait times out.
//
// Deterministic rank-order sums (the contract of collectives.h): a sum is a
// chain 0 -> 1 -> … -> size-1 along the ring, each rank adding its own
// data to the partial it received, ((x_0 + x_1) + x_2) + …, pipelined in
// chunks, never in arrival order — bitwise the result make_local_group
// gives. Then:
//   all_reduce:     the chain, then rank size-1 broadcasts the sums along
//                   the ring (each link carries ~2n floats, as a ring
//                   all-reduce's 2n(size-1)/size);
//   reduce_scatter: the chain, then rank size-1 streams shards 0..size-2
//                   along the ring, each rank keeping its own;
//   all_gather:     the ring all-gather (size-1 steps, chunks interleaved);
//   broadcast:      a pipeline from root along the ring.
//
// Setup, per rank: construct (it allocates the mailbox in the transport),
// make the transports reach each other (UcxTransport: endpoint_info() to
// the peers, connect() theirs — after the mailbox exists), exchange
// mailbox() with both neighbours (plain data, RingMailbox has `inspect`),
// then connect(prev's, next's). One thread calls collectives at a time;
// every wait is bounded by `timeout` (CollectiveError naming the peer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "transport/collectives.h"
#include "transport/transport.h"

namespace maestro {

struct RingMailbox {
  TensorDescriptor slot0, slot1;  // [4 + chunk] f32 each: header (op, root, n) then data
  TensorDescriptor flags;         // [4] f32 = 2 u64: the sequence number in each slot
  TensorDescriptor ack;           // [2] f32 = 1 u64: the last sequence number the next rank read
  bool operator==(const RingMailbox&) const = default;
};
template <class Inspector>
auto inspect(Inspector& f, RingMailbox& x) {
  return f(x.slot0, x.slot1, x.flags, x.ack);
}

struct RingOptions {
  size_t chunk = size_t(1) << 18;                  // floats per message (1 MiB)
  std::chrono::milliseconds timeout{60'000};       // per wait for a peer
};

class RingCommunicator final : public Communicator {
 public:
  RingCommunicator(Transport& transport, int rank, int size, RingOptions options = {});
  ~RingCommunicator() override;

  RingMailbox mailbox() const;
  void connect(const RingMailbox& prev, const RingMailbox& next);

  const char* name() const override { return "ring"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(float* data, size_t n) override;
  void reduce_scatter(float* out, const float* in, size_t n) override;
  void all_gather(float* out, const float* in, size_t n) override;
  void broadcast(float* data, size_t n, int root) override;
  void abort(const std::string& reason) override;

 private:
  struct Header {
    uint32_t op, root;
    uint64_t n;
  };
  void send(const Header& h, const float* data, size_t count);
  // Waits for the next message from the previous rank, checks its header
  // and returns its data [count]; release() hands the slot back.
  const float* receive(const Header& h, size_t count);
  void release();
  void put(const TensorRef& src, const TensorDescriptor& dst, const char* what, int peer);
  template <class Ready>
  void wait_for(Ready ready, const char* what, int peer);
  void chain_sum(float* data, size_t n, uint32_t op);  // rank size-1 ends with the sums
  void stream(const Header& h, float* data, size_t n, int from, int last);  // from -> … -> last, in chunks
  void check_open(const char* call);  // throws once aborted, or before connect()
  [[noreturn]] void fail(const std::string& why);

  Transport& transport_;
  const int rank_, size_;
  const RingOptions options_;
  TensorRef slots_[2], flags_, ack_;                       // this rank's mailbox
  TensorRef out_, out_flag_[2], out_ack_;                   // staging for what it puts
  RingMailbox prev_, next_;
  bool connected_ = false;
  uint64_t sent_ = 0, received_ = 0;                       // messages on each link
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace maestro
