// The local transport: handles share memory, buffers return to the pool
// when the last handle drops, and concurrent use is safe.
#define BOOST_TEST_MODULE transport
#include <boost/test/unit_test.hpp>

#include <thread>

#include "transport/local_transport.h"

using namespace maestro;

BOOST_AUTO_TEST_CASE(handles_share_memory_without_copy) {
  LocalTransport t;
  TensorRef a = t.allocate({2, 3});
  BOOST_TEST(a.numel() == 6);
  for (int i = 0; i < 6; ++i) a.values()[i] = float(i);
  TensorRef b = a;  // what a message carries
  BOOST_TEST(b.values().data() == a.values().data());
  BOOST_TEST(b.values()[5] == 5.0f);
  BOOST_TEST(t.stats().live == 1);
}

BOOST_AUTO_TEST_CASE(buffers_return_to_pool_and_are_reused_zeroed) {
  LocalTransport t;
  const float* first = nullptr;
  {
    TensorRef a = t.allocate({100});
    a.values()[7] = 3.0f;
    first = a.values().data();
    TensorRef b = a;
    a = TensorRef{};
    BOOST_TEST(t.stats().live == 1);  // b still holds it
  }
  TransportStats s = t.stats();
  BOOST_TEST(s.live == 0);
  BOOST_TEST(s.pooled == 1);
  TensorRef c = t.allocate({90});  // same power-of-two class (128)
  BOOST_TEST(c.values().data() == first);
  BOOST_TEST(c.values()[7] == 0.0f);
  BOOST_TEST(t.stats().reuses == 1);
  BOOST_TEST(t.stats().allocations == 1);
}

BOOST_AUTO_TEST_CASE(copy_of_and_refs_outliving_the_transport) {
  TensorRef kept;
  {
    LocalTransport t;
    const float v[3] = {1, 2, 3};
    kept = t.copy_of({3}, v);
  }
  BOOST_TEST(kept.values()[2] == 3.0f);  // the pool lives as long as a ref does
}

BOOST_AUTO_TEST_CASE(concurrent_allocate_release) {
  LocalTransport t;
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&t, k] {
      for (int i = 0; i < 2000; ++i) {
        TensorRef r = t.allocate({int64_t(16 + (i + k) % 300)});
        r.values()[0] = float(i);
      }
    });
  for (auto& th : threads) th.join();
  TransportStats s = t.stats();
  BOOST_TEST(s.live == 0);
  BOOST_TEST(s.allocations + s.reuses == 8000);
  BOOST_TEST(s.allocations <= 4 * 4);  // at most a few buffers per size class per thread
}

BOOST_AUTO_TEST_CASE(negative_dimension_is_an_error) {
  LocalTransport t;
  BOOST_CHECK_THROW(t.allocate({2, -1}), std::invalid_argument);
}
