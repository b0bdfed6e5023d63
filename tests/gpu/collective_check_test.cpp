// check_collectives (gpu/collective_check.h), the harness of bench/gpu's
// NCCL check, run here over the in-process group with CPU backends: a
// correct group passes every call at every size, for 1 to 4 ranks; a
// communicator with one fault — a wrong element, a fault only at uneven
// sizes, only in place, a broadcast that ignores its root, an abort that
// does nothing — fails exactly the calls it breaks.
#include <boost/test/unit_test.hpp>

#include <string>

#include "cpu/cpu_backend.h"
#include "gpu/collective_check.h"

using namespace maestro;

namespace {

enum class Fault { None, AllReduceLastElement, UnevenReduceScatter, InPlaceAllGather, BroadcastRootZero, AbortIgnored };

// A rank of the in-process group with one fault. Buffers are the CPU
// backend's, i.e. host memory, so a fault can write them directly.
class Faulty final : public Communicator {
 public:
  Faulty(std::shared_ptr<Communicator> inner, Fault fault) : inner_(std::move(inner)), fault_(fault) {}
  const char* name() const override { return "faulty"; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(float* data, size_t n) override {
    inner_->all_reduce(data, n);
    if (fault_ == Fault::AllReduceLastElement && n > 0) data[n - 1] += 1;
  }
  void reduce_scatter(float* out, const float* in, size_t n) override {
    inner_->reduce_scatter(out, in, n);
    const bool uneven = n % size_t(size()) != 0;
    if (fault_ == Fault::UnevenReduceScatter && uneven && shard_of(n, size(), rank()).count > 0) out[0] = 0;
  }
  void all_gather(float* out, const float* in, size_t n) override {
    inner_->all_gather(out, in, n);
    if (fault_ == Fault::InPlaceAllGather && in == out + shard_of(n, size(), rank()).offset && n > 1) out[n - 1] = -7;
  }
  void broadcast(float* data, size_t n, int root) override {
    inner_->broadcast(data, n, fault_ == Fault::BroadcastRootZero ? 0 : root);
  }
  void abort(const std::string& reason) override {
    if (fault_ != Fault::AbortIgnored) inner_->abort(reason);
  }

 private:
  std::shared_ptr<Communicator> inner_;
  Fault fault_;
};

std::vector<CollectiveCheck> check(int size, Fault fault) {
  std::vector<std::shared_ptr<Communicator>> group;
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (const std::shared_ptr<Communicator>& rank : make_local_group(size)) {
    group.push_back(std::make_shared<Faulty>(rank, fault));
    owned.push_back(make_cpu_backend(1));
    backends.push_back(owned.back().get());
  }
  return check_collectives(group, backends);
}

// The names of the calls that failed.
std::vector<std::string> failed(const std::vector<CollectiveCheck>& r) {
  std::vector<std::string> out;
  for (const CollectiveCheck& c : r)
    if (!c.ok()) out.push_back(c.call);
  return out;
}

bool all_start_with(const std::vector<std::string>& calls, const std::string& prefix) {
  for (const std::string& c : calls)
    if (c.rfind(prefix, 0) != 0) return false;
  return !calls.empty();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(collective_check)

BOOST_AUTO_TEST_CASE(a_correct_group_passes_every_call_at_every_size) {
  for (int size = 1; size <= 4; ++size) {
    const std::vector<CollectiveCheck> r = check(size, Fault::None);
    // 4 sizes × (all_reduce, reduce_scatter ×2, all_gather ×2, a broadcast per root), then abort
    BOOST_TEST(r.size() == size_t(4 * (5 + size) + 1));
    for (const CollectiveCheck& c : r)
      BOOST_TEST(c.ok(), "size " << size << ": " << c.call << ": " << c.wrong << " wrong, " << c.error);
  }
}

BOOST_AUTO_TEST_CASE(each_fault_fails_the_calls_it_breaks) {
  std::vector<std::string> f = failed(check(3, Fault::AllReduceLastElement));
  BOOST_TEST(f.size() == 4u);  // every size
  BOOST_TEST(all_start_with(f, "all_reduce"));

  f = failed(check(2, Fault::UnevenReduceScatter));  // 1, 4,099 and 2^20 + 3 do not divide by 2; 2^21 does
  BOOST_TEST(f.size() == 6u);
  BOOST_TEST(all_start_with(f, "reduce_scatter"));

  f = failed(check(3, Fault::InPlaceAllGather));
  BOOST_TEST(f.size() == 3u);  // every size but 1
  BOOST_TEST(all_start_with(f, "all_gather(in place)"));

  f = failed(check(3, Fault::BroadcastRootZero));
  BOOST_TEST(f.size() == 8u);  // roots 1 and 2 at every size
  BOOST_TEST(all_start_with(f, "broadcast(root "));

  const std::vector<CollectiveCheck> r = check(2, Fault::AbortIgnored);
  f = failed(r);
  BOOST_REQUIRE(f.size() == 1u);
  BOOST_TEST(f[0] == "abort, then all_reduce");
  BOOST_TEST(r.back().error.find("a call after abort() returned") != std::string::npos, r.back().error);
}

BOOST_AUTO_TEST_CASE(a_group_out_of_rank_order_is_refused) {
  std::vector<std::shared_ptr<Communicator>> group = make_local_group(2);
  std::swap(group[0], group[1]);
  const std::unique_ptr<Backend> a = make_cpu_backend(1), b = make_cpu_backend(1);
  BOOST_CHECK_THROW(check_collectives(group, {a.get(), b.get()}), std::invalid_argument);
  BOOST_CHECK_THROW(check_collectives(make_local_group(2), {a.get()}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
