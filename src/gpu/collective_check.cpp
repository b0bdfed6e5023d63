// check_collectives (collective_check.h): each call on every rank at once,
// results compared exactly with the host's sums.
#include "gpu/collective_check.h"

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <thread>

namespace maestro {

namespace {

// Rank r's input element i: a whole number below 2^15 + size, so any sum
// over up to 2^8 ranks is exact in fp32, whatever the order.
float value(int r, size_t i) { return float(int64_t(i % 8191) * 4 + r); }
float sum_over_ranks(int size, size_t i) {
  return float(int64_t(i % 8191) * 4 * size + int64_t(size) * (size - 1) / 2);
}
constexpr float kUnwritten = -1;  // what a rank's buffer holds where a call must write

struct Call {
  const std::vector<std::shared_ptr<Communicator>>& group;
  const std::vector<Backend*>& backends;
  int size() const { return int(group.size()); }

  // f(r) on every rank, each on its own thread (a collective returns only
  // once every rank has called it); f returns the elements it found wrong.
  CollectiveCheck run(std::string name, const std::function<size_t(int)>& f) const {
    CollectiveCheck c;
    c.call = std::move(name);
    std::vector<size_t> wrong(group.size());
    std::vector<std::string> errors(group.size());
    auto body = [&](int r) {
      try {
        wrong[size_t(r)] = f(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < size(); ++r) threads.emplace_back(body, r);
    body(0);
    for (std::thread& t : threads) t.join();
    for (size_t r = 0; r < group.size(); ++r) {
      c.wrong += wrong[r];
      if (c.error.empty() && !errors[r].empty()) c.error = fmt::format("rank {}: {}", r, errors[r]);
    }
    return c;
  }
};

// A buffer of n floats in a backend's memory, written from the host.
class RankBuffer {
 public:
  RankBuffer(Backend& b, const std::vector<float>& host)
      : b_(b), n_(host.size()), p_(b.allocate(std::max<size_t>(n_, 1))) {
    b_.copy_from_host(p_, host.data(), n_ * sizeof(float));
  }
  ~RankBuffer() { b_.release(p_); }
  RankBuffer(const RankBuffer&) = delete;
  RankBuffer& operator=(const RankBuffer&) = delete;
  float* get() const { return p_; }
  std::vector<float> read() const {
    std::vector<float> host(n_);
    b_.copy_to_host(host.data(), p_, n_ * sizeof(float));
    return host;
  }

 private:
  Backend& b_;
  size_t n_;
  float* p_;
};

std::vector<float> inputs(int r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

// Elements of got[first, first + count) that differ from want(first + j).
size_t mismatches(const std::vector<float>& got, size_t first, size_t count, const std::function<float(size_t)>& want) {
  size_t bad = 0;
  for (size_t j = 0; j < count; ++j) bad += got[first + j] != want(first + j);
  return bad;
}

}  // namespace

std::vector<CollectiveCheck> check_collectives(const std::vector<std::shared_ptr<Communicator>>& group,
                                               const std::vector<Backend*>& backends) {
  if (group.empty() || backends.size() != group.size())
    throw std::invalid_argument(
        fmt::format("check_collectives: {} ranks and {} backends", group.size(), backends.size()));
  for (size_t r = 0; r < group.size(); ++r)
    if (group[r]->rank() != int(r) || group[r]->size() != int(group.size()))
      throw std::invalid_argument(fmt::format("check_collectives: entry {} is rank {} of {}", r, group[r]->rank(),
                                              group[r]->size()));
  const Call call{group, backends};
  const int R = call.size();
  std::vector<CollectiveCheck> out;
  const size_t M = size_t(1) << 20;
  for (const size_t n : {size_t(1), size_t(4099), M + 3, M * size_t(R)}) {
    out.push_back(call.run(fmt::format("all_reduce n={}", n), [&](int r) {
      const RankBuffer data(*backends[size_t(r)], inputs(r, n));
      group[size_t(r)]->all_reduce(data.get(), n);
      return mismatches(data.read(), 0, n, [&](size_t i) { return sum_over_ranks(R, i); });
    }));
    for (const bool in_place : {false, true}) {
      const char* how = in_place ? "in place" : "out of place";
      out.push_back(call.run(fmt::format("reduce_scatter({}) n={}", how, n), [&](int r) {
        const Shard s = shard_of(n, R, r);
        const RankBuffer in(*backends[size_t(r)], inputs(r, n));
        const RankBuffer separate(*backends[size_t(r)], std::vector<float>(in_place ? 0 : s.count, kUnwritten));
        float* dst = in_place ? in.get() + s.offset : separate.get();
        group[size_t(r)]->reduce_scatter(dst, in.get(), n);
        const std::vector<float> got = in_place ? in.read() : separate.read();
        return mismatches(got, in_place ? s.offset : 0, s.count,
                          [&](size_t j) { return sum_over_ranks(R, in_place ? j : s.offset + j); });
      }));
      out.push_back(call.run(fmt::format("all_gather({}) n={}", how, n), [&](int r) {
        const Shard s = shard_of(n, R, r);
        std::vector<float> whole(n, kUnwritten), mine(s.count);
        for (size_t j = 0; j < s.count; ++j) mine[j] = whole[s.offset + j] = value(r, s.offset + j);
        const RankBuffer gathered(*backends[size_t(r)], in_place ? whole : std::vector<float>(n, kUnwritten));
        const RankBuffer separate(*backends[size_t(r)], in_place ? std::vector<float>() : mine);
        group[size_t(r)]->all_gather(gathered.get(), in_place ? gathered.get() + s.offset : separate.get(), n);
        return mismatches(gathered.read(), 0, n, [&](size_t i) {
          int owner = 0;
          while (owner + 1 < R && shard_of(n, R, owner + 1).offset <= i) ++owner;
          return value(owner, i);
        });
      }));
    }
    for (int root = 0; root < R; ++root)
      out.push_back(call.run(fmt::format("broadcast(root {}) n={}", root, n), [&](int r) {
        const RankBuffer data(*backends[size_t(r)], inputs(r, n));
        group[size_t(r)]->broadcast(data.get(), n, root);
        return mismatches(data.read(), 0, n, [&](size_t i) { return value(root, i); });
      }));
  }
  // Last: an aborted group refuses every later call on every rank.
  const std::string reason = "collective check: the group is aborted";
  group[0]->abort(reason);
  CollectiveCheck aborted = call.run("abort, then all_reduce", [&](int r) {
    const RankBuffer data(*backends[size_t(r)], inputs(r, 1));
    try {
      group[size_t(r)]->all_reduce(data.get(), 1);
    } catch (const CollectiveError& e) {
      if (std::string(e.what()).find(reason) != std::string::npos) return size_t(0);
      throw std::runtime_error(fmt::format("threw without the reason: {}", e.what()));
    }
    throw std::runtime_error("a call after abort() returned");
  });
  out.push_back(aborted);
  return out;
}

}  // namespace maestro
