// RingCommunicator (see ring_communicator.h): mailbox messages over a
// Transport's one-sided puts, and the collectives built from them.
#include "transport/ring_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace maestro {

namespace {

enum Op : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast };
constexpr int64_t kHeader = 4;  // floats: Header is 16 bytes

const char* op_name(uint32_t op) {
  switch (op) {
    case kAllReduce: return "all_reduce";
    case kReduceScatter: return "reduce_scatter";
    case kAllGather: return "all_gather";
    case kBroadcast: return "broadcast";
  }
  return "an unknown call";
}

// A word of registered memory another rank writes with a put.
uint64_t load(const TensorRef& t, size_t word) {
  auto* p = reinterpret_cast<uint64_t*>(t.buffer->data) + word;
  return std::atomic_ref<uint64_t>(*p).load(std::memory_order_acquire);
}
void store(TensorRef& t, uint64_t v) { std::memcpy(t.buffer->data, &v, 8); }

// `d` narrowed to `bytes` bytes at `offset` within it.
TensorDescriptor part(TensorDescriptor d, uint64_t offset, uint64_t bytes) {
  d.offset += offset;
  d.bytes = bytes;
  return d;
}

TensorRef view(const TensorRef& t, int64_t n) {
  TensorRef v = t;
  v.shape = {n};
  return v;
}

size_t chunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }

}  // namespace

RingCommunicator::RingCommunicator(Transport& transport, int rank, int size, RingOptions options)
    : transport_(transport), rank_(rank), size_(size), options_(options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument(fmt::format("ring communicator: rank {} of {}", rank, size));
  if (options_.chunk == 0) throw std::invalid_argument("ring communicator: chunk of 0 floats");
  const int64_t slot = kHeader + int64_t(options_.chunk);
  for (TensorRef& s : slots_) s = transport_.allocate({slot});
  flags_ = transport_.allocate({4});
  ack_ = transport_.allocate({2});
  out_ = transport_.allocate({slot});
  for (TensorRef& f : out_flag_) f = transport_.allocate({2});
  out_ack_ = transport_.allocate({2});
}

RingCommunicator::~RingCommunicator() = default;

RingMailbox RingCommunicator::mailbox() const {
  return {transport_.describe(slots_[0]), transport_.describe(slots_[1]), transport_.describe(flags_),
          transport_.describe(ack_)};
}

void RingCommunicator::connect(const RingMailbox& prev, const RingMailbox& next) {
  prev_ = prev;
  next_ = next;
  connected_ = true;
}

void RingCommunicator::fail(const std::string& why) {
  throw CollectiveError(fmt::format("ring rank {} of {}: {}", rank_, size_, why));
}

template <class Ready>
void RingCommunicator::wait_for(Ready ready, const char* what, int peer) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (int spins = 0; !ready(); ++spins) {
    check_open("a collective");
    transport_.progress();  // the peer's bytes and acks land by this thread's progress too
    if (spins < 2000) continue;
    if (std::chrono::steady_clock::now() > deadline)
      fail(fmt::format("no {} from rank {} within {} ms", what, peer, options_.timeout.count()));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void RingCommunicator::put(const TensorRef& src, const TensorDescriptor& dst, const char* what, int peer) {
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> done = result->get_future();
  transport_.put(src, dst, [result](const std::string& error) { result->set_value(error); });
  wait_for([&] { return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }, "put completion",
           peer);
  if (std::string error = done.get(); !error.empty()) fail(fmt::format("{} to rank {}: {}", what, peer, error));
}

void RingCommunicator::send(const Header& h, const float* data, size_t count) {
  const int next = (rank_ + 1) % size_;
  const uint64_t seq = ++sent_;
  const size_t slot = seq % 2;
  // The slot is free once the next rank read the message two before.
  wait_for([&] { return load(ack_, 0) + 2 >= seq; }, "ack", next);
  std::memcpy(out_.buffer->data, &h, sizeof h);
  if (count > 0) std::memcpy(out_.buffer->data + sizeof h, data, count * sizeof(float));
  const TensorDescriptor& target = slot == 0 ? next_.slot0 : next_.slot1;
  put(view(out_, kHeader + int64_t(count)), part(target, 0, sizeof h + count * sizeof(float)), "message", next);
  store(out_flag_[slot], seq);
  put(out_flag_[slot], part(next_.flags, 8 * slot, 8), "flag", next);
}

const float* RingCommunicator::receive(const Header& h, size_t count) {
  const int prev = (rank_ + size_ - 1) % size_;
  const uint64_t seq = received_ + 1;
  const size_t slot = seq % 2;
  wait_for([&] { return load(flags_, slot) == seq; }, op_name(h.op), prev);
  Header got;
  std::memcpy(&got, slots_[slot].buffer->data, sizeof got);
  if (got.op != h.op || got.n != h.n || got.root != h.root)
    fail(fmt::format("calls mismatched: this rank is in {}(n={}, root={}), rank {} in {}(n={}, root={})",
                     op_name(h.op), h.n, h.root, prev, op_name(got.op), got.n, got.root));
  (void)count;
  return reinterpret_cast<const float*>(slots_[slot].buffer->data + sizeof got);
}

void RingCommunicator::release() {
  const int prev = (rank_ + size_ - 1) % size_;
  store(out_ack_, ++received_);
  put(out_ack_, part(prev_.ack, 0, 8), "ack", prev);
}

// data[n] on rank size-1 = Σ_r data_r in rank order; other ranks' data is
// their partial sum.
void RingCommunicator::chain_sum(float* data, size_t n, uint32_t op) {
  const Header h{op, 0, n};
  for (size_t c = 0; c < chunks(n, options_.chunk); ++c) {
    const size_t at = c * options_.chunk, k = std::min(options_.chunk, n - at);
    if (rank_ > 0) {
      const float* partial = receive(h, k);
      for (size_t i = 0; i < k; ++i) data[at + i] = partial[i] + data[at + i];  // (x_0 + … + x_{r-1}) + x_r
      release();
    }
    if (rank_ < size_ - 1) send(h, data + at, k);
  }
}

// data[n] of rank `from` reaches every rank after it up to `last` (ring order).
void RingCommunicator::stream(const Header& h, float* data, size_t n, int from, int last) {
  const int at_rank = (rank_ - from + size_) % size_, end = (last - from + size_) % size_;
  if (at_rank > end) return;  // not on the path
  for (size_t c = 0; c < chunks(n, options_.chunk); ++c) {
    const size_t at = c * options_.chunk, k = std::min(options_.chunk, n - at);
    if (at_rank > 0) {
      std::memcpy(data + at, receive(h, k), k * sizeof(float));
      release();
    }
    if (at_rank < end) send(h, data + at, k);
  }
}

void RingCommunicator::check_open(const char* call) {
  if (aborted_) {
    std::lock_guard lock(abort_mu_);
    fail(abort_reason_);
  }
  if (!connected_ && size_ > 1) fail(fmt::format("{} before connect()", call));
}

void RingCommunicator::all_reduce(float* data, size_t n) {
  check_open("all_reduce");
  if (size_ == 1) return;
  chain_sum(data, n, kAllReduce);
  stream({kAllReduce, 0, n}, data, n, size_ - 1, size_ - 2);
}

void RingCommunicator::reduce_scatter(float* out, const float* in, size_t n) {
  check_open("reduce_scatter");
  const Shard mine = shard_of(n, size_, rank_);
  if (size_ == 1) {
    std::copy(in, in + n, out);
    return;
  }
  std::vector<float> sums(in, in + n);
  chain_sum(sums.data(), n, kReduceScatter);
  for (int s = 0; s < size_ - 1; ++s) {  // rank size-1 -> 0 -> … -> s
    const Shard shard = shard_of(n, size_, s);
    stream({kReduceScatter, uint32_t(s), n}, sums.data() + shard.offset, shard.count, size_ - 1, s);
  }
  std::copy_n(sums.data() + mine.offset, mine.count, out);
}

void RingCommunicator::all_gather(float* out, const float* in, size_t n) {
  check_open("all_gather");
  const Shard mine = shard_of(n, size_, rank_);
  std::copy_n(in, mine.count, out + mine.offset);
  if (size_ == 1) return;
  const Header h{kAllGather, 0, n};
  // Step t: send shard rank-t to the next rank, receive shard rank-t-1
  // from the previous one, a chunk of each in turn.
  for (int t = 0; t < size_ - 1; ++t) {
    const Shard out_shard = shard_of(n, size_, (rank_ - t + size_) % size_);
    const Shard in_shard = shard_of(n, size_, (rank_ - t - 1 + 2 * size_) % size_);
    const size_t m = std::max(chunks(out_shard.count, options_.chunk), chunks(in_shard.count, options_.chunk));
    for (size_t c = 0; c < m; ++c) {
      const size_t at = c * options_.chunk;
      if (at < out_shard.count)
        send(h, out + out_shard.offset + at, std::min(options_.chunk, out_shard.count - at));
      if (at < in_shard.count) {
        const size_t k = std::min(options_.chunk, in_shard.count - at);
        std::memcpy(out + in_shard.offset + at, receive(h, k), k * sizeof(float));
        release();
      }
    }
  }
}

void RingCommunicator::broadcast(float* data, size_t n, int root) {
  check_open("broadcast");
  if (root < 0 || root >= size_) fail(fmt::format("broadcast from rank {} of {}", root, size_));
  if (size_ == 1) return;
  stream({kBroadcast, uint32_t(root), n}, data, n, root, (root + size_ - 1) % size_);
}

void RingCommunicator::abort(const std::string& reason) {
  std::lock_guard lock(abort_mu_);
  abort_reason_ = reason;
  aborted_ = true;
}

}  // namespace maestro
