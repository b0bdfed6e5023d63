// Conformance of the Transport interface (transport/transport.h), run over
// every implementation in `implementations()`: `local`, and UCX between two
// UcxTransports (each its own worker and progress thread, the peers
// connected by their endpoint info as two processes would be) over
// UCX_TLS=tcp and over UCX_TLS=cma,sysv,self. Descriptors, one-sided puts
// into a peer's registered memory with completions in issue order, many
// puts in flight, zero-size and 256 MiB tensors, pool reuse, bf16 tensors,
// host pinning of every region, and every bounds or type violation refused
// before a byte is written.
// Then the same between two processes: a 256 MiB put into a tensor of a
// consumer process (tests/transport/peer/ucx_peer.cpp) over each UCX_TLS.
#include <boost/test/unit_test.hpp>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rdma/ucx_transport.h"
#include "transport/local_transport.h"

using namespace maestro;

namespace {

struct Implementation {
  std::string name;
  std::function<std::unique_ptr<Transport>()> make;
  bool knows_liveness = true;  // refuses a put into a released block (one-sided UCX cannot know)
};

std::vector<Implementation> implementations() {
  auto ucx = [](std::string tls) {
    return Implementation{"ucx " + tls, [tls] { return std::make_unique<UcxTransport>(UcxOptions{tls}); }, false};
  };
  return {{"local", [] { return std::make_unique<LocalTransport>(); }}, ucx("tcp"), ucx("cma,sysv,self")};
}

// Two transports of one kind, the consumer owning the target memory.
// reach() hands the consumer's endpoint info (its pools as registered now)
// to the producer, as the runtime does over CAF; `local` needs none.
struct Pair {
  Transport& consumer;
  Transport& producer;
  void reach() const {
    if (auto* p = dynamic_cast<UcxTransport*>(&producer))
      p->connect(dynamic_cast<UcxTransport&>(consumer).endpoint_info(), "the consumer");
  }
};

// Runs `check(pair, impl)` for every implementation.
void for_each_pair(const std::function<void(const Pair&, const Implementation&)>& check) {
  for (const Implementation& impl : implementations()) {
    BOOST_TEST_CONTEXT("transport " << impl.name) {
      auto consumer = impl.make(), producer = impl.make();
      check(Pair{*consumer, *producer}, impl);
    }
  }
}

TensorRef filled(Transport& t, int64_t n, float base) {
  TensorRef r = t.allocate({n});
  for (int64_t i = 0; i < n; ++i) r.values()[size_t(i)] = base + float(i);
  return r;
}

// Completions of puts in flight, awaited with a bound (10 s).
struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, std::string>> done;  // (tag, error) in completion order
  PutCompletion make(int tag) {
    return [this, tag](const std::string& e) {
      std::lock_guard lock(mu);
      done.push_back({tag, e});
      cv.notify_all();
    };
  }
  bool wait(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return done.size() >= n; });
  }
};

// Puts and returns the completion's message ("" = done); fails the test if
// the completion did not run exactly once.
std::string put_and_wait(Transport& producer, const TensorRef& src, const TensorDescriptor& dst) {
  Completions c;
  producer.put(src, dst, c.make(0));
  BOOST_TEST(c.wait(1));
  std::lock_guard lock(c.mu);
  BOOST_TEST(c.done.size() == 1u);
  return c.done.empty() ? "no completion" : c.done[0].second;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(transport_conformance)

BOOST_AUTO_TEST_CASE(descriptor_names_owner_pool_offset_bytes_dtype_device) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    Transport &a = pair.consumer, &b = pair.producer;
    BOOST_TEST(a.id() != 0u);
    BOOST_TEST(a.id() != b.id());
    TensorRef t = a.allocate({3, 5});
    const TensorDescriptor d = a.describe(t);
    BOOST_TEST(d.owner == a.id());
    BOOST_TEST(d.bytes == 60u);
    BOOST_TEST((d.dtype == DType::F32 && d.device == Device::Host));
    TensorRef h = a.allocate({7}, DType::BF16);
    const TensorDescriptor dh = a.describe(h);
    BOOST_TEST(dh.bytes == 14u);
    BOOST_TEST((dh.dtype == DType::BF16));
    BOOST_TEST(!(dh == d));
    BOOST_CHECK_THROW(b.describe(t), std::invalid_argument);  // not b's tensor
    BOOST_CHECK_THROW(a.describe(TensorRef::of({1, 2})), std::invalid_argument);  // in no pool
  });
}

BOOST_AUTO_TEST_CASE(put_writes_into_the_peer_and_completes_in_issue_order) {
  for_each_pair([](const Pair& pair, const Implementation& impl) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    TensorRef dst = consumer.allocate({1000});
    const TensorDescriptor d = consumer.describe(dst);
    std::vector<TensorRef> sources;  // held until their puts complete
    for (int k = 0; k < 5; ++k) sources.push_back(filled(producer, 1000, float(1000 * k)));
    pair.reach();
    Completions c;
    for (int k = 0; k < 5; ++k) producer.put(sources[size_t(k)], d, c.make(k));
    BOOST_TEST(c.wait(5));
    std::vector<int> order;
    for (const auto& [k, e] : c.done) {
      BOOST_TEST(e == "");
      order.push_back(k);
    }
    BOOST_TEST(order == std::vector<int>({0, 1, 2, 3, 4}));
    BOOST_TEST(dst.values()[0] == 4000.0f);  // the last put wins
    BOOST_TEST(dst.values()[999] == 4999.0f);
    const TransportStats s = producer.stats();
    BOOST_TEST(s.puts == 5);
    BOOST_TEST(s.bytes_put == 5 * 4000);
    BOOST_TEST(s.refused == 0);
    // Many targets at once, each getting its own bytes.
    std::vector<TensorRef> targets;
    for (int k = 0; k < 64; ++k) targets.push_back(consumer.allocate({int64_t(1 + k * 37)}));
    pair.reach();
    for (int k = 0; k < 64; ++k)
      BOOST_TEST(put_and_wait(producer, filled(producer, 1 + k * 37, float(k)), consumer.describe(targets[size_t(k)])) ==
                 "");
    for (int k = 0; k < 64; ++k) BOOST_TEST(targets[size_t(k)].values().back() == float(k + k * 37));
  });
}

// A waiter that spins on Transport::progress (as RingCommunicator does)
// gets its completions on its own thread — the progress thread stands down
// meanwhile — in issue order, with the bytes in place.
BOOST_AUTO_TEST_CASE(a_waiter_that_progresses_gets_its_completions) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    std::vector<TensorRef> targets;
    for (int k = 0; k < 8; ++k) targets.push_back(consumer.allocate({1024}));
    pair.reach();
    std::vector<TensorRef> sources;
    for (int k = 0; k < 200; ++k) sources.push_back(filled(producer, 1024, float(k)));
    Completions c;
    for (int k = 0; k < 200; ++k) {
      producer.put(sources[size_t(k)], consumer.describe(targets[size_t(k % 8)]), c.make(k));
      if (k % 8 == 7) {  // every 8 puts, wait for them by progressing
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
          {
            std::lock_guard lock(c.mu);
            if (c.done.size() >= size_t(k + 1)) break;
          }
          BOOST_TEST_REQUIRE((std::chrono::steady_clock::now() < end), "no completion by progressing within 10 s");
          producer.progress();
        }
      }
    }
    BOOST_TEST(c.wait(200));
    std::lock_guard lock(c.mu);
    for (size_t i = 0; i < c.done.size(); ++i) {
      BOOST_TEST(c.done[i].first == int(i));
      BOOST_TEST(c.done[i].second == "");
    }
    for (int k = 0; k < 8; ++k) BOOST_TEST(targets[size_t(k)].values()[1023] == float(192 + k + 1023));
  });
}

BOOST_AUTO_TEST_CASE(zero_size_tensors_describe_and_put) {
  for_each_pair([](const Pair& pair, const Implementation& impl) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    TensorRef dst = consumer.allocate({0, 4});
    BOOST_TEST(dst.numel() == 0);
    BOOST_TEST(dst.values().empty());
    const TensorDescriptor d = consumer.describe(dst);
    BOOST_TEST(d.bytes == 0u);
    pair.reach();
    BOOST_TEST(put_and_wait(producer, producer.allocate({0}), d) == "");
    BOOST_TEST(put_and_wait(producer, producer.allocate({1}), d) != "");  // 4 bytes into 0
  });
}

BOOST_AUTO_TEST_CASE(registered_pools_are_reused_and_bounded) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    Transport& t = pair.consumer;
    const uint64_t pool = t.register_pool(4096, Device::Host);
    BOOST_TEST(pool != Transport::kDefaultPool);
    uint64_t first_offset = 0;
    {
      TensorRef a = t.allocate({256}, DType::F32, pool);  // 1 KiB
      first_offset = t.describe(a).offset;
      BOOST_TEST(t.describe(a).pool == pool);
    }
    const TransportStats before = t.stats();
    TensorRef b = t.allocate({200}, DType::F32, pool);  // the same 1 KiB class: reused
    BOOST_TEST(t.describe(b).offset == first_offset);
    BOOST_TEST(b.values()[0] == 0.0f);
    BOOST_TEST(t.stats().reuses == before.reuses + 1);
    TensorRef c = t.allocate({512}, DType::F32, pool);  // 2 KiB more: 3 KiB of 4 used
    BOOST_CHECK_THROW(t.allocate({512}, DType::F32, pool), std::runtime_error);  // full
    BOOST_CHECK_THROW(t.allocate({1}, DType::F32, pool + 1000), std::invalid_argument);
    BOOST_CHECK_THROW(t.register_pool(1024, Device::Cuda), std::invalid_argument);
  });
}

// Host pinning (what a GPU run sets, with cudaHostRegister): every region
// pinned once, those there already and those added later, and puts still
// land in pinned memory (the order of unpinning and freeing:
// local_transport_test).
BOOST_AUTO_TEST_CASE(host_pinning_covers_every_region) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    struct Log {
      std::mutex mu;
      std::vector<std::pair<void*, size_t>> pinned;
      std::vector<void*> unpinned;
    };
    auto log = std::make_shared<Log>();
    const HostPinning pinning{[log](void* base, size_t bytes) {
                                std::lock_guard lock(log->mu);
                                log->pinned.push_back({base, bytes});
                                return true;
                              },
                              [log](void* base) {
                                std::lock_guard lock(log->mu);
                                log->unpinned.push_back(base);
                              }};
    auto pinned = [log](const void* p, size_t bytes) {
      std::lock_guard lock(log->mu);
      for (const auto& [base, size] : log->pinned)
        if (p >= base && static_cast<const char*>(p) + bytes <= static_cast<const char*>(base) + size) return true;
      return false;
    };
    {
      Transport& t = pair.consumer;
      const uint64_t pool = t.register_pool(4096, Device::Host);  // there before the pinning
      TensorRef dst = t.allocate({64}, DType::F32, pool);
      t.pin_host_memory(pinning);
      BOOST_TEST(t.stats().pinned_bytes == t.stats().pool_bytes);
      BOOST_TEST(pinned(dst.values().data(), dst.bytes()));
      BOOST_CHECK_THROW(t.pin_host_memory(pinning), std::logic_error);
      TensorRef later = t.allocate({int64_t(8) << 20});  // 32 MiB: a new region of the default pool
      BOOST_TEST(pinned(later.values().data(), later.bytes()));
      BOOST_TEST(t.stats().pinned_bytes == t.stats().pool_bytes);
      pair.reach();
      BOOST_TEST(put_and_wait(pair.producer, filled(pair.producer, 64, 3.0f), t.describe(dst)) == "");
      BOOST_TEST(dst.values()[63] == 66.0f);
    }
    BOOST_CHECK_THROW(pair.producer.pin_host_memory({}), std::invalid_argument);
  });
}

BOOST_AUTO_TEST_CASE(violations_are_refused_before_any_write) {
  for_each_pair([](const Pair& pair, const Implementation& impl) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    TensorRef dst = filled(consumer, 64, 7.0f);       // block of 256 bytes
    TensorRef neighbour = filled(consumer, 64, 9.0f);  // the next block
    const TensorDescriptor d = consumer.describe(dst);
    const std::vector<float> dst_before(dst.values().begin(), dst.values().end());
    const std::vector<float> neighbour_before(neighbour.values().begin(), neighbour.values().end());
    pair.reach();
    auto shifted = [&](uint64_t offset, uint64_t bytes) {
      TensorDescriptor x = d;
      x.offset = offset;
      x.bytes = bytes;
      return x;
    };
    TensorRef src64 = filled(producer, 64, -1.0f), src65 = filled(producer, 65, -1.0f);
    TensorRef src_bf16 = producer.allocate({128}, DType::BF16);
    TensorDescriptor unknown_owner = d, unknown_pool = d, wrong_dtype = d, device = d;
    unknown_owner.owner = 0;
    unknown_pool.pool += 1000;
    wrong_dtype.dtype = DType::BF16;
    device.device = Device::Cuda;
    const std::vector<std::pair<std::string, std::pair<TensorRef, TensorDescriptor>>> cases{
        {"size mismatch", {src65, d}},
        {"past the block's end", {src65, shifted(d.offset, 65 * 4)}},
        {"starts inside, ends outside", {src64, shifted(d.offset + 8, 64 * 4)}},
        {"dtype mismatch", {src_bf16, d}},
        {"target says bf16", {src64, wrong_dtype}},
        {"bf16 source, f32 target of equal bytes", {src_bf16, shifted(d.offset, 256)}},
        {"unknown owner", {src64, unknown_owner}},
        {"unknown pool", {src64, unknown_pool}},
        {"device memory", {src64, device}},
    };
    int64_t refused = 0;
    for (const auto& [what, c] : cases) {
      BOOST_TEST_CONTEXT(what) { BOOST_TEST(put_and_wait(producer, c.first, c.second) != ""); }
      ++refused;
    }
    // A released block: its descriptor is stale.
    if (impl.knows_liveness) {
      TensorDescriptor stale;
      {
        TensorRef gone = consumer.allocate({64});
        stale = consumer.describe(gone);
      }
      BOOST_TEST(put_and_wait(producer, src64, stale) != "");
      ++refused;
    }
    // A block that claims to reach past the pool its owner registered.
    TensorDescriptor past_pool = d;
    past_pool.block = past_pool.offset = uint64_t(1) << 40;
    BOOST_TEST(put_and_wait(producer, src64, past_pool) != "");
    ++refused;
    BOOST_TEST(std::vector<float>(dst.values().begin(), dst.values().end()) == dst_before);
    BOOST_TEST(std::vector<float>(neighbour.values().begin(), neighbour.values().end()) == neighbour_before);
    BOOST_TEST(producer.stats().refused == refused);
    BOOST_TEST(producer.stats().puts == 0);
    // A put inside the block (a row of the tensor) is fine.
    BOOST_TEST(put_and_wait(producer, filled(producer, 4, 100.0f), shifted(d.offset + 16, 16)) == "");
    BOOST_TEST(dst.values()[4] == 100.0f);
    BOOST_TEST(dst.values()[3] == dst_before[3]);
  });
}

BOOST_AUTO_TEST_CASE(bf16_tensors_are_bytes_not_floats) {
  for_each_pair([](const Pair& pair, const Implementation& impl) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    TensorRef dst = consumer.allocate({3}, DType::BF16);
    pair.reach();
    BOOST_TEST(dst.bytes() == 6u);
    BOOST_CHECK_THROW(dst.values(), std::logic_error);
    TensorRef src = producer.allocate({3}, DType::BF16);
    const uint16_t bits[3] = {float_to_bf16(1.0f), float_to_bf16(-2.0f), float_to_bf16(0.5f)};
    std::memcpy(src.raw().data(), bits, 6);
    BOOST_TEST(put_and_wait(producer, src, consumer.describe(dst)) == "");
    uint16_t got[3];
    std::memcpy(got, dst.raw().data(), 6);
    BOOST_TEST(bf16_to_float(got[1]) == -2.0f);
  });
}

// Every 32nd put is refused (its source one float longer): refusals keep
// their place in the order too.
BOOST_AUTO_TEST_CASE(many_puts_in_flight_complete_in_issue_order) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    constexpr int kPuts = 256;
    auto refused = [](int k) { return k % 32 == 31; };
    std::vector<TensorRef> targets, sources;
    for (int k = 0; k < kPuts; ++k) {
      const int64_t n = int64_t(1 + k % 17) * 256;
      targets.push_back(consumer.allocate({n}));
      sources.push_back(filled(producer, n + (refused(k) ? 1 : 0), float(k)));
    }
    pair.reach();
    Completions c;
    for (int k = 0; k < kPuts; ++k) producer.put(sources[size_t(k)], consumer.describe(targets[size_t(k)]), c.make(k));
    BOOST_TEST(c.wait(kPuts));
    std::lock_guard lock(c.mu);
    for (int k = 0; k < int(c.done.size()); ++k) {
      BOOST_TEST(c.done[size_t(k)].first == k);
      BOOST_TEST(c.done[size_t(k)].second.empty() == !refused(k));
    }
    for (int k = 0; k < kPuts; ++k) {
      BOOST_TEST(targets[size_t(k)].values().front() == (refused(k) ? 0.0f : float(k)));
      BOOST_TEST(targets[size_t(k)].values().back() == (refused(k) ? 0.0f : float(k + (1 + k % 17) * 256 - 1)));
    }
    BOOST_TEST(producer.stats().puts == kPuts - kPuts / 32);
    BOOST_TEST(producer.stats().refused == kPuts / 32);
  });
}

// The pools' memory (UCX's own allocation for UcxTransport) stays valid
// while TensorRefs hold it, after the transport is gone.
BOOST_AUTO_TEST_CASE(tensors_outlive_their_transport) {
  for (const Implementation& impl : implementations()) {
    BOOST_TEST_CONTEXT("transport " << impl.name) {
      auto t = impl.make();
      TensorRef small = filled(*t, 1000, 1.0f), large = filled(*t, int64_t(8) << 20, 2.0f);  // 4 KB, 32 MiB
      t.reset();
      BOOST_TEST(small.values()[999] == 1000.0f);
      large.values()[(size_t(8) << 20) - 1] += 1.0f;
      BOOST_TEST(large.values()[(size_t(8) << 20) - 1] == float((int64_t(8) << 20) + 2));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_256_mib_tensor_arrives_whole) {
  for_each_pair([](const Pair& pair, const Implementation&) {
    Transport &consumer = pair.consumer, &producer = pair.producer;
    constexpr int64_t n = int64_t(64) << 20;  // floats: 256 MiB
    TensorRef dst = consumer.allocate({n});
    TensorRef src = producer.allocate({n});
    auto v = src.values();
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i & 0xfffff);
    pair.reach();
    BOOST_TEST(put_and_wait(producer, src, consumer.describe(dst)) == "");
    BOOST_TEST(std::memcmp(dst.raw().data(), src.raw().data(), src.bytes()) == 0);
  });
}

namespace {

// A child process with its stdin and stdout as pipes; lines read within 20 s.
struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string buffered;
  explicit Child(std::vector<std::string> argv) {
    int in[2], out[2];
    BOOST_REQUIRE(pipe(in) == 0 && pipe(out) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    BOOST_REQUIRE(posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to = in[1];
    from = out[0];
  }
  std::string line() {
    for (;;) {
      if (auto nl = buffered.find('\n'); nl != std::string::npos) {
        std::string l = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        return l;
      }
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 20000) != 1) return "(no answer within 20 s)";
      char chunk[65536];
      const ssize_t got = read(from, chunk, sizeof chunk);
      if (got <= 0) return "(the child closed its output)";
      buffered.append(chunk, size_t(got));
    }
  }
  void say(const std::string& l) { BOOST_REQUIRE(write(to, l.data(), l.size()) == ssize_t(l.size())); }
  int exit_status() {
    close(to);
    close(from);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

std::vector<std::byte> from_hex(const std::string& hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(std::byte(std::stoul(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(ucx_puts_between_two_processes) {
  constexpr int64_t n = int64_t(64) << 20;  // floats: 256 MiB
  for (const std::string tls : {"tcp", "cma,sysv,self"}) {
    BOOST_TEST_CONTEXT("UCX_TLS=" << tls) {
      Child consumer({MAESTRO_UCX_PEER, tls, std::to_string(n)});
      const std::string info = consumer.line();
      std::istringstream fields(consumer.line());
      TensorDescriptor d;
      BOOST_REQUIRE(bool(fields >> d.owner >> d.pool >> d.offset >> d.bytes >> d.block >> d.capacity));
      UcxTransport producer(UcxOptions{tls});
      BOOST_TEST(producer.connect(from_hex(info), "the consumer process") == d.owner);
      TensorRef src = producer.allocate({n});
      auto v = src.values();
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i & 0xfffff) + 1;
      // Refused on the producer's side: a byte past the block, a block past the pool.
      TensorDescriptor past_block = d, past_pool = d;
      past_block.offset += 4;
      past_pool.block = past_pool.offset = d.capacity * 2;
      BOOST_TEST(put_and_wait(producer, src, past_block).find("leave the block") != std::string::npos);
      BOOST_TEST(put_and_wait(producer, src, past_pool).find("leaves the pool") != std::string::npos);
      BOOST_TEST(put_and_wait(producer, src, d) == "");
      consumer.say("check\n");
      BOOST_TEST(consumer.line() == "ok");
      BOOST_TEST(consumer.exit_status() == 0);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
