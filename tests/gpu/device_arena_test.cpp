// DeviceArena (gpu/device_arena.h): the CUDA backend's placement of buffers
// in its device segments, checked on the host — alignment, first fit,
// merging on release, no overlap under a random alloc/free sequence, and a
// steady state that needs no new segment.
#define BOOST_TEST_MODULE gpu
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/device_arena.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(device_arena)

BOOST_AUTO_TEST_CASE(places_aligned_first_fit_and_merges_on_release) {
  DeviceArena a;
  BOOST_TEST(!a.place(1).has_value());  // no segment yet: the caller adds one
  a.add_segment(4096);
  const auto b1 = a.place(1), b2 = a.place(300), b3 = a.place(256);
  BOOST_TEST_REQUIRE((b1 && b2 && b3));
  BOOST_TEST(b1->offset == 0u);
  BOOST_TEST(b1->bytes == 256u);
  BOOST_TEST(b2->offset == 256u);
  BOOST_TEST(b2->bytes == 512u);
  BOOST_TEST(b3->offset == 768u);
  BOOST_TEST(a.bytes_in_use() == 1024u);
  a.release(*b2);
  const auto b4 = a.place(200);  // first fit: the hole b2 left
  BOOST_TEST(b4->offset == 256u);
  a.release(*b1);
  a.release(*b4);
  a.release(*b3);
  BOOST_TEST(a.bytes_in_use() == 0u);
  BOOST_TEST(a.largest_free() == 4096u);  // everything merged back into one range
  BOOST_CHECK_THROW(a.release(*b3), std::logic_error);  // twice
}

BOOST_AUTO_TEST_CASE(a_request_too_large_asks_for_a_segment_of_its_size) {
  DeviceArena a;
  a.add_segment(1 << 20);
  BOOST_TEST(!a.place((1 << 20) + 1).has_value());
  const size_t seg = DeviceArena::segment_bytes((1 << 20) + 1, 1 << 20);
  BOOST_TEST(seg == size_t((1 << 20) + 256));
  BOOST_TEST(a.add_segment(seg) == 1u);
  const auto b = a.place((1 << 20) + 1);
  BOOST_TEST_REQUIRE(b.has_value());
  BOOST_TEST(b->segment == 1u);
  BOOST_TEST(DeviceArena::segment_bytes(10, 1 << 30) == size_t(1) << 30);
}

// An activation-pool-like pattern: after the first round of buffers, later
// rounds with the same sizes fit in the segments already there.
BOOST_AUTO_TEST_CASE(random_rounds_never_overlap_and_reach_a_steady_state) {
  std::mt19937 rng(7);
  std::vector<size_t> sizes(40);
  for (size_t& s : sizes) s = 1 + rng() % 100000;
  DeviceArena a;
  size_t segments_after_first = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<DeviceArena::Block> held;
    for (size_t s : sizes) {
      auto b = a.place(s);
      if (!b) {
        a.add_segment(DeviceArena::segment_bytes(s, 1 << 20));
        b = a.place(s);
      }
      BOOST_TEST_REQUIRE(b.has_value());
      BOOST_TEST(b->offset % DeviceArena::kAlign == 0u);
      BOOST_TEST(b->bytes >= s);
      held.push_back(*b);
    }
    for (size_t i = 0; i < held.size(); ++i)
      for (size_t j = i + 1; j < held.size(); ++j)
        if (held[i].segment == held[j].segment)
          BOOST_TEST((held[i].offset + held[i].bytes <= held[j].offset ||
                      held[j].offset + held[j].bytes <= held[i].offset));
    std::shuffle(held.begin(), held.end(), rng);
    for (const auto& b : held) a.release(b);
    if (round == 0) segments_after_first = a.segments();
    BOOST_TEST(a.segments() == segments_after_first);
    BOOST_TEST(a.bytes_in_use() == 0u);
  }
}

BOOST_AUTO_TEST_SUITE_END()
