// `[runtime] backend` resolved for every kind of build and machine
// (resolve_backend, gpu/backend_factory.h): auto picks cuda exactly when
// the CUDA backend is built and a device is present; cuda without either is
// BackendUnavailable naming why; a worker runs its coordinator's backend
// (worker_backend) or refuses naming it.
#include <boost/test/unit_test.hpp>

#include <string>

#include "gpu/backend_factory.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(backend_resolution)

BOOST_AUTO_TEST_CASE(auto_picks_cuda_only_with_the_backend_and_a_device) {
  BOOST_TEST((resolve_backend("auto", true, 2).kind == BackendKind::Cuda));
  BOOST_TEST(resolve_backend("auto", true, 2).reason == "2 CUDA device(s) found");
  BOOST_TEST((resolve_backend("auto", true, 0).kind == BackendKind::Cpu));
  BOOST_TEST((resolve_backend("auto", false, 4).kind == BackendKind::Cpu));
  BOOST_TEST(resolve_backend("auto", false, 4).reason == "4 CUDA device(s) found; this build has no CUDA backend");
  BOOST_TEST((resolve_backend("auto", false, -1).kind == BackendKind::Cpu));
  BOOST_TEST((resolve_backend("cpu", true, 8).kind == BackendKind::Cpu));
}

BOOST_AUTO_TEST_CASE(cuda_needs_the_backend_and_a_device) {
  BOOST_TEST((resolve_backend("cuda", true, 1).kind == BackendKind::Cuda));
  auto refused = [](bool built, int devices, const std::string& why) {
    try {
      resolve_backend("cuda", built, devices);
      BOOST_ERROR("accepted cuda without " << why);
    } catch (const BackendUnavailable& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused(true, 0, "no CUDA device found");
  refused(false, 2, "this build has no CUDA backend");
  refused(false, -1, "this build cannot see CUDA devices");
  BOOST_CHECK_THROW(resolve_backend("gpu", true, 1), std::invalid_argument);
}

// A worker of a run over processes runs the coordinator's resolved backend
// or refuses (std::invalid_argument: status 2 on both sides).
// --gpu-attention's refusals (exit status 2 at the CLI): the tiled or flash
// kernels with a head over 128, naming the section; the tensor-core or
// flash path in an fp32 run. Any other choice runs.
BOOST_AUTO_TEST_CASE(gpu_attention_refuses_what_the_model_cannot_take) {
  Program p;
  p.train.precision = Precision::BF16;
  Section proj, vision, llm;
  proj.name = "proj", proj.model.spec = MlpSpec{4096, 4096, 4096, 2, Activation::Gelu};
  vision.name = "vision", vision.model.spec = VitSpec{2, 1024, 16, 4096, 14, 224};  // heads of 64
  llm.name = "llm", llm.model.spec = TransformerSpec{2, 4096, 16, 16, 11008, 32000};  // heads of 256
  p.sections = {proj, vision, llm};
  for (const AttentionPath path : {AttentionPath::Auto, AttentionPath::TensorCore, AttentionPath::Reference})
    BOOST_TEST(gpu_attention_refusal(path, p) == "", attention_path_name(path));
  const std::string tiled = gpu_attention_refusal(AttentionPath::Fast, p);
  BOOST_TEST(tiled.find("section llm has attention heads of 256") != std::string::npos, tiled);
  const std::string flash = gpu_attention_refusal(AttentionPath::Flash, p);
  BOOST_TEST(flash.find("--gpu-attention=flash: section llm has attention heads of 256") != std::string::npos, flash);
  p.sections.pop_back();
  BOOST_TEST(gpu_attention_refusal(AttentionPath::Fast, p) == "");
  BOOST_TEST(gpu_attention_refusal(AttentionPath::Flash, p) == "");
  p.train.precision = Precision::FP32;
  BOOST_TEST(gpu_attention_refusal(AttentionPath::TensorCore, p).find("train.precision = fp32") != std::string::npos);
  const std::string flash32 = gpu_attention_refusal(AttentionPath::Flash, p);
  BOOST_TEST(flash32.find("--gpu-attention=flash rounds the attention's operands to bf16") != std::string::npos, flash32);
  BOOST_TEST(gpu_attention_refusal(AttentionPath::Fast, p) == "");
}

BOOST_AUTO_TEST_CASE(a_worker_runs_the_coordinators_backend_or_refuses) {
  BOOST_TEST((worker_backend("cpu", false, -1) == BackendKind::Cpu));
  BOOST_TEST((worker_backend("cpu", true, 4) == BackendKind::Cpu));  // never "auto" on the worker's side
  BOOST_TEST((worker_backend("cuda", true, 1) == BackendKind::Cuda));
  auto refused = [](const std::string& backend, bool built, int devices, const std::string& why) {
    try {
      worker_backend(backend, built, devices);
      BOOST_ERROR("a worker accepted " << backend << " without " << why);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused("cuda", true, 0, "the coordinator runs the cuda backend: runtime.backend = \"cuda\": no CUDA device found");
  refused("cuda", false, 2, "the coordinator runs the cuda backend: runtime.backend = \"cuda\": this build has no CUDA");
  refused("auto", true, 2, "the coordinator names backend \"auto\"; expected cpu or cuda");
}

// The runtime's dp groups come from make_dp_group: the in-process group on
// the CPU (dp ranks in replica order), and on cuda a one-replica section
// needs no NCCL at all; replicas of the CPU backend name no device.
BOOST_AUTO_TEST_CASE(the_cpu_backend_gets_the_in_process_dp_group) {
  Plan plan;
  plan.sections.push_back({0, 6, 1, 2, 3, 1});
  plan.sections.push_back({0, 1, 1, 1, 1, 1});
  const auto group = make_dp_group(BackendKind::Cpu, plan, 0, 1);
  BOOST_TEST_REQUIRE(group.size() == 3u);
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(std::string(group[size_t(r)]->name()) == "local");
    BOOST_TEST(group[size_t(r)]->rank() == r);
    BOOST_TEST(group[size_t(r)]->size() == 3);
  }
  const auto single = make_dp_group(BackendKind::Cuda, plan, 1, 0);
  BOOST_TEST_REQUIRE(single.size() == 1u);
  BOOST_TEST(std::string(single[0]->name()) == "local");
  BOOST_TEST(replica_device(BackendKind::Cpu, plan, 0, 1, 2) == -1);
}

// Likewise a replica's tp group: the in-process group on the CPU (ranks in
// tp order, as the engine's tensor-parallel ops expect), none needed for tp 1.
BOOST_AUTO_TEST_CASE(the_cpu_backend_gets_the_in_process_tp_group) {
  Plan plan;
  plan.sections.push_back({0, 4, 2, 1, 2, 1});  // tp 2 × dp 2
  plan.sections.push_back({0, 1, 1, 1, 1, 1});
  const auto group = make_tp_group(BackendKind::Cpu, plan, 0, 0, 1);
  BOOST_TEST_REQUIRE(group.size() == 2u);
  for (int t = 0; t < 2; ++t) {
    BOOST_TEST(std::string(group[size_t(t)]->name()) == "local");
    BOOST_TEST(group[size_t(t)]->rank() == t);
    BOOST_TEST(group[size_t(t)]->size() == 2);
  }
  const auto single = make_tp_group(BackendKind::Cuda, plan, 1, 0, 0);
  BOOST_TEST_REQUIRE(single.size() == 1u);
  BOOST_TEST(std::string(single[0]->name()) == "local");
  BOOST_TEST(make_dp_group(BackendKind::Cpu, plan, 0, 0, 1).size() == 2u);  // tp rank 1's dp group
  BOOST_TEST(replica_device(BackendKind::Cpu, plan, 0, 0, 1, 1) == -1);
}

BOOST_AUTO_TEST_SUITE_END()
