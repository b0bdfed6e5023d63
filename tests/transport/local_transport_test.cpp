// The local transport: handles share memory, buffers return to the pool
// when the last handle drops, concurrent use is safe, and host pinning
// covers every region.
#define BOOST_TEST_MODULE transport
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

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

// Host pinning (a GPU backend's cudaHostRegister) reaches every region once —
// those registered before it was set and those added after — and is undone
// before a region's memory goes, also when a ref outlives the transport; a
// region that could not be pinned is never unpinned.
BOOST_AUTO_TEST_CASE(host_pinning_covers_every_region_once) {
  struct Log {
    std::vector<std::pair<void*, size_t>> pinned;
    std::vector<void*> unpinned;
    std::vector<std::pair<void*, bool>> freed;  // base, whether it was still pinned then
    size_t refuse_at = size_t(-1);             // the pin call that fails
  };
  auto log = std::make_shared<Log>();
  auto is_pinned = [log](void* p) {
    int n = 0;
    for (auto& [b, s] : log->pinned) n += b == p;
    for (void* u : log->unpinned) n -= u == p;
    return n > 0;
  };
  TensorRef kept;
  void* refused_base = nullptr;
  {
    LocalTransport t(LocalTransport::RegionMemory{
        [](uint64_t, size_t bytes) { return static_cast<std::byte*>(std::aligned_alloc(64, bytes)); },
        [log, is_pinned](uint64_t, std::byte* base, size_t) {
          log->freed.push_back({base, is_pinned(base)});
          std::free(base);
        }});
    const uint64_t pool = t.register_pool(4096, Device::Host);
    kept = t.allocate({10});  // the default pool's first region
    BOOST_TEST(t.stats().pinned_bytes == 0);
    HostPinning pinning{[log](void* base, size_t bytes) {
                                          if (log->pinned.size() == log->refuse_at) return false;
                                          log->pinned.push_back({base, bytes});
                                          return true;
                                        },
                                        [log](void* base) { log->unpinned.push_back(base); }};
    t.pin_host_memory(pinning);
    BOOST_TEST(log->pinned.size() == 2u);  // the pool and the region already there
    BOOST_TEST(t.stats().pinned_bytes == t.stats().pool_bytes);
    BOOST_CHECK_THROW(t.pin_host_memory(pinning), std::logic_error);
    BOOST_CHECK_THROW(LocalTransport().pin_host_memory({}), std::invalid_argument);

    TensorRef big = t.allocate({int64_t(20) << 20});  // 80 MB: a new region of the default pool
    BOOST_TEST(log->pinned.size() == 3u);
    BOOST_TEST(log->pinned.back().second >= big.bytes());
    BOOST_TEST(is_pinned(big.values().data()));  // the first block of its region
    log->refuse_at = log->pinned.size();                  // the next region cannot be pinned
    TensorRef big2 = t.allocate({int64_t(20) << 20});
    refused_base = big2.values().data();
    BOOST_TEST(log->pinned.size() == 3u);
    BOOST_TEST(t.stats().pinned_bytes < t.stats().pool_bytes);
    (void)pool;
  }
  // The transport is gone; `kept` holds its regions: nothing unpinned yet.
  BOOST_TEST(log->unpinned.empty());
  BOOST_TEST(log->freed.empty());
  kept = TensorRef{};
  BOOST_TEST(log->freed.size() == 4u);
  BOOST_TEST(log->unpinned.size() == 3u);  // not the region that could not be pinned
  for (auto& [base, still_pinned] : log->freed) BOOST_TEST(!still_pinned);  // unpinned before freed
  for (void* u : log->unpinned) BOOST_TEST(u != refused_base);
}
