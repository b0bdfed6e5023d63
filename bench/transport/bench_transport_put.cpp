// bench_transport_put: one-sided put bandwidth and latency of UcxTransport
// between two processes, for 4 KiB, 1 MiB and 64 MiB tensors, beside two
// peers measured in the same run: memcpy (one process, the shared-memory
// ceiling) and the same bytes sent as a CAF message (std::vector<char>
// through the middleman on loopback: the naive reference).
//
//   bench_transport_put ucx TLS [progress]   (UCX_TLS, e.g. tcp or cma,sysv,self)
//   bench_transport_put memcpy
//   bench_transport_put caf
//
// The process forks first (still single-threaded): the child is the
// consumer (registers the target tensor / publishes the CAF actor), the
// parent the producer. Bandwidth: `iters` puts in flight at once, time until
// the last completion. Latency: one put at a time, put() to its completion
// (the producer knows the bytes are in the consumer's memory: about one
// round trip), median. The producer waits for completions asleep on a
// condition variable (UCX's progress thread completes them), or with
// `progress` spinning on Transport::progress itself, as a RingCommunicator
// waiting in a collective does ("ucx(TLS,progress)"). One line per size:
//   <what> size=<bytes> bw_GBps=<GB/s> lat_us=<µs> iters=<n>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "rdma/ucx_transport.h"

using namespace maestro;
using clock_type = std::chrono::steady_clock;

namespace {

const std::vector<size_t> kSizes{size_t(4) << 10, size_t(1) << 20, size_t(64) << 20};

// 1 GiB per bandwidth run (at least 16 puts), after 16 MiB of warm-up puts
// (at least one; ucx_perftest warms up too: the first writes into the
// consumer's memory map it, page by page, which a steady training step,
// reusing its pools, does not pay); 8..500 latency samples: a round of
// run.sh stays under a minute on this 2-core machine.
size_t bw_iters(size_t bytes) { return std::max<size_t>((size_t(1) << 30) / bytes, 16); }
size_t warmup_iters(size_t bytes) { return std::max<size_t>((size_t(16) << 20) / bytes, 1); }
size_t lat_iters(size_t bytes) { return bytes >= (size_t(64) << 20) ? 8 : bytes >= (size_t(1) << 20) ? 50 : 500; }

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
void report(const char* what, size_t bytes, double bw_seconds, size_t iters, double lat_seconds) {
  std::printf("%s size=%zu bw_GBps=%.3f lat_us=%.1f iters=%zu\n", what, bytes, double(bytes) * double(iters) / bw_seconds / 1e9,
              lat_seconds * 1e6, iters);
  std::fflush(stdout);
}

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) std::exit(1);
    c += w;
    n -= size_t(w);
  }
}
void read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) std::exit(1);
    c += r;
    n -= size_t(r);
  }
}

// After fork: each side closes the pipe ends it does not use, so that a
// child whose parent dies (killed, or a closed stdout) reads EOF and exits
// instead of waiting forever with its UCX progress thread polling.
void keep_own_pipe_ends(pid_t child, int to_parent[2], int to_child[2]) {
  if (child == 0) {
    close(to_parent[0]);
    close(to_child[1]);
  } else {
    close(to_parent[1]);
    close(to_child[0]);
  }
}

int run_memcpy() {
  std::vector<char> a(kSizes.back(), 1), b(kSizes.back(), 2);
  for (size_t bytes : kSizes) {
    const size_t iters = bw_iters(bytes);
    auto t0 = clock_type::now();
    for (size_t i = 0; i < iters; ++i) {
      std::memcpy(b.data(), a.data(), bytes);
      asm volatile("" ::"r"(b.data()) : "memory");
    }
    const double bw = seconds_since(t0);
    std::vector<double> lat;
    for (size_t i = 0; i < lat_iters(bytes); ++i) {
      t0 = clock_type::now();
      std::memcpy(b.data(), a.data(), bytes);
      asm volatile("" ::"r"(b.data()) : "memory");
      lat.push_back(seconds_since(t0));
    }
    report("memcpy", bytes, bw, iters, median(lat));
  }
  return 0;
}

// UCX: the child registers a tensor of the largest size and sends its
// endpoint info and descriptor; the parent puts.
int run_ucx(const std::string& tls, bool progress) {
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return 1;
  const pid_t child = fork();
  keep_own_pipe_ends(child, to_parent, to_child);
  if (child == 0) {
    UcxTransport t(UcxOptions{tls});
    TensorRef dst = t.allocate({int64_t(kSizes.back() / 4)});
    const std::vector<std::byte> info = t.endpoint_info();
    const TensorDescriptor d = t.describe(dst);
    const uint64_t n = info.size();
    write_all(to_parent[1], &n, 8);
    write_all(to_parent[1], info.data(), n);
    write_all(to_parent[1], &d, sizeof d);
    char done;
    read_all(to_child[0], &done, 1);  // the parent has finished
    std::_Exit(0);
  }
  uint64_t n = 0;
  read_all(to_parent[0], &n, 8);
  std::vector<std::byte> info(n);
  read_all(to_parent[0], info.data(), n);
  TensorDescriptor d;
  read_all(to_parent[0], &d, sizeof d);
  {
    UcxTransport t(UcxOptions{tls});
    t.connect(info, "the consumer process");
    TensorRef src = t.allocate({int64_t(kSizes.back() / 4)});
    std::memset(src.raw().data(), 7, src.bytes());
    const std::string what = "ucx(" + tls + (progress ? ",progress" : "") + ")";
    for (size_t bytes : kSizes) {
      TensorRef view = src;
      view.shape = {int64_t(bytes / 4)};
      TensorDescriptor target = d;
      target.bytes = bytes;
      std::mutex mu;
      std::condition_variable cv;
      size_t completed = 0;
      std::string error;
      auto done = [&](const std::string& e) {
        std::lock_guard lock(mu);
        if (!e.empty()) error = e;
        ++completed;
        cv.notify_all();
      };
      auto wait = [&](size_t count) {
        std::unique_lock lock(mu);
        if (progress)  // the waiter progresses UCX itself (Transport::progress), as RingCommunicator does
          while (completed < count) {
            lock.unlock();
            t.progress();
            lock.lock();
          }
        cv.wait(lock, [&] { return completed >= count; });
        if (!error.empty()) {
          std::fprintf(stderr, "bench_transport_put: %s\n", error.c_str());
          std::exit(1);
        }
      };
      const size_t warmup = warmup_iters(bytes), iters = bw_iters(bytes);
      for (size_t i = 0; i < warmup; ++i) t.put(view, target, done);
      wait(warmup);
      auto t0 = clock_type::now();
      for (size_t i = 0; i < iters; ++i) t.put(view, target, done);
      wait(warmup + iters);
      const double bw = seconds_since(t0);
      std::vector<double> lat;
      for (size_t i = 0; i < lat_iters(bytes); ++i) {
        t0 = clock_type::now();
        t.put(view, target, done);
        wait(warmup + iters + i + 1);
        lat.push_back(seconds_since(t0));
      }
      report(what.c_str(), bytes, bw, iters, median(lat));
    }
  }
  write_all(to_child[1], "x", 1);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// CAF: the child publishes an actor that answers each message with its size;
// the parent sends the bytes as one std::vector<char> per message.
int run_caf() {
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return 1;
  const pid_t child = fork();
  keep_own_pipe_ends(child, to_parent, to_child);
  if (child == 0) {
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    caf::actor_system sys{cfg};
    auto sink = sys.spawn([]() -> caf::behavior {
      return {[](const std::vector<char>& bytes) { return uint64_t(bytes.size()); }};
    });
    auto port = sys.middleman().publish(sink, 0, "127.0.0.1");
    const uint16_t p = port ? *port : 0;
    write_all(to_parent[1], &p, 2);
    char done;
    read_all(to_child[0], &done, 1);
    caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    std::_Exit(0);
  }
  uint16_t port = 0;
  read_all(to_parent[0], &port, 2);
  int rc = 0;
  {
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    caf::actor_system sys{cfg};
    auto sink = sys.middleman().remote_actor("127.0.0.1", port);
    if (!sink) {
      std::fprintf(stderr, "bench_transport_put: remote_actor: %s\n", sys.render(sink.error()).c_str());
      rc = 1;
    } else {
      caf::scoped_actor self{sys};
      auto exchange = [&](const std::vector<char>& payload) {
        self->request(*sink, std::chrono::seconds(60), payload)
            .receive([](uint64_t) {}, [&](caf::error& e) {
              std::fprintf(stderr, "bench_transport_put: %s\n", sys.render(e).c_str());
              std::exit(1);
            });
      };
      for (size_t bytes : kSizes) {
        const std::vector<char> payload(bytes, 7);
        const size_t iters = std::min<size_t>(bw_iters(bytes), 5000);  // ~10 s of messages at 4 KiB otherwise
        auto t0 = clock_type::now();
        for (size_t i = 0; i + 1 < iters; ++i) self->send(*sink, payload);  // replies dropped below
        exchange(payload);  // messages of one sender arrive in order: all are in once this is answered
        const double bw = seconds_since(t0);
        std::vector<double> lat;
        for (size_t i = 0; i < lat_iters(bytes); ++i) {
          t0 = clock_type::now();
          exchange(payload);
          lat.push_back(seconds_since(t0));
        }
        report("caf-message", bytes, bw, iters, median(lat));
      }
    }
  }
  write_all(to_child[1], "x", 1);
  int status = 0;
  waitpid(child, &status, 0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "memcpy" && argc == 2) return run_memcpy();
  if (mode == "ucx" && argc == 3) return run_ucx(argv[2], false);
  if (mode == "ucx" && argc == 4 && std::string(argv[3]) == "progress") return run_ucx(argv[2], true);
  if (mode == "caf" && argc == 2) return run_caf();
  std::fprintf(stderr, "usage: bench_transport_put ucx TLS [progress] | memcpy | caf\n");
  return 2;
}
