// The NCCL communicator layout from a plan (gpu/nccl_layout.h), on the host.
#include <boost/test/unit_test.hpp>

#include <set>

#include "gpu/nccl_layout.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(nccl_layout)

BOOST_AUTO_TEST_CASE(groups_follow_the_megatron_numbering) {
  Plan plan;
  plan.sections.push_back({0, 8, /*tp*/ 2, /*pp*/ 2, /*dp*/ 2, 1});  // 8 devices
  plan.sections.push_back({8, 2, 1, 1, 2, 1});                        // dp only
  plan.sections.push_back({10, 1, 1, 1, 1, 1});                       // nothing to communicate
  const std::vector<CommGroup> g = plan_comm_groups(plan);
  // section 0: per stage 2 dp groups + 2 tp groups; section 1: one dp group
  BOOST_TEST_REQUIRE(g.size() == 9u);
  BOOST_TEST((g[0].kind == CommGroup::Kind::DataParallel));
  BOOST_TEST((g[0].devices == std::vector<int>{0, 2}));  // stage 0, tp rank 0, replicas 0 and 1
  BOOST_TEST((g[1].devices == std::vector<int>{1, 3}));
  BOOST_TEST((g[2].kind == CommGroup::Kind::TensorParallel));
  BOOST_TEST((g[2].devices == std::vector<int>{0, 1}));  // stage 0, replica 0
  BOOST_TEST((g[3].devices == std::vector<int>{2, 3}));
  BOOST_TEST((g[4].devices == std::vector<int>{4, 6}));  // stage 1
  BOOST_TEST((g[8].devices == std::vector<int>{8, 9}));
  BOOST_TEST(g[8].section == 1);
  BOOST_TEST(g[1].name() == "section 0 stage 0 dp group (tp rank 1)");
  // each device of section 0 is in exactly one dp and one tp group
  std::multiset<int> dp, tp;
  for (const CommGroup& x : g)
    if (x.section == 0)
      for (int d : x.devices) (x.kind == CommGroup::Kind::DataParallel ? dp : tp).insert(d);
  for (int d = 0; d < 8; ++d) {
    BOOST_TEST(dp.count(d) == 1u);
    BOOST_TEST(tp.count(d) == 1u);
  }
}

BOOST_AUTO_TEST_CASE(a_section_with_the_wrong_device_count_is_refused) {
  Plan plan;
  plan.sections.push_back({0, 3, 2, 1, 2, 1});
  BOOST_CHECK_THROW(plan_comm_groups(plan), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(dp_groups_wrap_onto_the_gpus_of_the_machine) {
  BOOST_TEST(physical_device(5, 4) == 1);
  BOOST_TEST(physical_device(3, 4) == 3);
  BOOST_CHECK_THROW(physical_device(0, 0), std::invalid_argument);
  Plan plan;  // as plan_cpu_run makes it: every section from device 0, tp 1
  plan.sections.push_back({0, 4, 1, /*pp*/ 2, /*dp*/ 2, 1});
  plan.sections.push_back({0, 1, 1, 1, 1, 1});
  BOOST_TEST((dp_group_devices(plan, 0, 0, 8) == std::vector<int>{0, 1}));
  BOOST_TEST((dp_group_devices(plan, 0, 1, 8) == std::vector<int>{2, 3}));
  BOOST_TEST((dp_group_devices(plan, 0, 1, 2) == std::vector<int>{0, 1}));  // stage 1 wraps onto GPUs 0, 1
  BOOST_TEST((dp_group_devices(plan, 1, 0, 2) == std::vector<int>{0}));
}

BOOST_AUTO_TEST_CASE(nccl_dp_groups_need_nccl_and_one_gpu_per_rank) {
  Plan plan;
  plan.sections.push_back({0, 1, 1, 1, 1, 1});
  plan.sections.push_back({0, 4, 1, 2, 2, 1});  // dp 2, pp 2
  const std::vector<std::string> names{"vision", "llm"};
  BOOST_TEST(nccl_refusal(plan, names, 2, true) == "");  // each stage's group on GPUs 0 and 1
  BOOST_TEST(nccl_refusal(plan, names, 4, true) == "");
  const std::string one_gpu = nccl_refusal(plan, names, 1, true);
  BOOST_TEST(one_gpu.find("section 'llm': dp = 2") != std::string::npos, one_gpu);
  BOOST_TEST(one_gpu.find("1 CUDA device(s) found; use dp <= 1") != std::string::npos, one_gpu);
  const std::string no_nccl = nccl_refusal(plan, names, 4, false);
  BOOST_TEST(no_nccl.find("section 'llm'") != std::string::npos, no_nccl);
  BOOST_TEST(no_nccl.find("needs NCCL") != std::string::npos, no_nccl);
  plan.sections[1] = {0, 1, 1, 1, 1, 1};  // dp 1 everywhere: nothing to refuse, whatever the machine
  BOOST_TEST(nccl_refusal(plan, names, 1, false) == "");
  // tp: a replica's tp group over NCCL in one process, one GPU per rank
  plan.sections[1] = {0, 2, /*tp*/ 2, 1, 1, 1};
  BOOST_TEST(nccl_refusal(plan, names, 2, true) == "");
  const std::string tp_one_gpu = nccl_refusal(plan, names, 1, true);
  BOOST_TEST(tp_one_gpu == "section 'llm': tp = 2 on the CUDA backend needs 2 distinct GPUs for each tp group (one "
                           "NCCL rank per GPU), 1 CUDA device(s) found; use tp <= 1");
  const std::string tp_no_nccl = nccl_refusal(plan, names, 2, false);
  BOOST_TEST(tp_no_nccl.find("section 'llm': tp = 2 on the CUDA backend needs NCCL") != std::string::npos, tp_no_nccl);
  // tp 2 × dp 2 (devices: replica 0 on 0, 1; replica 1 on 2, 3): 4 GPUs fit;
  // on 2 each tp group fits, but each tp rank's dp group would share a GPU
  plan.sections[1] = {0, 4, 2, 1, 2, 1};
  BOOST_TEST(nccl_refusal(plan, names, 4, true) == "");
  BOOST_TEST((tp_group_devices(plan, 1, 0, 1, 4) == std::vector<int>{2, 3}));
  BOOST_TEST((dp_group_devices(plan, 1, 0, 4, 1) == std::vector<int>{1, 3}));
  const std::string two_gpus = nccl_refusal(plan, names, 2, true);
  BOOST_TEST(two_gpus == "section 'llm': dp = 2 on the CUDA backend needs 2 distinct GPUs for each dp group (one NCCL "
                         "rank per GPU), 2 CUDA device(s) found; use dp <= 1");
  // Over processes tp > 1 on cuda is refused whatever the machine.
  const std::string tp = nccl_tp_refusal(plan, names);
  BOOST_TEST(tp.find("section 'llm': tp = 2 on the CUDA backend over processes is not built yet") != std::string::npos, tp);
  // Over processes: tp for the whole plan, and each in-process group alone.
  plan.sections[1] = {0, 4, 1, 2, 2, 1};
  BOOST_TEST(nccl_tp_refusal(plan, names) == "");
  BOOST_TEST(nccl_group_refusal(plan, 1, 1, "llm", 2, true) == "");
  const std::string stage1 = nccl_group_refusal(plan, 1, 1, "llm", 1, true);
  BOOST_TEST(stage1.find("section 'llm': dp = 2 on the CUDA backend needs 2 distinct GPUs") != std::string::npos, stage1);
  BOOST_TEST(nccl_group_refusal(plan, 0, 0, "vision", 1, false) == "");  // dp 1
}

// A dp group spanning processes goes over NCCL only where no two ranks
// share a GPU (what the processes tell each other of their ranks).
BOOST_AUTO_TEST_CASE(ranks_sharing_a_gpu_are_found) {
  BOOST_TEST(shared_gpu({"a/0000:3b:00.0"}) == "");
  BOOST_TEST(shared_gpu({"a/0000:3b:00.0", "a/0000:5e:00.0", "b/0000:3b:00.0"}) == "");
  BOOST_TEST(shared_gpu({"a/0000:3b:00.0", "b/0000:3b:00.0", "a/0000:3b:00.0"}) ==
             "ranks 0 and 2 share the GPU a/0000:3b:00.0");
}

BOOST_AUTO_TEST_SUITE_END()
