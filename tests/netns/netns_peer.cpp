// netns_peer: one host of the multi-host transfer-engine test
// (tests/netns/multihost_test.sh), run by netns.sh in its own network
// namespace, so the peers really are hosts with their own addresses and
// UCX (UCX_TLS=tcp, UCX_NET_DEVICES=eth0) goes over the veth link.
//
//   netns_peer put  DIR RANK        RANK 0 puts, RANK 1 receives
//   netns_peer ring DIR RANK SIZE   RingCommunicator all_reduce over SIZE ranks
//
// The hosts meet through files in DIR (a temp dir the namespaces share:
// network namespaces do not separate the file system): each writes
// DIR/<mode>.<rank>.info (written to .tmp, then renamed) = its endpoint
// info and what the others need, and waits (bounded) for the others'.
//
// put: rank 1 allocates tensors of 1 MiB and 64 MiB, publishes their
// descriptors; rank 0 fills its own with a pattern per tensor, puts both
// into rank 1 (ucp_put_nbx + flush over TCP), waits for the completions
// and writes DIR/put.sent; rank 1 then checks every float and writes
// DIR/put.checked (rank 0 waits for it before tearing its endpoint down).
//
// ring: rank r holds x_r[i] (a hash of r and i, mixed magnitudes, so the
// order of the additions shows in the bits); after all_reduce every rank
// must hold ((x_0 + x_1) + x_2) + … bitwise, which it computes itself.
// Exit 0 on success, 1 with a message naming the rank on any failure.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rdma/ucx_transport.h"
#include "transport/ring_communicator.h"

using namespace maestro;

namespace {

constexpr auto kWait = std::chrono::seconds(15);  // every wait for another host

// "namespace maestro-…-1 (10.77.0.2)", from netns.sh's environment.
std::string hostname() {
  const char* ns = std::getenv("MAESTRO_NETNS_NAME");
  const char* addr = std::getenv("MAESTRO_NETNS_ADDR");
  return std::string("namespace ") + (ns ? ns : "?") + " (" + (addr ? addr : "?") + ")";
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp);
}

// Waits (bounded) for `path` to exist and returns its bytes.
std::vector<std::byte> wait_file(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (access(path.c_str(), R_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("no " + path + " after " + std::to_string(kWait.count()) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());  // an empty marker file: no pointers to copy between
  return b;
}

// The info file: u64 length + endpoint info, then POD records.
struct Info {
  std::vector<std::byte> bytes;
  template <class T>
  void add(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
};
struct InfoReader {
  std::vector<std::byte> bytes;
  size_t at = 0;
  template <class T>
  T take() {
    if (bytes.size() - at < sizeof(T)) throw std::runtime_error("truncated info file");
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::vector<std::byte> endpoint() {
    const auto n = take<uint64_t>();
    if (bytes.size() - at < n) throw std::runtime_error("truncated info file");
    std::vector<std::byte> e(bytes.begin() + long(at), bytes.begin() + long(at + n));
    at += n;
    return e;
  }
};
void add_endpoint(Info& info, const UcxTransport& t) {
  const auto e = t.endpoint_info();
  info.add(uint64_t(e.size()));
  info.bytes.insert(info.bytes.end(), e.begin(), e.end());
}

// Waits (bounded) until `count` completions arrived; throws the first error.
struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::string error;
  PutCompletion callback() {
    return [this](const std::string& e) {
      std::lock_guard lock(mu);
      if (!e.empty() && error.empty()) error = e;
      ++done;
      cv.notify_all();
    };
  }
  void wait(size_t count) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kWait, [&] { return done >= count; }))
      throw std::runtime_error("puts not complete after " + std::to_string(kWait.count()) + " s");
    if (!error.empty()) throw std::runtime_error(error);
  }
};

const std::vector<int64_t> kPutFloats{int64_t(1) << 18, int64_t(16) << 20};  // 1 MiB, 64 MiB

float pattern(size_t tensor, int64_t i) { return float((uint64_t(i) * 2654435761u + tensor * 977) & 0xffffff); }

int run_put(const std::string& dir, int rank) {
  UcxTransport t(UcxOptions{"tcp"});
  if (rank == 1) {
    std::vector<TensorRef> dst;
    for (int64_t n : kPutFloats) {
      dst.push_back(t.allocate({n}));
      std::memset(dst.back().raw().data(), 0, dst.back().bytes());
    }
    Info info;  // after the allocations: the info announces the regions they live in
    add_endpoint(info, t);
    for (const auto& d : dst) info.add(t.describe(d));
    write_file(dir + "/put.1.info", info.bytes);
    wait_file(dir + "/put.sent");
    for (size_t k = 0; k < dst.size(); ++k) {
      const auto v = dst[k].values();
      for (int64_t i = 0; i < kPutFloats[k]; ++i)
        if (v[size_t(i)] != pattern(k, i)) {
          std::fprintf(stderr, "netns_peer put rank 1 on %s: tensor %zu (%ld floats) mismatch at %ld: %g, want %g\n",
                       hostname().c_str(), k, long(kPutFloats[k]), long(i), double(v[size_t(i)]),
                       double(pattern(k, i)));
          return 1;
        }
      std::printf("put rank 1 on %s: tensor of %ld bytes received and checked\n", hostname().c_str(),
                  long(dst[k].bytes()));
    }
    write_file(dir + "/put.checked", {});
    return 0;
  }
  InfoReader in{wait_file(dir + "/put.1.info")};
  t.connect(in.endpoint(), "rank 1 (netns put peer)");
  Completions c;
  std::vector<TensorRef> src;
  for (size_t k = 0; k < kPutFloats.size(); ++k) {
    const auto d = in.take<TensorDescriptor>();
    src.push_back(t.allocate({kPutFloats[k]}));
    auto v = src.back().values();
    for (int64_t i = 0; i < kPutFloats[k]; ++i) v[size_t(i)] = pattern(k, i);
    const auto t0 = std::chrono::steady_clock::now();
    t.put(src.back(), d, c.callback());
    c.wait(k + 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("put rank 0 on %s: %ld bytes put in %.3f s (%.2f GB/s over tcp between namespaces)\n",
                hostname().c_str(), long(src.back().bytes()), s, double(src.back().bytes()) / s / 1e9);
  }
  write_file(dir + "/put.sent", {});
  wait_file(dir + "/put.checked");
  return 0;
}

float value(int rank, size_t i) {
  uint64_t h = (uint64_t(rank) + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t(i) * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 31;
  const float unit = float(h & 0xffffff) / float(1 << 24) - 0.5f;  // [-0.5, 0.5)
  return unit * float(1 << ((h >> 24) % 20));                      // magnitudes 2^0 .. 2^19
}

int run_ring(const std::string& dir, int rank, int size) {
  UcxTransport t(UcxOptions{"tcp"});
  RingCommunicator ring(t, rank, size, RingOptions{size_t(1) << 16, std::chrono::milliseconds(15'000)});
  Info info;
  add_endpoint(info, t);
  info.add(ring.mailbox());
  write_file(dir + "/ring." + std::to_string(rank) + ".info", info.bytes);
  std::vector<RingMailbox> mailboxes(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    InfoReader in{wait_file(dir + "/ring." + std::to_string(r) + ".info")};
    t.connect(in.endpoint(), "rank " + std::to_string(r) + " (netns ring)");
    mailboxes[size_t(r)] = in.take<RingMailbox>();
  }
  ring.connect(mailboxes[size_t((rank + size - 1) % size)], mailboxes[size_t((rank + 1) % size)]);

  const size_t n = (size_t(1) << 18) + 37;  // 4 chunks and a tail
  std::vector<float> data(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    data[i] = value(rank, i);
    float sum = value(0, i);
    for (int r = 1; r < size; ++r) sum += value(r, i);  // rank order
    want[i] = sum;
  }
  ring.all_reduce(data.data(), n);
  int rc = 0;
  if (std::memcmp(data.data(), want.data(), n * sizeof(float)) != 0) {
    size_t i = 0;
    while (std::memcmp(&data[i], &want[i], sizeof(float)) == 0) ++i;
    std::fprintf(stderr, "netns_peer ring rank %d on %s: all_reduce differs at %zu: %.9g, the rank-order fold %.9g\n",
                 rank, hostname().c_str(), i, double(data[i]), double(want[i]));
    rc = 1;
  } else {
    std::printf("ring rank %d of %d on %s: all_reduce of %zu floats equals the rank-order fold bitwise\n", rank, size,
                hostname().c_str(), n);
  }
  // Nobody tears down while a neighbour may still put into it.
  write_file(dir + "/ring." + std::to_string(rank) + ".done", {});
  for (int r = 0; r < size; ++r) wait_file(dir + "/ring." + std::to_string(r) + ".done");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "put" && argc == 4 && (std::string(argv[3]) == "0" || std::string(argv[3]) == "1"))
      return run_put(argv[2], std::atoi(argv[3]));
    if (mode == "ring" && argc == 5) {
      const int rank = std::atoi(argv[3]), size = std::atoi(argv[4]);
      if (size >= 2 && size <= 64 && rank >= 0 && rank < size) return run_ring(argv[2], rank, size);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "netns_peer %s rank %s on %s: %s\n", mode.c_str(), argc > 3 ? argv[3] : "?",
                 hostname().c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: netns_peer put DIR RANK(0|1) | netns_peer ring DIR RANK SIZE\n");
  return 2;
}
