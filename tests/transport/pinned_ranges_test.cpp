// PinnedRanges (transport/pinned_ranges.h): whether a whole upload source lies in
// memory cuda_pin_host pinned — the CUDA backend's test before it DMAs a
// held upload straight from the caller's bytes instead of staging them.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "transport/pinned_ranges.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(pinned_ranges)

BOOST_AUTO_TEST_CASE(a_source_must_lie_inside_one_range) {
  std::vector<char> mem(4096);
  char* a = mem.data();
  PinnedRanges r;
  BOOST_TEST(!r.covers(a, 1));  // nothing pinned
  r.add(a + 1024, 1024);        // [1024, 2048)
  r.add(a + 2048, 512);         // [2048, 2560): adjacent, a separate registration
  BOOST_TEST(r.covers(a + 1024, 1024));
  BOOST_TEST(r.covers(a + 1500, 548));
  BOOST_TEST(r.covers(a + 2047, 0));
  BOOST_TEST(!r.covers(a + 1023, 2));    // starts before
  BOOST_TEST(!r.covers(a + 2000, 100));  // runs into the next range: two registrations
  BOOST_TEST(!r.covers(a + 2500, 61));   // past the end
  BOOST_TEST(r.covers(a + 2500, 60));
  BOOST_TEST(!r.covers(a + 2560, 0));    // one past the end
  BOOST_TEST(!r.covers(a, 0));
  r.remove(a + 1024);
  BOOST_TEST(!r.covers(a + 1024, 1));
  BOOST_TEST(r.covers(a + 2048, 1));
  r.remove(a + 3000);  // never added: nothing happens
  r.add(a + 2048, 2048);  // pinned again, larger
  BOOST_TEST(r.covers(a + 2048, 2048));
}

BOOST_AUTO_TEST_CASE(the_process_table_is_one) {
  BOOST_TEST(&pinned_host_ranges() == &pinned_host_ranges());
}

BOOST_AUTO_TEST_SUITE_END()
