// The ring communicator (transport/ring_communicator.h) over `local` and
// over UCX with UCX_TLS=tcp and cma,sysv,self — each rank a thread with its
// own transport, connected by endpoint info and mailboxes as processes
// are: every collective bitwise equal to the rank-order fold for 2 and 3
// ranks, lengths spanning several chunks; mismatched calls, a silent peer
// and abort end in CollectiveError on every rank, in bounded time.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "rdma/ucx_transport.h"
#include "transport/group_values.h"
#include "transport/local_transport.h"
#include "transport/ring_communicator.h"

using namespace maestro;

namespace {

const std::vector<std::string> kKinds{"local", "tcp", "cma,sysv,self"};  // local, or UCX_TLS

struct Ring {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<std::unique_ptr<RingCommunicator>> ranks;
};

Ring make_ring(const std::string& kind, int size, RingOptions options) {
  Ring g;
  for (int r = 0; r < size; ++r) {
    if (kind == "local") g.transports.push_back(std::make_unique<LocalTransport>());
    else g.transports.push_back(std::make_unique<UcxTransport>(UcxOptions{kind}));
    g.ranks.push_back(std::make_unique<RingCommunicator>(*g.transports.back(), r, size, options));
  }
  for (int r = 0; r < size; ++r) {
    const int prev = (r + size - 1) % size, next = (r + 1) % size;
    if (auto* u = dynamic_cast<UcxTransport*>(g.transports[size_t(r)].get()))
      for (int peer : {prev, next})
        if (peer != r) u->connect(dynamic_cast<UcxTransport&>(*g.transports[size_t(peer)]).endpoint_info());
    g.ranks[size_t(r)]->connect(g.ranks[size_t(prev)]->mailbox(), g.ranks[size_t(next)]->mailbox());
  }
  return g;
}

// body(rank, comm) on one thread per rank.
void on_ranks(Ring& g, const std::function<void(int, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < g.ranks.size(); ++r) threads.emplace_back([&, r] { body(int(r), *g.ranks[r]); });
  for (auto& t : threads) t.join();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ring_communicator)

BOOST_AUTO_TEST_CASE(every_collective_equals_the_rank_order_fold_bitwise) {
  for (const std::string& kind : kKinds)
    for (int size : {2, 3})
      BOOST_TEST_CONTEXT(kind << ", " << size << " ranks") {
        Ring g = make_ring(kind, size, RingOptions{.chunk = 1000});
        for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(3001)}) {
          BOOST_TEST_CONTEXT("n = " << n) {
            const std::vector<F> xs = group_values(size, n, unsigned(n));
            const F sum = fold(xs);
            const size_t ranks = size_t(size);
            std::vector<F> reduced(ranks), scattered(ranks), gathered(ranks), cast(ranks);
            on_ranks(g, [&](int r, Communicator& c) {
              F a = xs[size_t(r)];
              c.all_reduce(a.data(), n);
              reduced[size_t(r)] = a;
              const Shard s = shard_of(n, size, r);
              F shard(s.count);
              c.reduce_scatter(shard.data(), xs[size_t(r)].data(), n);
              scattered[size_t(r)] = shard;
              F all(n);
              c.all_gather(all.data(), xs[size_t(r)].data() + s.offset, n);
              gathered[size_t(r)] = all;
              F b = r == 1 ? xs[1] : F(n, -1.0f);
              c.broadcast(b.data(), n, 1);
              cast[size_t(r)] = b;
            });
            for (int r = 0; r < size; ++r) {
              const Shard s = shard_of(n, size, r);
              BOOST_TEST(reduced[size_t(r)] == sum);  // bitwise: the same association
              BOOST_TEST(scattered[size_t(r)] == F(sum.begin() + long(s.offset), sum.begin() + long(s.offset + s.count)));
              F expected(n);  // every rank's own shard of its own values
              for (int q = 0; q < size; ++q) {
                const Shard sq = shard_of(n, size, q);
                std::copy_n(xs[size_t(q)].begin() + long(sq.offset), sq.count, expected.begin() + long(sq.offset));
              }
              BOOST_TEST(gathered[size_t(r)] == expected);
              BOOST_TEST(cast[size_t(r)] == xs[1]);
            }
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(mismatched_calls_fail_on_every_rank) {
  for (const std::string& kind : kKinds)
    BOOST_TEST_CONTEXT(kind) {
      Ring g = make_ring(kind, 2, RingOptions{.chunk = 64, .timeout = std::chrono::milliseconds(300)});
      std::vector<std::string> errors(2);
      on_ranks(g, [&](int r, Communicator& c) {
        F a(r == 0 ? 10 : 11, 1.0f);
        try {
          c.all_reduce(a.data(), a.size());
        } catch (const CollectiveError& e) {
          errors[size_t(r)] = e.what();
        }
      });
      BOOST_TEST(errors[1].find("calls mismatched: this rank is in all_reduce(n=11") != std::string::npos, errors[1]);
      BOOST_TEST(errors[0].find("ring rank 0 of 2: no all_reduce from rank 1 within 300 ms") != std::string::npos,
                 errors[0]);
    }
}

BOOST_AUTO_TEST_CASE(a_silent_peer_and_abort_end_the_wait) {
  Ring g = make_ring("tcp", 2, RingOptions{.chunk = 64, .timeout = std::chrono::milliseconds(200)});
  F a(100, 1.0f);
  BOOST_CHECK_EXCEPTION(g.ranks[1]->all_reduce(a.data(), a.size()), CollectiveError, [](const CollectiveError& e) {
    return std::string(e.what()).find("no all_reduce from rank 0 within 200 ms") != std::string::npos;
  });
  g.ranks[0]->abort("the run stopped");
  BOOST_CHECK_EXCEPTION(g.ranks[0]->broadcast(a.data(), a.size(), 0), CollectiveError, [](const CollectiveError& e) {
    return std::string(e.what()).find("the run stopped") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
