// The in-process collectives (transport/collectives.h): each collective for
// groups of 1, 2, 3 and 4 ranks and lengths 0, 1, odd and large, against a
// sequential fold in rank order — bitwise, with the ranks arriving in a
// different random order every round; mismatched calls and abort.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "transport/collectives.h"
#include "transport/group_values.h"

using namespace maestro;

namespace {

// Runs body(rank, comm) on one thread per rank, each starting after a
// random delay so the arrival order changes with `seed`.
void on_ranks(int size, unsigned seed, const std::function<void(int, Communicator&)>& body) {
  auto group = make_local_group(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      std::mt19937 rng(seed * 7 + unsigned(r));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      body(r, *group[size_t(r)]);
    });
  for (auto& t : threads) t.join();
}

const std::vector<int> kSizes{1, 2, 3, 4};
const std::vector<size_t> kLengths{0, 1, 7, 1001};

}  // namespace

BOOST_AUTO_TEST_SUITE(collectives)

BOOST_AUTO_TEST_CASE(shards_cover_n_in_order) {
  for (int size : kSizes)
    for (size_t n : {0, 1, 2, 7, 10, 1001}) {
      size_t next = 0;
      for (int r = 0; r < size; ++r) {
        const Shard s = shard_of(n, size, r);
        BOOST_TEST(s.offset == next);
        BOOST_TEST((s.count == n / size || s.count == n / size + 1));
        next += s.count;
      }
      BOOST_TEST(next == n);
    }
  BOOST_TEST(shard_of(7, 3, 0).count == 3u);  // the extra element goes to the lower ranks
  BOOST_TEST(shard_of(7, 3, 2).count == 2u);
}

BOOST_AUTO_TEST_CASE(all_reduce_is_the_rank_order_fold_bitwise) {
  for (int size : kSizes)
    for (size_t n : kLengths)
      for (unsigned seed = 1; seed <= 3; ++seed) {
        const std::vector<F> xs = group_values(size, n, seed);
        const F expect = fold(xs);
        std::vector<F> got = xs;
        on_ranks(size, seed, [&](int r, Communicator& c) { c.all_reduce(got[size_t(r)].data(), n); });
        for (int r = 0; r < size; ++r) BOOST_TEST(got[size_t(r)] == expect, "size " << size << " n " << n << " rank " << r);
      }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_gives_each_rank_its_shard_of_the_fold) {
  for (int size : kSizes)
    for (size_t n : kLengths)
      for (unsigned seed = 1; seed <= 2; ++seed) {
        const std::vector<F> xs = group_values(size, n, seed);
        const F expect = fold(xs);
        std::vector<F> out(static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) out[size_t(r)].assign(shard_of(n, size, r).count, -1.0f);
        on_ranks(size, seed, [&](int r, Communicator& c) {
          c.reduce_scatter(out[size_t(r)].data(), xs[size_t(r)].data(), n);
        });
        for (int r = 0; r < size; ++r) {
          const Shard s = shard_of(n, size, r);
          BOOST_TEST(out[size_t(r)] == F(expect.begin() + long(s.offset), expect.begin() + long(s.offset + s.count)));
        }
      }
}

BOOST_AUTO_TEST_CASE(all_gather_assembles_the_shards) {
  for (int size : kSizes)
    for (size_t n : kLengths) {
      const F whole = rank_values(0, n, 5);
      std::vector<F> out(size_t(size), F(n, -1.0f));
      on_ranks(size, unsigned(n), [&](int r, Communicator& c) {
        const Shard s = shard_of(n, size, r);
        c.all_gather(out[size_t(r)].data(), whole.data() + s.offset, n);
      });
      for (int r = 0; r < size; ++r) BOOST_TEST(out[size_t(r)] == whole);
    }
}

// In place, as the sharded optimizer calls them: reduce_scatter into the
// rank's own shard of its input, all_gather from the rank's shard of its output.
BOOST_AUTO_TEST_CASE(reduce_scatter_and_all_gather_in_place) {
  for (int size : kSizes)
    for (size_t n : kLengths) {
      const std::vector<F> xs = group_values(size, n, 9);
      const F expect = fold(xs);
      std::vector<F> bufs = xs;
      on_ranks(size, 9, [&](int r, Communicator& c) {
        float* b = bufs[size_t(r)].data();
        const Shard s = shard_of(n, size, r);
        c.reduce_scatter(b + s.offset, b, n);
        c.all_gather(b, b + s.offset, n);
      });
      for (int r = 0; r < size; ++r) BOOST_TEST(bufs[size_t(r)] == expect, "size " << size << " n " << n << " rank " << r);
    }
}

BOOST_AUTO_TEST_CASE(broadcast_from_every_root) {
  for (int size : kSizes)
    for (size_t n : kLengths)
      for (int root = 0; root < size; ++root) {
        std::vector<F> data = group_values(size, n, 9);
        const F expect = data[size_t(root)];
        on_ranks(size, unsigned(root), [&](int r, Communicator& c) { c.broadcast(data[size_t(r)].data(), n, root); });
        for (int r = 0; r < size; ++r) BOOST_TEST(data[size_t(r)] == expect);
      }
}

BOOST_AUTO_TEST_CASE(many_rounds_of_mixed_collectives_stay_in_step) {
  const int size = 3;
  const size_t n = 10;
  std::vector<F> got(size, F(n));
  on_ranks(size, 4, [&](int r, Communicator& c) {
    for (int round = 0; round < 300; ++round) {
      F x(n, float(r + round));
      c.all_reduce(x.data(), n);  // 3·round + 3
      F shard(shard_of(n, size, r).count);
      c.reduce_scatter(shard.data(), x.data(), n);  // 3·(3·round + 3)
      c.all_gather(got[size_t(r)].data(), shard.data(), n);
    }
  });
  for (int r = 0; r < size; ++r) BOOST_TEST(got[size_t(r)] == F(n, 3.0f * (3 * 299 + 3)));
}

BOOST_AUTO_TEST_CASE(mismatched_calls_fail_on_every_rank) {
  std::vector<std::string> errors(2);
  std::vector<float> after(2);
  on_ranks(2, 1, [&](int r, Communicator& c) {  // (no BOOST_TEST on these threads: Boost.Test is not thread-safe)
    F x(8, 1.0f);
    try {
      c.all_reduce(x.data(), r == 0 ? 8 : 4);
    } catch (const CollectiveError& e) {
      errors[size_t(r)] = e.what();
    }
    // The group is usable again afterwards.
    c.all_reduce(x.data(), 8);
    after[size_t(r)] = x[0];
  });
  for (const std::string& e : errors) BOOST_TEST(e.find("mismatched collectives") != std::string::npos, e);
  BOOST_TEST(after == std::vector<float>({2.0f, 2.0f}));
  std::string bad_root;
  on_ranks(1, 1, [&](int, Communicator& c) {
    F x(2);
    try {
      c.broadcast(x.data(), 2, 3);
    } catch (const CollectiveError& e) {
      bad_root = e.what();
    }
  });
  BOOST_TEST(bad_root.find("root 3") != std::string::npos, bad_root);
}

BOOST_AUTO_TEST_CASE(abort_releases_a_rank_waiting_for_a_peer) {
  auto group = make_local_group(2);
  std::string error;
  std::thread waiter([&] {
    F x(4);
    try {
      group[0]->all_reduce(x.data(), 4);  // rank 1 never comes
    } catch (const CollectiveError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  group[1]->abort("the run ended");
  waiter.join();
  BOOST_TEST(error == "the run ended");
  F y(4);
  BOOST_CHECK_THROW(group[1]->all_reduce(y.data(), 4), CollectiveError);
  BOOST_CHECK_THROW(make_local_group(0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
