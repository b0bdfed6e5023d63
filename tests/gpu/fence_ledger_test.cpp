// FenceLedger (gpu/fence_ledger.h): the CUDA backend's fences over events
// recorded on its stream, with the stream stood in for by a counter of the
// events it has reached.
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <vector>

#include "gpu/fence_ledger.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(fence_ledger)

BOOST_AUTO_TEST_CASE(fences_pass_in_stream_order_without_asking_twice) {
  FenceLedger<int> ledger;
  int reached_upto = 0;  // the stream has reached events 1..reached_upto
  std::vector<int> asked, recycled;
  auto reached = [&](int e) {
    asked.push_back(e);
    return e <= reached_upto;
  };
  auto recycle = [&](int e) { recycled.push_back(e); };
  BOOST_TEST(ledger.passed(0, reached, recycle));  // before any work
  BOOST_TEST(asked.empty());
  const uint64_t a = ledger.add(1), b = ledger.add(2), c = ledger.add(3);
  BOOST_TEST(a == 1u);
  BOOST_TEST(c == 3u);
  BOOST_TEST(!ledger.passed(b, reached, recycle));
  BOOST_TEST(asked == std::vector<int>({1}));  // the oldest not reached: the rest are not asked
  reached_upto = 2;
  BOOST_TEST(ledger.passed(b, reached, recycle));
  BOOST_TEST(asked == std::vector<int>({1, 1, 2}));  // stops at b: event 3 is not asked
  BOOST_TEST(recycled == std::vector<int>({1, 2}));
  BOOST_TEST(ledger.passed(a, reached, recycle));  // already known: nothing asked
  BOOST_TEST(asked.size() == 3u);
  BOOST_TEST(ledger.pending() == 1u);
  BOOST_TEST(!ledger.passed(c, reached, recycle));
  BOOST_TEST(ledger.take_pending() == std::vector<int>({3}));
  BOOST_TEST(ledger.pending() == 0u);
}

BOOST_AUTO_TEST_CASE(a_faulted_stream_throws_and_keeps_the_fence) {
  FenceLedger<int> ledger;
  const uint64_t f = ledger.add(7);
  auto faulted = [](int) -> bool { throw std::runtime_error("illegal address"); };
  BOOST_CHECK_THROW(ledger.passed(f, faulted, [](int) {}), std::runtime_error);
  BOOST_TEST(ledger.pending() == 1u);  // not passed, not recycled
}

BOOST_AUTO_TEST_SUITE_END()
