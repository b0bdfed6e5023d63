// PeerTensors' receive pools (actors/peer_tensors.h): a tensor that fits
// in none of them registers another, and the fetch into it carries the
// consumer's endpoint info, which the owner's tensor server connect()s
// before its put — without it the owner knows no such pool and refuses.
// Producer and consumer are two UcxTransports in this one process, as two
// processes would hold one each; the FetchTensor goes to the producer's
// real tensor server.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>

#include "actors/peer_tensors.h"
#include "actors/processes.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(peer_tensors)

namespace {

constexpr size_t kMiB = size_t(1) << 20;

struct TwoProcesses {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<UcxTransport> producer_ucx = std::make_shared<UcxTransport>();
  std::shared_ptr<UcxTransport> consumer_ucx = std::make_shared<UcxTransport>();
  PeerTensors producer{producer_ucx};
  PeerTensors consumer{consumer_ucx, kMiB};  // a first receive pool of 1 MiB
  caf::actor server;

  TwoProcesses() {
    configure_process_system(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    // The handshake: each knows the other's regions as they are now.
    producer_ucx->connect(consumer_ucx->endpoint_info(), "the consumer");
    consumer_ucx->connect(producer_ucx->endpoint_info(), "the producer");
    server = spawn_tensor_server(*sys, &producer);
  }
  ~TwoProcesses() {  // the server ends before the PeerTensors it reads
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    caf::scoped_actor self{*sys};
    self->wait_for(server);
  }

  // An exported producer tensor of n floats 0, 1, 2, …; its key.
  uint64_t export_floats(int64_t n) {
    TensorRef t = producer_ucx->allocate({n});
    auto* f = reinterpret_cast<float*>(t.raw().data());
    std::iota(f, f + n, 0.0f);
    return producer.export_tensor(t);
  }
  // The server's answer to a fetch of `key` into dst ("" = the bytes are there).
  std::string fetch(uint64_t key, const TensorRef& dst, std::vector<uint8_t> announcement) {
    caf::scoped_actor self{*sys};
    std::string answer = "no answer";
    self->request(server, caf::infinite, FetchTensor{key, consumer_ucx->describe(dst), std::move(announcement)})
        .receive([&](std::string& e) { answer = e; }, [&](caf::error& e) { answer = caf::to_string(e); });
    return answer;
  }
  static bool counts_up(const TensorRef& t) {
    const auto* f = reinterpret_cast<const float*>(t.buffer->data);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (f[i] != float(i)) return false;
    return true;
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_tensor_beyond_the_receive_pools_adds_one_that_the_owner_learns_of, TwoProcesses) {
  const int64_t big = int64_t(3 * kMiB / sizeof(float));  // 3 MiB: a 4 MiB block
  const uint64_t small_key = export_floats(1000), big_key = export_floats(big);
  const int64_t pool_bytes = consumer_ucx->stats().pool_bytes;

  TensorRef small = consumer.receive_buffer({1000}, DType::F32);
  BOOST_TEST(consumer.receive_pools() == 1u);
  BOOST_TEST(consumer.announcement(small).empty());  // in the handshake's pool

  TensorRef large = consumer.receive_buffer({big}, DType::F32);
  BOOST_TEST(consumer.receive_pools() == 2u);
  BOOST_TEST(consumer_ucx->stats().pool_bytes - pool_bytes == int64_t(4 * kMiB));  // the block's size
  const std::vector<uint8_t> announcement = consumer.announcement(large);
  BOOST_TEST_REQUIRE(!announcement.empty());

  // Unannounced, the owner knows no such pool: refused, nothing written.
  const std::string refused = fetch(big_key, large, {});
  BOOST_TEST(refused.find("announced no pool") != std::string::npos, refused);
  BOOST_TEST(!counts_up(large));
  BOOST_TEST(!producer.exported(big_key).empty());  // a failed put keeps the export
  // Announced, it arrives.
  BOOST_TEST(fetch(big_key, large, announcement) == "");
  BOOST_TEST(counts_up(large));
  // The refresh kept the first pool's rkey: puts into it still land.
  BOOST_TEST(fetch(small_key, small, {}) == "");
  BOOST_TEST(counts_up(small));

  // While `large` is held another one does not fit either: a third pool,
  // as large as the two before it together.
  TensorRef second = consumer.receive_buffer({big}, DType::F32);
  BOOST_TEST(consumer.receive_pools() == 3u);
  BOOST_TEST(consumer_ucx->stats().pool_bytes - pool_bytes == int64_t(9 * kMiB));
  BOOST_TEST(fetch(export_floats(big), second, consumer.announcement(second)) == "");
  BOOST_TEST(counts_up(second));
  // Once released, a block of the grown pools is used again: no fourth.
  large = TensorRef{};
  TensorRef again = consumer.receive_buffer({big}, DType::F32);
  BOOST_TEST(consumer.receive_pools() == 3u);
  BOOST_TEST(again.buffer->pool != small.buffer->pool);
}

// A handle has one use (peer_tensors.h): once its put has landed the owner
// drops the export, so its block is free again long before the step ends,
// and a second fetch of the handle is refused, writing nothing.
BOOST_FIXTURE_TEST_CASE(an_export_is_dropped_once_its_put_lands, TwoProcesses) {
  const int64_t n = int64_t(kMiB / sizeof(float));
  const uint64_t key = export_floats(n);
  const int64_t live = producer_ucx->stats().live;
  BOOST_TEST(producer.exports() == 1u);
  TensorRef dst = consumer.receive_buffer({n}, DType::F32);
  BOOST_TEST(fetch(key, dst, consumer.announcement(dst)) == "");
  BOOST_TEST(counts_up(dst));
  BOOST_TEST(producer.exports() == 0u);
  // The block goes back once the transport lets go of the put's source too
  // (it may still hold the finished put's record for a moment).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (producer_ucx->stats().live != live - 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  BOOST_TEST(producer_ucx->stats().live == live - 1);
  std::fill_n(reinterpret_cast<float*>(dst.buffer->data), n, -1.0f);
  const std::string again = fetch(key, dst, {});
  BOOST_TEST(again.find("not (or no longer) exported") != std::string::npos, again);
  BOOST_TEST(reinterpret_cast<const float*>(dst.buffer->data)[0] == -1.0f);
}

BOOST_FIXTURE_TEST_CASE(a_bad_shape_is_refused_not_a_new_pool, TwoProcesses) {
  BOOST_CHECK_THROW(consumer.receive_buffer({-1}, DType::F32), std::invalid_argument);
  BOOST_TEST(consumer.receive_pools() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
