// connect_peers (actors/processes.h) choosing how a GPU dp group spanning
// processes communicates: NCCL where every rank is on a GPU of its own, the
// ring over the transfer engine where two share one — decided from the
// entries every process sent, so every rank decides alike. Both ranks of a
// group of two live in this one process here, as two processes would hold
// one each (the ring's puts then stay inside the one UcxTransport). NCCL
// itself needs GPUs: connecting it fails here, named, and leaves the group
// unchosen.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <thread>

#include "actors/processes.h"
#include "actors/train_phases.h"
#include "rdma/ucx_transport.h"
#include "transport/chosen_communicator.h"

using namespace maestro;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(connect_peers_choice)

namespace {

const char* kGroup = "section 'llm' stage 0 dp group (tp rank 0)";

// A set-up holding both ranks of section 0's stage-0 dp group of 2, each
// rank's communicator the choice between NCCL (0) and the ring (1); rank r
// on the GPU gpus[r].
struct TwoRanks {
  RunSetup setup;
  ConnectPeers peers;
  explicit TwoRanks(const std::vector<std::string>& gpus) {
    setup.peer_transport = std::make_shared<UcxTransport>();
    RunSetup::NcclGroup g;
    g.name = kGroup;
    g.replicas = {0, 1};
    g.gpus = gpus;
    g.ranks = make_peer_dp_ranks(2, {0, 1}, {0, 1});
    g.id = nccl_unique_id();
    for (int r = 0; r < 2; ++r) {
      auto ring = std::make_shared<RingCommunicator>(*setup.peer_transport, r, 2);
      setup.rings.push_back({0, 0, 0, r, ring});
      g.choices.push_back(std::make_shared<ChosenCommunicator>(
          std::vector<std::shared_ptr<Communicator>>{g.ranks[size_t(r)], ring}));
    }
    setup.nccl_groups.push_back(std::move(g));
    peers.endpoints = {endpoint_bytes(setup)};  // process 0 = this one: skipped
    peers.names = {"this process"};
    peers.rings = ring_entries(setup);
    peers.nccl_ranks = nccl_rank_entries(setup);
    peers.transport_ids = {setup.peer_transport->id()};
    peers.tensor_servers = {caf::actor{}};
  }
  ChosenCommunicator& rank(int r) { return *setup.nccl_groups[0].choices[size_t(r)]; }
};

}  // namespace

BOOST_AUTO_TEST_CASE(ranks_on_one_gpu_take_the_ring) {
  if (!nccl_built()) {  // without NCCL no group offers it (run_setup makes none)
    BOOST_CHECK_THROW(make_peer_dp_ranks(2, {0, 1}, {0, 1}), BackendUnavailable);
    return;
  }
  TwoRanks two({"node-a/0000:3b:00.0", "node-a/0000:3b:00.0"});
  BOOST_TEST(std::string(two.rank(0).name()) == "unchosen");
  BOOST_TEST_REQUIRE(two.peers.nccl_ranks.size() == 2u);
  BOOST_TEST(two.peers.nccl_ranks[0].id.size() == 128u);  // rank 0's entry carries the id
  BOOST_TEST(two.peers.nccl_ranks[1].id.empty());
  connect_peers(two.setup, two.peers, 0, 300ms);
  BOOST_TEST(std::string(two.rank(0).name()) == "ring");
  BOOST_TEST(std::string(two.rank(1).name()) == "ring");
  std::vector<float> a{1, 2, 3}, b{10, 20, 30};
  std::thread other([&] { two.rank(1).all_reduce(b.data(), b.size()); });
  two.rank(0).all_reduce(a.data(), a.size());
  other.join();
  BOOST_TEST((a == std::vector<float>{11, 22, 33}));
  BOOST_TEST((b == a));
}

BOOST_AUTO_TEST_CASE(ranks_on_their_own_gpus_take_nccl) {
  if (!nccl_built()) {
    BOOST_CHECK_THROW(nccl_unique_id(), BackendUnavailable);
    return;
  }
  TwoRanks two({"node-a/0000:3b:00.0", "node-b/0000:3b:00.0"});  // one bus id, two hosts: two GPUs
  std::string error;
  try {
    connect_peers(two.setup, two.peers, 0, 300ms);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // NCCL was tried: without GPUs (here) it cannot set the device; with them
  // both ranks in one process on devices 0 and 1 connect, or time out
  // where there is one GPU.
  if (error.empty()) {
    BOOST_TEST(std::string(two.rank(0).name()) == "nccl");
    return;
  }
  BOOST_TEST(error.starts_with(std::string(kGroup) + ": NCCL rank"), error);
  BOOST_TEST(std::string(two.rank(0).name()) == "unchosen");  // nothing half-chosen
  float x = 1;
  BOOST_CHECK_THROW(two.rank(0).all_reduce(&x, 1), CollectiveError);
}

BOOST_AUTO_TEST_CASE(a_rank_nobody_announced_is_an_error) {
  if (!nccl_built()) {
    BOOST_CHECK_THROW(nccl_unique_id(), BackendUnavailable);
    return;
  }
  TwoRanks two({"node-a/0000:3b:00.0", "node-a/0000:3b:00.0"});
  two.peers.nccl_ranks.pop_back();
  try {
    connect_peers(two.setup, two.peers, 0, 300ms);
    BOOST_FAIL("connected without rank 1's entry");
  } catch (const std::runtime_error& e) {
    BOOST_TEST(std::string(e.what()) == std::string(kGroup) + ": no entry for its rank 1");
  }
}

BOOST_AUTO_TEST_SUITE_END()
