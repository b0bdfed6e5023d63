// The staged communicator (gpu/staged_communicator.h): a rank's buffers in
// its backend's memory, the collective run by a host group — here the CPU
// backend's memory and a ring over the local transport, one thread per
// rank. Every collective, in its separate and its in-place form (the
// sharded optimizer's), bitwise equal to the rank-order fold as the ring
// gives it; abort reaches the host group; the host buffer's pinning. (On
// the CUDA backend the same code moves the bytes with cudaMemcpy and pins
// with cudaHostRegister: not run here, no GPU.)
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "cpu/cpu_backend.h"
#include "gpu/staged_communicator.h"
#include "transport/group_values.h"
#include "transport/local_transport.h"
#include "transport/ring_communicator.h"

using namespace maestro;

namespace {

struct Group {
  std::vector<std::unique_ptr<LocalTransport>> transports;
  std::vector<std::shared_ptr<RingCommunicator>> rings;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<StagedCommunicator>> ranks;
};

Group make_group(int size, HostPinning pinning = {}) {
  Group g;
  for (int r = 0; r < size; ++r) {
    g.transports.push_back(std::make_unique<LocalTransport>());
    g.rings.push_back(std::make_shared<RingCommunicator>(*g.transports.back(), r, size, RingOptions{.chunk = 500}));
    g.backends.push_back(make_cpu_backend(1));
    g.ranks.push_back(std::make_unique<StagedCommunicator>(g.rings.back(), *g.backends.back(), pinning));
  }
  for (int r = 0; r < size; ++r)
    g.rings[size_t(r)]->connect(g.rings[size_t((r + size - 1) % size)]->mailbox(), g.rings[size_t((r + 1) % size)]->mailbox());
  return g;
}

void on_ranks(Group& g, const std::function<void(int, Backend&, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < g.ranks.size(); ++r) threads.emplace_back([&, r] { body(int(r), *g.backends[r], *g.ranks[r]); });
  for (auto& t : threads) t.join();
}

// A backend buffer of n floats holding `values` (copied in), and back out.
float* upload(Backend& b, const F& values, size_t n) {
  float* d = b.allocate(std::max<size_t>(n, 1));
  if (!values.empty()) b.copy_from_host(d, values.data(), values.size() * sizeof(float));
  return d;
}
F download(Backend& b, const float* d, size_t n) {
  F out(n);
  if (n > 0) b.copy_to_host(out.data(), d, n * sizeof(float));
  return out;
}
F slice(const F& v, Shard s) { return F(v.begin() + long(s.offset), v.begin() + long(s.offset + s.count)); }

}  // namespace

BOOST_AUTO_TEST_SUITE(staged_communicator)

BOOST_AUTO_TEST_CASE(every_collective_equals_the_host_groups_fold_in_place_or_not) {
  for (int size : {2, 3})
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1201)})
      BOOST_TEST_CONTEXT(size << " ranks, n = " << n) {
        Group g = make_group(size);
        const std::vector<F> xs = group_values(size, n, unsigned(n) + 5);
        const F sum = fold(xs);
        const size_t ranks = size_t(size);
        std::vector<F> reduced(ranks), scattered(ranks), scattered_in_place(ranks), gathered(ranks),
            gathered_in_place(ranks), cast(ranks);
        on_ranks(g, [&](int r, Backend& b, Communicator& c) {
          const F& x = xs[size_t(r)];
          const Shard s = shard_of(n, size, r);
          float* d = upload(b, x, n);
          c.all_reduce(d, n);
          reduced[size_t(r)] = download(b, d, n);

          float* in = upload(b, x, n);
          float* out = upload(b, F(s.count, -7.0f), s.count);
          c.reduce_scatter(out, in, n);
          scattered[size_t(r)] = download(b, out, s.count);
          BOOST_TEST(download(b, in, n) == x);  // the input is left as it was
          c.reduce_scatter(in + s.offset, in, n);  // in place, as ZeRO-1 does
          scattered_in_place[size_t(r)] = download(b, in + s.offset, s.count);

          float* all = upload(b, F(n, -7.0f), n);
          float* mine = upload(b, slice(x, s), s.count);
          c.all_gather(all, mine, n);
          gathered[size_t(r)] = download(b, all, n);
          float* whole = upload(b, x, n);
          c.all_gather(whole, whole + s.offset, n);  // in place
          gathered_in_place[size_t(r)] = download(b, whole, n);

          float* root = upload(b, r == 1 ? xs[1] : F(n, -1.0f), n);
          c.broadcast(root, n, 1);
          cast[size_t(r)] = download(b, root, n);
          for (float* p : {d, in, out, all, mine, whole, root}) b.release(p);
        });
        F own(n);  // every rank's own shard of its own values
        for (int q = 0; q < size; ++q) {
          const Shard sq = shard_of(n, size, q);
          std::copy_n(xs[size_t(q)].begin() + long(sq.offset), sq.count, own.begin() + long(sq.offset));
        }
        for (int r = 0; r < size; ++r) {
          const Shard s = shard_of(n, size, r);
          BOOST_TEST(reduced[size_t(r)] == sum);  // bitwise: the ring's rank-order sum
          BOOST_TEST(scattered[size_t(r)] == slice(sum, s));
          BOOST_TEST(scattered_in_place[size_t(r)] == slice(sum, s));
          BOOST_TEST(gathered[size_t(r)] == own);
          BOOST_TEST(gathered_in_place[size_t(r)] == own);
          BOOST_TEST(cast[size_t(r)] == xs[1]);
        }
      }
}

// With a HostPinning (the runtime's cudaHostRegister), the host buffer is
// pinned when it is made, unpinned before it is replaced by a larger one and
// when the communicator goes; one that could not be pinned is never
// unpinned; sums unchanged.
BOOST_AUTO_TEST_CASE(host_buffer_pinned_per_growth_and_unpinned_before_it_goes) {
  struct Log {
    std::mutex mu;
    std::vector<void*> pinned, unpinned;
    int refuse = -1;  // the pin call (0-based) that fails
    int calls = 0;
  };
  for (int refuse : {-1, 1})
    BOOST_TEST_CONTEXT("pin call " << refuse << " refused") {
      auto log = std::make_shared<Log>();
      log->refuse = refuse;
      HostPinning pinning{[log](void* base, size_t bytes) {
                            std::lock_guard lock(log->mu);
                            BOOST_TEST(bytes > 0u);
                            if (log->calls++ == log->refuse) return false;
                            log->pinned.push_back(base);
                            return true;
                          },
                          [log](void* base) {
                            std::lock_guard lock(log->mu);
                            log->unpinned.push_back(base);
                          }};
      const std::vector<F> small = group_values(2, 7, 3), large = group_values(2, 1201, 4);
      {
        Group g = make_group(2, pinning);
        std::vector<F> sums(2);
        for (const auto* xs : {&small, &large, &small})
          on_ranks(g, [&](int r, Backend& b, Communicator& c) {
            const size_t n = (*xs)[size_t(r)].size();
            float* d = upload(b, (*xs)[size_t(r)], n);
            c.all_reduce(d, n);
            sums[size_t(r)] = download(b, d, n);
            b.release(d);
          });
        for (const F& got : sums) BOOST_TEST(got == fold(small));
        std::lock_guard lock(log->mu);
        BOOST_TEST(log->calls == 4);  // two ranks, each buffer made twice (7 floats, then 1,201)
        BOOST_TEST(log->unpinned.size() == (refuse < 0 ? 2u : 1u));  // the first buffers, before they went
      }
      BOOST_TEST(log->unpinned.size() == log->pinned.size());  // the rest when the ranks went
      std::sort(log->pinned.begin(), log->pinned.end());
      std::sort(log->unpinned.begin(), log->unpinned.end());
      BOOST_TEST(log->unpinned == log->pinned);
    }
}

BOOST_AUTO_TEST_CASE(rank_size_and_abort_are_the_host_groups) {
  Group g = make_group(3);
  BOOST_TEST(g.ranks[2]->rank() == 2);
  BOOST_TEST(g.ranks[2]->size() == 3);
  g.ranks[0]->abort("the run stopped");
  float* d = upload(*g.backends[0], F(10, 1.0f), 10);
  BOOST_CHECK_EXCEPTION(g.ranks[0]->all_reduce(d, 10), CollectiveError, [](const CollectiveError& e) {
    return std::string(e.what()).find("the run stopped") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(g.rings[0]->broadcast(d, 10, 0), CollectiveError, [](const CollectiveError& e) {
    return std::string(e.what()).find("the run stopped") != std::string::npos;
  });
  g.backends[0]->release(d);
}

BOOST_AUTO_TEST_SUITE_END()
