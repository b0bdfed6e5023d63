// The Prefetcher: items come back in any order of asking, are made ahead on
// the worker threads but never more than `depth` past the last taken, and
// an item that failed rethrows on get.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "data/prefetcher.h"

namespace maestro {
namespace {

// Polls `done` for up to 20 s (a loaded machine may be slow to run the workers).
template <class F>
bool eventually(F done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prefetcher)

BOOST_AUTO_TEST_CASE(makes_ahead_in_order_and_bounded) {
  std::atomic<int64_t> highest{-1};
  std::atomic<int> made{0};
  std::atomic<bool> bad_thread{false};  // Boost.Test's checks are not thread-safe: checked below
  Prefetcher<int64_t> p(
      [&](int64_t step, int thread) {
        if (thread < 0 || thread >= 2) bad_thread = true;
        int64_t h = highest.load();
        while (step > h && !highest.compare_exchange_weak(h, step)) {}
        ++made;
        return step * 10;
      },
      100, 2, 3);
  BOOST_TEST(p.get(0) == 0);
  // Steps 1..3 are made ahead, and nothing past step 0 + 3 while step 0 is the last taken.
  BOOST_TEST(eventually([&] { return highest.load() >= 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_TEST(highest.load() == 3);
  BOOST_TEST(made.load() == 4);
  for (int64_t s = 1; s < 20; ++s) BOOST_TEST(p.get(s) == s * 10);
  BOOST_TEST(eventually([&] { return highest.load() >= 22; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_TEST(highest.load() == 22);
  BOOST_TEST(!bad_thread.load());
}

BOOST_AUTO_TEST_CASE(stops_at_the_last_step_and_starts_where_asked) {
  std::atomic<int> made{0};
  Prefetcher<int64_t> p([&](int64_t step, int) { ++made; return step; }, 8, 1, 4);
  BOOST_TEST(p.get(5) == 5);  // a resumed run starts past 0
  BOOST_TEST(p.get(6) == 6);
  BOOST_TEST(p.get(7) == 7);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BOOST_TEST(made.load() == 3);
  BOOST_TEST(p.get(2) == 2);  // behind the window: made on the caller's thread
}

BOOST_AUTO_TEST_CASE(a_failure_rethrows_for_its_step) {
  Prefetcher<int64_t> p(
      [](int64_t step, int) -> int64_t {
        if (step == 2) throw std::runtime_error("bad step 2");
        return step;
      },
      5, 2, 2);
  BOOST_TEST(p.get(0) == 0);
  BOOST_TEST(p.get(1) == 1);
  BOOST_CHECK_EXCEPTION(p.get(2), std::runtime_error,
                        [](const std::runtime_error& e) { return std::string(e.what()) == "bad step 2"; });
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
