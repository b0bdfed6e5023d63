// The host side of a dp group spanning processes on the CUDA backend
// (gpu/backend_factory.h: nccl_unique_id, make_peer_dp_ranks,
// connect_peer_dp_ranks over gpu/cuda/nccl_communicator.h): ids, ranks laid
// out before their peers are known, and every refusal that comes before an
// NCCL call. A build without NCCL refuses each with BackendUnavailable.
// Connecting for real needs GPUs in several processes: not run here
// (docs/runtime.md, "GPU replicas across processes").
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include "gpu/backend_factory.h"
#include "gpu/device_query.h"
#include "transport/collectives.h"

using namespace maestro;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(nccl_peer_ranks)

namespace {

// What `f` threw, "" for nothing.
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ncclGetUniqueId needs no GPU: a new id per group, NCCL's size.
BOOST_AUTO_TEST_CASE(each_group_gets_its_own_unique_id) {
  if (!nccl_built()) {  // a build without NCCL refuses every step
    BOOST_CHECK_THROW(nccl_unique_id(), BackendUnavailable);
    BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0}, {0}), BackendUnavailable);
    return;
  }
  const std::vector<uint8_t> a = nccl_unique_id(), b = nccl_unique_id();
  BOOST_TEST(a.size() == 128u);
  BOOST_TEST(b.size() == 128u);
  BOOST_TEST((a != b));
}

// A process's ranks exist before their peers are known (the runners take
// them at set-up); a collective on one before it connects is an error, not
// a hang or a crash.
BOOST_AUTO_TEST_CASE(ranks_are_laid_out_unconnected) {
  if (!nccl_built()) {
    BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0}, {0}), BackendUnavailable);
    return;
  }
  const auto ranks = make_peer_dp_ranks(4, {1, 3}, {0, 1});
  BOOST_TEST_REQUIRE(ranks.size() == 2u);
  BOOST_TEST(ranks[0]->rank() == 1);
  BOOST_TEST(ranks[1]->rank() == 3);
  BOOST_TEST(ranks[1]->size() == 4);
  BOOST_TEST(std::string(ranks[0]->name()) == "nccl");
  float x = 1;
  const std::string e = thrown([&] { ranks[0]->all_reduce(&x, 1); });
  BOOST_TEST(e == "NCCL rank 1 of 4 on device 0: not connected to its peers", e);
  // aborting one aborts this process's others of the group
  ranks[1]->abort("the run ended");
  BOOST_TEST(thrown([&] { ranks[0]->all_reduce(&x, 1); }) == "the run ended");
  BOOST_CHECK_THROW(make_peer_dp_ranks(2, {2}, {0}), std::invalid_argument);
  BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0, 1}, {0}), std::invalid_argument);
}

// What a peer sends is checked before NCCL sees it: an id of the wrong
// size (garbage from a peer) or a rank that is no NCCL rank.
BOOST_AUTO_TEST_CASE(a_bad_id_or_rank_is_refused_before_any_nccl_call) {
  if (!nccl_built()) {
    BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0}, {0}), BackendUnavailable);
    return;
  }
  const auto ranks = make_peer_dp_ranks(2, {1}, {0});
  const std::string group = "section 'llm' stage 0 dp group (tp rank 0)";
  const std::string short_id =
      thrown([&] { connect_peer_dp_ranks({{ranks[0], std::vector<uint8_t>(5, 7), group}}, 1s); });
  BOOST_TEST(short_id == group + ": an NCCL unique id of 5 bytes (NCCL's has 128)", short_id);
  const auto local = make_local_group(2);
  const std::string not_nccl = thrown([&] { connect_peer_dp_ranks({{local[0], nccl_unique_id(), group}}, 1s); });
  BOOST_TEST(not_nccl == group + ": not an NCCL rank", not_nccl);
  BOOST_CHECK_NO_THROW(connect_peer_dp_ranks({}, 1s));
}

// Connecting a rank whose peer never comes ends in an error naming the
// group, within the time given (on a machine with a GPU: the wait times
// out; without one: the device cannot be set), and the rank stays
// unconnected.
BOOST_AUTO_TEST_CASE(a_rank_whose_peers_never_come_fails_named) {
  if (!nccl_built()) {
    BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0}, {0}), BackendUnavailable);
    return;
  }
  const auto ranks = make_peer_dp_ranks(2, {1}, {0});
  const std::string group = "section 'vision' stage 1 dp group (tp rank 0)";
  const std::string e = thrown([&] { connect_peer_dp_ranks({{ranks[0], nccl_unique_id(), group}}, 300ms); });
  BOOST_TEST(e.starts_with(group + ": NCCL rank 1 of 2"), e);
  if (cuda_device_count().value_or(0) == 0)
    BOOST_TEST(e.find("cudaSetDevice(0)") != std::string::npos, e);
  else
    BOOST_TEST(e.find("did not connect to its peers within 0.3 s") != std::string::npos, e);
  float x = 1;
  BOOST_TEST(thrown([&] { ranks[0]->all_reduce(&x, 1); }).find("not connected") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
