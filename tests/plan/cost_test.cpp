// The device table, the cluster, and RooflineCost: figures, monotonicity,
// the falling GEMM efficiency, the ring all-reduce and the memory accounting
// on hand-computed cases, and the calibration against Megatron-LM's MFU.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/sampler.h"
#include "dsl/frontend.h"
#include "graph/counts.h"
#include "graph/model_tensors.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"
#include "support/test_programs.h"

namespace maestro {
using namespace maestro::test;
namespace {

Cluster h100s(int64_t devices) {
  RuntimeConfig config;
  config.cluster.device = "h100";
  config.cluster.devices = devices;
  return make_cluster(config);
}

Sample text(int64_t id, int32_t tokens) {
  Sample s;
  s.id = id;
  s.modalities.add(Modality::Text);
  s.text_tokens = tokens;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cost)

BOOST_AUTO_TEST_CASE(device_table_figures) {
  const DeviceSpec* h100 = find_builtin_device("h100");
  const DeviceSpec* h200 = find_builtin_device("h200");
  const DeviceSpec* a100 = find_builtin_device("a100");
  BOOST_REQUIRE(h100 && h200 && a100 && find_builtin_device("cpu"));
  BOOST_TEST(h100->bf16_flops == 989e12);
  BOOST_TEST(h100->memory_bytes == int64_t(80e9));
  BOOST_TEST(h100->memory_bytes_per_s == 3.35e12);
  BOOST_TEST(h200->bf16_flops == 989e12);
  BOOST_TEST(h200->memory_bytes == int64_t(141e9));
  BOOST_TEST(h200->memory_bytes_per_s == 4.8e12);
  BOOST_TEST(a100->bf16_flops == 312e12);
  BOOST_TEST(a100->memory_bytes == int64_t(80e9));
  BOOST_TEST(a100->memory_bytes_per_s == 2.0e12);
  BOOST_TEST(find_builtin_device("v100") == nullptr);
}

// The names CUDA gives these GPUs (cudaDeviceProp::name) find their row;
// other GPUs, and names that only contain the digits, find none.
BOOST_AUTO_TEST_CASE(a_gpu_name_finds_its_row) {
  const std::vector<std::pair<std::string, std::string>> known = {
      {"NVIDIA H100 80GB HBM3", "h100"}, {"NVIDIA H100 PCIe", "h100"},      {"NVIDIA H100 NVL", "h100"},
      {"NVIDIA H200", "h200"},           {"NVIDIA H200 NVL", "h200"},       {"NVIDIA A100-SXM4-80GB", "a100"},
      {"NVIDIA A100-PCIE-40GB", "a100"}, {"nvidia a100 80gb pcie", "a100"},
  };
  for (const auto& [gpu, row] : known) {
    const DeviceSpec* d = builtin_device_for_gpu(gpu);
    BOOST_TEST_INFO(gpu);
    BOOST_REQUIRE(d != nullptr);
    BOOST_TEST(d->name == row);
  }
  for (const char* gpu : {"NVIDIA L4", "Tesla V100-SXM2-16GB", "NVIDIA GH200 480GB", "NVIDIA H1000", "", "cpu"}) {
    BOOST_TEST_INFO(gpu);
    BOOST_TEST(builtin_device_for_gpu(gpu) == nullptr);
  }
}

BOOST_AUTO_TEST_CASE(cluster_from_config_files) {
  for (const char* name : {"h100x8", "h100x64", "h200x64", "a100x64"}) {
    const RuntimeConfig config = load_runtime_config(std::string("configs/") + name + ".toml");
    const Cluster c = make_cluster(config);
    BOOST_TEST(c.devices == (std::string(name) == "h100x8" ? 8 : 64));
    BOOST_TEST(c.nodes() == c.devices / 8);
    BOOST_TEST(c.inter_node_bytes_per_s < c.intra_node_bytes_per_s);
  }
  const Cluster c = make_cluster(load_runtime_config("configs/h100x64.toml"));
  BOOST_TEST(c.link_bytes_per_s(0, 8) == c.intra_node_bytes_per_s);
  BOOST_TEST(c.link_bytes_per_s(4, 8) == c.inter_node_bytes_per_s);
  RuntimeConfig bad;
  bad.cluster.device = "tpu";
  BOOST_CHECK_THROW(make_cluster(bad), PlanError);
}

BOOST_AUTO_TEST_CASE(device_profile_round_trip) {
  const std::string path = (std::filesystem::temp_directory_path() / "maestro_cost_test_profile.toml").string();
  DeviceSpec d{"bench-cpu", 1.5e12, 0.75e12, int64_t(64e9), 30e9, false, {0.8, 4096}};
  write_device_profile(d, path);
  const DeviceSpec back = load_device_profile(path);
  BOOST_TEST(back.name == "bench-cpu");
  BOOST_TEST(back.bf16_flops == 1.5e12);
  BOOST_TEST(back.fp32_flops == 0.75e12);
  BOOST_TEST(back.memory_bytes == int64_t(64e9));
  BOOST_TEST(back.memory_bytes_per_s == 30e9);
  BOOST_TEST(back.gemm.max == 0.8);
  BOOST_TEST(back.gemm.half_size == 4096);
  RuntimeConfig config;
  config.cluster.device = path;
  BOOST_TEST(make_cluster(config).device.name == "bench-cpu");
  std::ofstream(path) << "name = \"x\"\nbf16_tflops = -1\n";
  BOOST_CHECK_THROW(load_device_profile(path), PlanError);
  // inf, nan, a memory past int64 bytes and rates that would make a step
  // last 1e297 s are refused, not simulated
  const std::string rest = "fp32_tflops = 50\nmemory_bandwidth_gbps = 1000\n";
  for (const char* bad : {"bf16_tflops = inf\nmemory_gb = 80\n", "bf16_tflops = nan\nmemory_gb = 80\n",
                          "bf16_tflops = 100\nmemory_gb = inf\n", "bf16_tflops = 100\nmemory_gb = 1e30\n",
                          "bf16_tflops = 100\nmemory_gb = 80\ngemm_half_size = inf\n",
                          "bf16_tflops = 1e-300\nmemory_gb = 80\n", "bf16_tflops = 100\nmemory_gb = 1e-4\n",
                          "bf16_tflops = 100\nmemory_gb = 80\ngemm_max_efficiency = 1e-300\n"}) {
    std::ofstream(path) << bad << rest;
    BOOST_CHECK_THROW(load_device_profile(path), PlanError);
  }
  std::ofstream(path) << "bf16_tflops = 100\nmemory_gb = 80\n" << rest;
  BOOST_TEST(load_device_profile(path).memory_bytes == int64_t(80e9));
  std::ofstream(path) << "bf16_tflops = 1e-3\nmemory_gb = 1e-3\ngemm_max_efficiency = 1e-3\n" << rest;
  BOOST_TEST(load_device_profile(path).gemm.max == 1e-3);
  BOOST_TEST(load_device_profile(path).attention.empty());  // not measured
  std::filesystem::remove(path);
}

// Attention's efficiency as --calibrate measured it, at a few lengths:
// interpolated in log(tokens) between them, the nearest outside.
BOOST_AUTO_TEST_CASE(an_efficiency_table_interpolates_in_log_size) {
  const EfficiencyTable t{{{100, 0.2}, {400, 0.4}, {1600, 0.1}}};
  BOOST_TEST(t.at(1) == 0.2);
  BOOST_TEST(t.at(100) == 0.2);
  BOOST_TEST(t.at(200) == 0.3, boost::test_tools::tolerance(1e-12));  // halfway in log
  BOOST_TEST(t.at(400) == 0.4, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.at(800) == 0.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(t.at(1e6) == 0.1);
  BOOST_TEST(EfficiencyTable{}.at(100) == 0.0);
}

// --calibrate's attention table: written only when measured, read back,
// and refused unless it is [tokens, efficiency] pairs with tokens ascending.
BOOST_AUTO_TEST_CASE(a_device_profile_carries_the_measured_attention_efficiency) {
  const std::string path = (std::filesystem::temp_directory_path() / "maestro_cost_test_attention.toml").string();
  DeviceSpec d{"bench-gpu", 800e12, 50e12, int64_t(141e9), 4e12, true, {0.6, 1e7}};
  write_device_profile(d, path);
  BOOST_TEST(load_device_profile(path).attention.empty());
  d.attention = {{{256, 0.2}, {1024, 0.35}, {4096, 0.4}}};
  write_device_profile(d, path);
  const DeviceSpec back = load_device_profile(path);
  BOOST_TEST((back.attention.points == d.attention.points));
  const std::string rest = "bf16_tflops = 100\nfp32_tflops = 50\nmemory_gb = 80\nmemory_bandwidth_gbps = 1000\n";
  std::ofstream(path) << "attention_efficiency = [[64, 0.2], [2048, 1]]\n" << rest;
  BOOST_TEST(load_device_profile(path).attention.at(2048) == 1.0);
  for (const char* bad : {"attention_efficiency = []\n", "attention_efficiency = 0.3\n",
                          "attention_efficiency = [0.3]\n", "attention_efficiency = [[64]]\n",
                          "attention_efficiency = [[64, 0.2, 3]]\n", "attention_efficiency = [[64, 0]]\n",
                          "attention_efficiency = [[64, 1.5]]\n", "attention_efficiency = [[0, 0.2]]\n",
                          "attention_efficiency = [[64, nan]]\n", "attention_efficiency = [[64, 'x']]\n",
                          "attention_efficiency = [[256, 0.2], [64, 0.3]]\n",
                          "attention_efficiency = [[64, 0.2], [64, 0.3]]\n"}) {
    std::ofstream(path) << bad << rest;
    BOOST_CHECK_THROW(load_device_profile(path), PlanError);
  }
  std::filesystem::remove(path);
}

// With measured attention efficiencies each sequence's attention FLOPs run
// at its own length's: only that term of a micro-batch's forward changes
// with the table (differences cancel the rest), and backward stays twice
// the forward.
BOOST_AUTO_TEST_CASE(a_measured_attention_table_costs_each_sequence_at_its_length) {
  const Program program = load("bench/plan_calibration/llama2_7b.sect");
  const SectionGraph g = build_graph(program);
  const Sample a = text(1, 4000), b = text(2, 500);
  const std::vector<const Sample*> mb{&a, &b};
  const SectionPlan p{0, 1, 1, 1, 1, 2};
  auto forward_with = [&](EfficiencyTable attention) {
    Cluster cl = h100s(8);
    cl.device.attention = attention;
    const RooflineCost cost(g, cl);
    const CostModel::MicroBatchCosts c = cost.micro_batch_costs(0, mb, p);
    BOOST_TEST(c.backward_s == 2 * c.forward_s, boost::test_tools::tolerance(1e-12));
    return c.forward_s;
  };
  const ModelSpec& model = program.sections[0].model;
  const double a1 = attention_forward_flops(model, 4000), a2 = attention_forward_flops(model, 500), peak = 989e12;
  const double flat_half = forward_with({{{1000, 0.5}}}), flat_quarter = forward_with({{{1000, 0.25}}});
  BOOST_TEST(flat_quarter - flat_half == (a1 + a2) * (4 - 2) / peak, boost::test_tools::tolerance(1e-9));
  // 500 tokens at 0.2, 4000 at 0.4: each at its own.
  const double by_length = forward_with({{{500, 0.2}, {4000, 0.4}}});
  BOOST_TEST(by_length - flat_half == (a1 * (1 / 0.4 - 2) + a2 * (1 / 0.2 - 2)) / peak,
             boost::test_tools::tolerance(1e-9));
  // Not measured: the gemm curve's max and the longest sequence's shortfall, as before.
  BOOST_TEST(forward_with({}) != flat_half);
}

BOOST_AUTO_TEST_CASE(ring_all_reduce_hand_case) {
  // 1 GB over 8 devices at 100 GB/s: 2·7/8 · 1e9 / 1e11 = 17.5 ms.
  BOOST_TEST(ring_all_reduce_s(1e9, 8, 100e9) == 0.0175, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(ring_all_reduce_s(1e9, 1, 100e9) == 0.0);
}

BOOST_AUTO_TEST_CASE(grad_sync_and_memory_hand_case) {
  const Program program = load("bench/plan_calibration/llama2_7b.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = h100s(64);
  const RooflineCost cost(g, cl);
  const double params = double(parameter_count(program.sections[0].model));
  // tp=2, pp=2, dp=2 inside one node of 8: fp32 gradients of a quarter of
  // the parameters, ring over 2 at 900 GB/s ([cluster] defaults).
  const SectionPlan in_node{0, 8, 2, 2, 2, 1};
  BOOST_TEST(cost.grad_sync_s(0, in_node) == 2.0 * 1 / 2 * (4 * params / 4) / 900e9, boost::test_tools::tolerance(1e-3));
  // The same on devices 4-11, spanning two nodes: the inter-node links (400 GB/s).
  const SectionPlan across{4, 8, 2, 2, 2, 1};
  BOOST_TEST(cost.grad_sync_s(0, across) == 2.0 * 1 / 2 * (4 * params / 4) / 400e9, boost::test_tools::tolerance(1e-3));
  // Train bf16: 18 B per parameter over tp·pp = 4.
  BOOST_TEST(double(cost.weights_bytes_per_device(0, in_node)) == 18 * params / 4, boost::test_tools::tolerance(1e-3));
  // ZeRO-1 on the same devices: 2 + 4 B per parameter whole, 12 B split
  // over dp = 2; the fp32 gradients reduce-scattered and the bf16 weights
  // all-gathered, each (dp-1)/dp of the buffer over the ring.
  SectionPlan sharded = in_node;
  sharded.shard_optimizer = true;
  BOOST_TEST(double(cost.weights_bytes_per_device(0, sharded)) == (6 + 12.0 / 2) * params / 4,
             boost::test_tools::tolerance(1e-3));
  BOOST_TEST(cost.grad_sync_s(0, sharded) == 1.0 / 2 * (4 * params / 4) / 900e9 + 1.0 / 2 * (2 * params / 4) / 900e9,
             boost::test_tools::tolerance(1e-3));
  BOOST_TEST(cost.optimizer_s(0, sharded) < cost.optimizer_s(0, in_node));
  // Activations of a micro-batch of two 4096-token sequences: counts.h's
  // per-token bytes (fused attention on an H100) over tp·pp.
  const Sample a = text(0, 4096), b = text(1, 4096);
  const int64_t per_token = activation_bytes_per_token(program.sections[0].model, Precision::BF16, ActivationKind::Train);
  BOOST_TEST(cost.activation_bytes(0, {&a, &b}, in_node) == per_token * 8192 / 4);
}

// transfer_bytes: the rows the producer emits × its output width × an
// activation's bytes (tiny_mllm trains in fp32); transfer_s moves them over
// the pair's slowest link (900 GB/s in a node, 400 across), nothing when
// both sides have the same devices and layout.
BOOST_AUTO_TEST_CASE(a_flows_bytes_and_its_transfer_time) {
  const Program program = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, h100s(64));
  Sample x = text(0, 40);
  x.modalities.add(Modality::Image);
  x.images = 1;
  const std::vector<const Sample*> mb{&x, &x};
  const Flow* to_proj = nullptr;
  for (const Flow& f : program.flows)
    if (f.from == "vision" && f.to == "vision_proj") to_proj = &f;
  BOOST_REQUIRE(to_proj != nullptr);
  const int64_t rows = g.emitted(g.find("vision"), {x.modalities, x.text_tokens, x.images, x.audio_frames});
  BOOST_TEST(rows > 0);
  const int64_t bytes = 2 * rows * 64 * 4;  // vision's hidden: 64
  BOOST_TEST(cost.transfer_bytes(*to_proj, mb) == bytes);
  const SectionPlan a{0, 1, 1, 1, 1, 1}, b{1, 1, 1, 1, 1, 1}, far{9, 1, 1, 1, 1, 1};
  BOOST_TEST(cost.transfer_s(*to_proj, mb, a, a) == 0.0);
  BOOST_TEST(cost.transfer_s(*to_proj, mb, a, b) == double(bytes) / 900e9, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(cost.transfer_s(*to_proj, mb, a, far) == double(bytes) / 400e9, boost::test_tools::tolerance(1e-12));
}

// fp32_activations (the plan of a run on GPUs: the engine stores every
// activation fp32): a bf16 program's activations, a stage's kept input,
// hand-offs and tp all-reduces at 4 bytes an element, twice the working
// precision's; its parameter state and compute as before.
BOOST_AUTO_TEST_CASE(fp32_activations_count_a_bf16_programs_activations_at_four_bytes) {
  Program program = load("bench/plan_calibration/llama2_7b.sect");
  BOOST_TEST_REQUIRE(int(program.train.precision) == int(Precision::BF16));
  program.sections[0].recompute_auto = true;
  const SectionGraph g = build_graph(program);
  const RooflineCost bf16(g, h100s(64)), engine(g, h100s(64), true);
  SectionPlan plan{0, 8, 2, 2, 2, 1}, stage = plan;
  stage.recompute_level = 3;
  const Sample a = text(0, 4096), b = text(1, 300);
  const std::vector<const Sample*> mb{&a, &b};
  BOOST_TEST(engine.activation_bytes(0, mb, plan) ==
             activation_bytes_per_token(program.sections[0].model, Precision::FP32, ActivationKind::Train) * 4396 / 4);
  BOOST_TEST(engine.activation_bytes(0, mb, plan) > bf16.activation_bytes(0, mb, plan));
  BOOST_TEST(engine.kept_activation_bytes(0, mb, stage) == 2 * bf16.kept_activation_bytes(0, mb, stage));
  BOOST_TEST(engine.tp_all_reduce_bytes(0, mb, plan) == 2 * bf16.tp_all_reduce_bytes(0, mb, plan));
  BOOST_TEST(engine.weights_bytes_per_device(0, plan) == bf16.weights_bytes_per_device(0, plan));
  // A stage's hand-off to the next: [tokens, hidden] whole, 0 without stages.
  BOOST_TEST(bf16.stage_handoff_bytes(0, mb, plan) == 4396 * 4096 * 2);
  BOOST_TEST(engine.stage_handoff_bytes(0, mb, plan) == 4396 * 4096 * 4);
  SectionPlan one_stage = plan;
  one_stage.pp = 1, one_stage.devices = 4;
  BOOST_TEST(engine.stage_handoff_bytes(0, mb, one_stage) == 0);
  BOOST_TEST(engine.forward_s(0, mb, plan) >= bf16.forward_s(0, mb, plan));  // the same FLOPs; tp sends twice the bytes
  // An fp32 program: nothing changes.
  Program fp32 = program;
  fp32.train.precision = Precision::FP32;
  const SectionGraph g32 = build_graph(fp32);
  const RooflineCost plain(g32, h100s(64)), engine32(g32, h100s(64), true);
  BOOST_TEST(engine32.activation_bytes(0, mb, plan) == plain.activation_bytes(0, mb, plan));
  BOOST_TEST(engine32.forward_s(0, mb, plan) == plain.forward_s(0, mb, plan));
}

// SectionPlan::recompute_level 3 (a stage recomputed whole): the compute
// and tp all-reduces of every layer recomputed (level 2); all of the
// activations while it runs (level 0's); between forward and backward one
// layer input, [tokens, hidden] bf16 over tp.
BOOST_AUTO_TEST_CASE(a_stage_recomputed_whole_costs_as_all_layers_and_keeps_its_input) {
  Program program = load("bench/plan_calibration/llama2_7b.sect");
  program.sections[0].recompute_auto = true;
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, h100s(64));
  SectionPlan none{0, 8, 2, 2, 2, 1}, all = none, stage = none;
  all.recompute_level = 2, stage.recompute_level = 3;
  const Sample a = text(0, 4096), b = text(1, 4096);
  const std::vector<const Sample*> mb{&a, &b};
  BOOST_TEST(cost.backward_s(0, mb, stage) == cost.backward_s(0, mb, all));
  BOOST_TEST(cost.backward_s(0, mb, stage) > cost.backward_s(0, mb, none));
  BOOST_TEST(cost.tp_all_reduce_bytes(0, mb, stage) == cost.tp_all_reduce_bytes(0, mb, all));
  BOOST_TEST(cost.activation_bytes(0, mb, stage) == cost.activation_bytes(0, mb, none));
  BOOST_TEST(cost.kept_activation_bytes(0, mb, stage) == 8192 * 4096 * 2 / 2);
  BOOST_TEST(cost.kept_activation_bytes(0, mb, all) == cost.activation_bytes(0, mb, all));
  BOOST_TEST(cost.kept_activation_bytes(0, mb, stage) < cost.activation_bytes(0, mb, all));
}

// micro_batch_costs (what the simulator asks) is the four costs asked one
// by one, to the bit: a trained section at each recomputation level, with
// and without pipeline stages, and a frozen one (backward 0).
BOOST_AUTO_TEST_CASE(micro_batch_costs_are_the_four_costs_to_the_bit) {
  Program program = load("bench/plan_calibration/llama2_7b.sect");
  program.sections[0].recompute_auto = true;
  for (Mode mode : {Mode::Train, Mode::Frozen}) {
    program.sections[0].mode = mode;
    const SectionGraph g = build_graph(program);
    const RooflineCost cost(g, h100s(64));
    const Sample a = text(0, 4096), b = text(1, 300), c = text(2, 1);
    for (const std::vector<const Sample*>& mb : {std::vector<const Sample*>{&a}, {&a, &b, &c}})
      for (int64_t pp : {1, 4})
        for (int64_t level : {0, 1, 2, 3}) {
          SectionPlan p{0, 8 * pp, 2, pp, 4, 1};
          p.recompute_level = level;
          const CostModel::MicroBatchCosts m = cost.micro_batch_costs(0, mb, p);
          BOOST_TEST_CONTEXT("mode " << int(mode) << " samples " << mb.size() << " pp " << pp << " level " << level) {
            BOOST_TEST(m.forward_s == cost.forward_s(0, mb, p));
            BOOST_TEST(m.backward_s == cost.backward_s(0, mb, p));
            BOOST_TEST(m.activation_bytes == cost.activation_bytes(0, mb, p));
            BOOST_TEST(m.kept_activation_bytes == cost.kept_activation_bytes(0, mb, p));
          }
        }
    BOOST_TEST((mode == Mode::Frozen) == (cost.micro_batch_costs(0, {&a}, SectionPlan{0, 1, 1, 1, 1, 1}).backward_s == 0.0));
  }
}

BOOST_AUTO_TEST_CASE(monotone_in_tokens_and_samples) {
  const Program program = load("bench/plan_calibration/llama2_7b.sect");
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, h100s(8));
  const SectionPlan p{0, 2, 2, 1, 1, 1};
  double last = 0;
  for (int32_t tokens : {16, 64, 256, 1024, 4096}) {
    const Sample s = text(0, tokens);
    const double t = cost.forward_s(0, {&s}, p);
    BOOST_TEST(t > last);
    BOOST_TEST(cost.backward_s(0, {&s}, p) >= 2 * t * 0.99);
    // Never faster than the peak the lower bound assumes.
    BOOST_TEST(double(p.tp * p.pp) * (t + cost.backward_s(0, {&s}, p)) >= cost.peak_device_s(0, s));
    last = t;
  }
  const Sample x = text(0, 700), y = text(1, 300);
  BOOST_TEST(cost.forward_s(0, {&x, &y}, p) > cost.forward_s(0, {&x}, p));
}

// Far below the GEMM curve's half-size (tiny_mllm's LLM, hidden 128, on an
// H100) time per token is nearly fixed, so costing attention — more FLOPs
// per token the longer the sequence — at the micro-batch's efficiency made
// a long sample with a short one cheaper than the long one alone, and the
// simulator's lower bound (each sample alone) above its iteration.
BOOST_AUTO_TEST_CASE(a_micro_batch_is_never_faster_than_part_of_it) {
  const Program program = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, h100s(8));
  const int llm = g.find("llm");
  for (const SectionPlan& p : {SectionPlan{0, 1, 1, 1, 1, 1}, SectionPlan{0, 2, 2, 1, 1, 1}}) {
    const Sample x = text(0, 500), y = text(1, 8);
    BOOST_TEST(cost.forward_s(llm, {&x, &y}, p) > cost.forward_s(llm, {&x}, p));
    BOOST_TEST(cost.backward_s(llm, {&x, &y}, p) > cost.backward_s(llm, {&x}, p));
  }
}

BOOST_AUTO_TEST_CASE(efficiency_falls_for_small_gemms) {
  const Program program = load("bench/plan_calibration/llama2_7b.sect");
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, h100s(8));
  double last = 0;
  for (int64_t tokens : {8, 64, 512, 4096, 32768}) {
    const double e = cost.efficiency(0, tokens, 1);
    BOOST_TEST(e > last);
    BOOST_TEST(e < h100s(8).device.gemm.max);
    last = e;
  }
  BOOST_TEST(cost.efficiency(0, 4096, 8) < cost.efficiency(0, 4096, 1));  // tp narrows every GEMM
  // Time per token is higher for a small micro-batch.
  const SectionPlan p{0, 1, 1, 1, 1, 1};
  const Sample small = text(0, 32), big = text(1, 4096);
  BOOST_TEST(cost.forward_s(0, {&small}, p) / 32 > cost.forward_s(0, {&big}, p) / 4096);
}

// Llama-2-7B, seq 4096, bf16, 8×H100, planner-tuned: model FLOPs (forward +
// backward, no recompute) / (iteration × devices × peak) must fall in the
// MFU range Megatron-LM publishes for H100 (docs/planner.md, "Calibration").
BOOST_AUTO_TEST_CASE(llama2_7b_calibration_in_megatron_mfu_range) {
  const Program program = load("bench/plan_calibration/llama2_7b.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const RooflineCost cost(g, cl);
  const Sampler sampler(program.data, program.train.global_batch);
  const Batch batch = sampler.batch(0);
  const Plan plan = plan_program(g, cl, cost, batch);
  const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost);
  const double model_flops =
      3 * forward_flops(program.sections[0].model, 4096) * double(program.train.global_batch);
  const double mfu = model_flops / (r.iteration_s * double(cl.devices) * cl.device.bf16_flops);
  BOOST_TEST_MESSAGE("Llama-2-7B on 8xH100: MFU " << mfu << ", iteration " << r.iteration_s << " s");
  BOOST_TEST(mfu >= 0.38);
  BOOST_TEST(mfu <= 0.47);
}

// Two published points beyond Llama-2-7B (docs/PERFORMANCE.md,
// "Calibration"), each the planner's plan simulated against the published
// step time. The bands are where the uncalibrated cost model lands today,
// not accuracy claims: GPT-3 175B on 1,024 A100s is simulated ~26 % slower
// than Megatron-LM's 140 TFLOP/s (no interleaved pipeline schedule, no
// overlap of communication in the model), Llama-3-70B on 64 H100s ~7 %
// slower than NeMo's 18.90 s. A change to the cost model that moves either
// outside its band must say why in docs/PERFORMANCE.md.
double simulated_step_s(const std::string& model, const std::string& config) {
  const Program program = load(model);
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config(config));
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
  const Plan plan = plan_program(g, cl, cost, batch);
  return simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost).iteration_s;
}

BOOST_AUTO_TEST_CASE(published_points_gpt3_175b_and_llama3_70b) {
  // Narayanan et al. 2021 §5.1: F = 96·B·s·l·h²·(1 + s/6h + V/16lh) FLOPs per
  // step (recompute included) at 140 TFLOP/s on each of 1,024 GPUs.
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double gpt3_published = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (1024 * 140e12);
  BOOST_TEST(gpt3_published == 31.466, boost::test_tools::tolerance(1e-3));
  const double gpt3 = simulated_step_s("bench/plan_calibration/gpt3_175b.sect", "bench/plan_calibration/a100x1024.toml");
  BOOST_TEST_MESSAGE("GPT-3 175B on 1024xA100: simulated " << gpt3 << " s, published " << gpt3_published << " s");
  BOOST_TEST(gpt3 / gpt3_published >= 1.0);
  BOOST_TEST(gpt3 / gpt3_published <= 1.35);
  // NeMo AutoModel performance summary, DGX-H100 BF16: 18.90 s per step of
  // 128 × 8,192 tokens (866.77 tokens/s per GPU).
  const double llama = simulated_step_s("bench/plan_calibration/llama3_70b.sect", "configs/h100x64.toml");
  BOOST_TEST_MESSAGE("Llama-3-70B on 64xH100: simulated " << llama << " s, published 18.90 s");
  BOOST_TEST(llama / 18.90 >= 0.95);
  BOOST_TEST(llama / 18.90 <= 1.15);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
