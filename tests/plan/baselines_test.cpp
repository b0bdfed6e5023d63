// The faithful Megatron-LM and MIMO baselines' structural rules (issue 18):
// encoders on stage 0, the teacher in the student's layout, padding and
// packing lengths by hand, the 1F1B replay against the closed form, ZeRO-1
// memory by hand, MIMO's one micro-batch size per module; the sequential
// baseline as a step can run it against the ideal one.
#include <boost/test/unit_test.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <tuple>

#include "data/sampler.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "modelled.h"
#include "support/test_programs.h"

namespace maestro {
using namespace maestro::test;
namespace {

Sample text_sample(int64_t id, int32_t tokens) {
  Sample x;
  x.id = id;
  x.modalities.add(Modality::Text);
  x.text_tokens = tokens;
  return x;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(baselines)

// tiny_mllm: the vision encoder and the projector wholly on stage 0, the
// LLM split first_stage_layers / L on stage 0 and the rest evenly.
BOOST_AUTO_TEST_CASE(megatron_puts_encoders_on_stage_0) {
  const Program program = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(program);
  const int llm = g.find("llm");
  BOOST_REQUIRE(llm >= 0);
  const int64_t layers = std::get<TransformerSpec>(g.section(llm).model.spec).layers;
  BOOST_REQUIRE(layers >= 2);
  const FaithfulMegatronConfig c{1, 2, 1, 1, 1, false, false};
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    BOOST_TEST_CONTEXT(g.nodes[size_t(s)].name) {
      if (s == llm) {
        BOOST_TEST(megatron_stage_share(g, g.topo_order, s, 0, c) == 1.0 / double(layers));
        BOOST_TEST(megatron_stage_share(g, g.topo_order, s, 1, c) == double(layers - 1) / double(layers));
      } else {
        BOOST_TEST(megatron_stage_share(g, g.topo_order, s, 0, c) == 1.0);
        BOOST_TEST(megatron_stage_share(g, g.topo_order, s, 1, c) == 0.0);
      }
    }
  }
}

// KD: the teacher takes the student's layout — the same stage shares,
// whatever the teacher's own `parallel` block says.
BOOST_AUTO_TEST_CASE(megatron_teacher_in_the_students_layout) {
  const Program program = load("models/kd_70b_to_8b.sect");
  const SectionGraph g = build_graph(program);
  const int teacher = g.find("teacher"), student = g.find("student");
  for (const FaithfulMegatronConfig c : {FaithfulMegatronConfig{2, 4, 8, 1, 8, false, true},
                                         FaithfulMegatronConfig{2, 4, 8, 1, 5, true, true}})
    for (int64_t j = 0; j < c.pp; ++j)
      BOOST_TEST(megatron_stage_share(g, g.topo_order, teacher, j, c) ==
                 megatron_stage_share(g, g.topo_order, student, j, c));
  // On stage 0: 5 of the student's 32 layers.
  BOOST_TEST(megatron_stage_share(g, g.topo_order, student, 0, {2, 4, 8, 1, 5, false, true}) == 5.0 / 32.0);
}

// Padding by hand: 100, 300, 200 tokens pad to 300 each at pp = 1 and to
// the decoder's seq_length at pp > 1; packing into 500-token bins in loader
// order: {100, 300}, {200}, {450}.
BOOST_AUTO_TEST_CASE(megatron_padding_and_packing_lengths) {
  const Program program = load("models/kd_70b_to_8b.sect");
  const SectionGraph g = build_graph(program);
  const int student = g.find("student");
  Batch batch;
  for (int32_t n : {100, 300, 200, 450}) batch.samples.push_back(text_sample(int64_t(batch.samples.size()), n));
  const std::vector<const Sample*> mb = {&batch.samples[0], &batch.samples[1], &batch.samples[2]};
  BOOST_TEST(padded_lengths(g, student, mb, 1, 8192) == (std::vector<int64_t>{300, 300, 300}),
             boost::test_tools::per_element());
  BOOST_TEST(padded_lengths(g, student, mb, 2, 8192) == (std::vector<int64_t>{8192, 8192, 8192}),
             boost::test_tools::per_element());
  const auto bins = pack_loader_order(g, student, batch, 500);
  BOOST_REQUIRE(bins.size() == 3u);
  BOOST_TEST(bins[0].size() == 2u);
  BOOST_TEST(bins[1].size() == 1u);
  BOOST_TEST(bins[1][0]->text_tokens == 200);
  BOOST_TEST(bins[2][0]->text_tokens == 450);
}

// Equal micro-batches: 1F1B takes (m + pp - 1)·(f + b). A stage 0 twice as
// slow bounds the step by its own m·(f + b) and makes it slower than the
// balanced pipeline (6 micro-batches on 4 stages: 39 s against 27 s).
BOOST_AUTO_TEST_CASE(one_f_one_b_matches_the_closed_form) {
  const size_t m = 6, pp = 4;
  std::vector<std::vector<double>> f(m, std::vector<double>(pp, 1.0)), b(m, std::vector<double>(pp, 2.0));
  BOOST_TEST(one_f_one_b_s(f, b) == double(m + pp - 1) * 3.0, boost::test_tools::tolerance(1e-12));
  for (auto& row : f) row[0] = 2.0;
  for (auto& row : b) row[0] = 4.0;
  BOOST_TEST(one_f_one_b_s(f, b) >= double(m) * 6.0);
  BOOST_TEST(one_f_one_b_s(f, b) > double(m + pp - 1) * 3.0);
}

// ZeRO-1 by hand: tiny_kd trains in fp32, so a train section of P
// parameters at tp = pp = 1 keeps 4P (weights) + 4P (gradients) + 8P (Adam
// moments, no separate master copy) bytes; with the distributed optimizer
// over dp = 4 the 8P is split in 4: 10P. The frozen teacher keeps its 4T
// weights. The baseline's memory refusal quotes 10P + 4T.
BOOST_AUTO_TEST_CASE(megatron_memory_with_the_distributed_optimizer) {
  const Program program = load("models/tiny_kd.sect");
  const SectionGraph g = build_graph(program);
  Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const RooflineCost cost(g, cl);
  const int student = g.find("student"), teacher = g.find("teacher");
  const int64_t P = g.nodes[size_t(student)].params;
  const SectionPlan sharded{0, 4, 1, 1, 4, 1, true}, full{0, 4, 1, 1, 4, 1, false};
  BOOST_TEST(cost.weights_bytes_per_device(student, full) == 16 * P);
  BOOST_TEST(cost.weights_bytes_per_device(student, sharded) == 10 * P);
  // Frozen teacher: its fp32 weights only, sharding or not.
  const int64_t T = g.nodes[size_t(teacher)].params;
  BOOST_TEST(cost.weights_bytes_per_device(teacher, sharded) == 4 * T);
  cl.devices = 4;
  cl.device.memory_bytes = 1;  // nothing fits: the message gives the weights
  const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
  std::string problem;
  faithful_megatron_iteration_s(g, cl, cost, {1, 1, 4, 1, 1, false, true}, batch, &problem);
  BOOST_TEST(problem.find(fmt::format("stage 0: {:.1f} GB of weights", double(10 * P + 4 * T) / 1e9)) !=
                 std::string::npos,
             problem);
}

// MIMO: each module one static micro-batch size (its config lists every
// section once, each with one micro_batch=), and never slower than nothing:
// a positive time; the megatron baseline fits tiny_mllm on 8 H100.
BOOST_AUTO_TEST_CASE(mimo_keeps_one_micro_batch_per_module) {
  const Program program = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const RooflineCost cost(g, cl);
  const std::vector<Batch> batches = {Sampler(program.data, program.train.global_batch).batch(0)};
  const BaselineResult mimo = tuned_mimo(g, cl, cost, batches);
  BOOST_TEST_MESSAGE("mimo: " << mimo.config);
  BOOST_TEST(mimo.iteration_s > 0.0);
  for (const SectionNode& n : g.nodes) {
    const size_t at = mimo.config.find(n.name + "[");
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, n.name + " missing from " + mimo.config);
    const size_t next = mimo.config.find(';', at);
    const std::string module = mimo.config.substr(at, next == std::string::npos ? std::string::npos : next - at);
    BOOST_TEST(module.find("micro_batch=") == module.rfind("micro_batch="), module);
  }
  const BaselineResult megatron = tuned_faithful_megatron(g, cl, cost, batches);
  BOOST_TEST(megatron.name == "megatron");
  BOOST_TEST(megatron.iteration_s > 0.0);
}

// The sequential baseline as a step can run it (baselines.h) against the
// ideal one, on internvl_20b on one node of 8 H100: the sections' best
// shapes alone cannot share a device (their states plus the LLM's
// in-flight activations exceed 80 GB), so the baseline is slower than the
// ideal, and the ViT, whose share of the step's activations cannot stay on
// the devices across the LLM's phase, runs forward twice. (On 64 H100 it
// did too until every search kept to a tp the model splits over: with its
// ViT at tp 1 there, recomputing its layers now keeps them.)
BOOST_AUTO_TEST_CASE(sequential_runs_what_fits_together) {
  const Modelled m("models/internvl_20b.sect", "configs/h100x8.toml");
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost; const auto& batches = m.batches;
  int64_t states = 0, in_flight = 0;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    const ShapeOption best = shapes_alone(g, cl, cost, s, batches[0]).front();
    const SectionPlan alone = best_shape_alone(g, cl, cost, s, batches[0]);
    BOOST_TEST((best.plan.tp == alone.tp && best.plan.pp == alone.pp && best.plan.dp == alone.dp &&
                best.plan.micro_batch == alone.micro_batch));
    states += best.state_bytes;
    in_flight = std::max(in_flight, best.activation_bytes);
  }
  BOOST_TEST(states + in_flight > cl.device.memory_bytes);
  const BaselineResult ideal = sequential_ideal_baseline(g, cl, cost, batches);
  const BaselineResult seq = sequential_baseline(g, cl, cost, batches);
  BOOST_TEST(ideal.name == "sequential-ideal");
  BOOST_TEST(seq.name == "sequential");
  BOOST_TEST(seq.iteration_s > ideal.iteration_s);
  BOOST_TEST_MESSAGE("sequential: " << seq.config);
  const std::string vision = seq.config.substr(0, seq.config.find(';'));
  BOOST_TEST(vision.find("vision tp=") == 0u, vision);
  BOOST_TEST(vision.find(" forward_twice") != std::string::npos, vision);
}

// Where nothing waits for a consumer's backward and the states fit
// together, the two sequential baselines agree: llava15_7b (a frozen ViT; the
// projector holds its small activations) and tiny_kd (a frozen teacher).
BOOST_AUTO_TEST_CASE(sequential_is_the_ideal_where_everything_fits) {
  for (const char* model : {"models/llava15_7b.sect", "models/tiny_kd.sect"}) {
    const Modelled m(model, "configs/h100x64.toml");
    BOOST_TEST_CONTEXT(model) {
      BOOST_TEST(sequential_baseline(m.g, m.cl, m.cost, m.batches).iteration_s ==
                     sequential_ideal_baseline(m.g, m.cl, m.cost, m.batches).iteration_s,
                 boost::test_tools::tolerance(1e-12));
    }
  }
}

// internvl_20b with every shape pinned (the shapes the baseline chooses on
// 64 H100): its time is each section's step on its shape plus one more
// forward pass of the ViT (forward_twice), its micro-batches balanced over
// dp plus the pipeline's fill; the projector holds its activations at no
// extra time. With a device too small for the sections' states together
// (though each fits alone) it is an error that names the baseline.
BOOST_AUTO_TEST_CASE(forward_twice_costs_one_more_forward) {
  const Modelled m("models/internvl_20b.sect", "configs/h100x64.toml", [](Program& program) {
    auto pin = [&](const char* name, int64_t tp, int64_t pp, int64_t dp, int64_t mb) {
      for (Section& s : program.sections)
        if (s.name == name) s.parallel = {tp, pp, dp}, s.micro_batch = mb, s.recompute_auto = false;
    };
    pin("vision", 2, 2, 16, 1);
    pin("projector", 1, 1, 64, 2);
    pin("llm", 4, 1, 16, 1);
  });
  const auto& g = m.g; const auto& cost = m.cost; const auto& batches = m.batches;
  Cluster cl = m.cl;
  const BaselineResult seq = sequential_baseline(g, cl, cost, batches);
  BOOST_TEST_MESSAGE("sequential: " << seq.config);
  BOOST_TEST(seq.config.find("vision tp=2 pp=2 dp=16 micro_batch=1") == 0u);
  BOOST_TEST(seq.config.find("forward_twice") < seq.config.find("; projector"));
  BOOST_TEST(seq.config.find("projector tp=1 pp=1 dp=64 micro_batch=2") != std::string::npos);
  BOOST_TEST(seq.config.find("holds_activations") > seq.config.find("; projector"));
  double expected = 0;
  int64_t states = 0, llm_alone = 0;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    const ShapeOption x = shapes_alone(g, cl, cost, s, batches[0]).front();
    expected += section_step_s(g, cost, s, x.plan, batches[0]);
    states += x.state_bytes;
    if (g.nodes[size_t(s)].name == "llm") llm_alone = x.state_bytes + x.activation_bytes;
    if (g.nodes[size_t(s)].name != "vision") continue;
    double work = 0, largest = 0;
    for (const auto& mb : loader_order_micro_batches(g, s, batches[0], x.plan.micro_batch)) {
      work += cost.forward_s(s, mb, x.plan);
      largest = std::max(largest, cost.forward_s(s, mb, x.plan));
    }
    expected += std::max(work / double(x.plan.dp), largest) + double(x.plan.pp - 1) * largest;
  }
  BOOST_TEST(seq.iteration_s == expected, boost::test_tools::tolerance(1e-12));
  // Each section fits alone; the LLM's phase does not fit beside the others' states.
  cl.device.memory_bytes = std::max(llm_alone, states - 1);
  const RooflineCost small(g, cl);
  BOOST_CHECK_EXCEPTION(sequential_baseline(g, cl, small, batches), PlanError, [](const PlanError& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).find("sequential baseline: the sections' shapes do not fit one h100") == 0;
  });
}

// MIMO colocated: the modules take turns on the same devices and each one's
// parameter state stays there all step, so their configurations are chosen
// together (shared_devices_fit.h). The rung's configuration keeps the sum
// of the chosen modules' states within the device: kd_70b_to_8b on one
// node of 8 H100 (its teacher's 140 GB of bf16 weights and the student's
// state share every device; tuned alone, the modules' configurations held
// 106.7 GB of state per device — this test on the code before 0586c57 —
// for a 149.9 s step; together 159.0 s). internvl_26b, the first case found
// (85.4 GB of state per device when tuned alone), no longer fits MIMO on 8
// H100 at all: its ViT's 25 heads split over no tp > 1.
BOOST_AUTO_TEST_CASE(mimo_colocated_modules_fit_the_device_together) {
  const Modelled m("models/kd_70b_to_8b.sect", "configs/h100x8.toml");
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost; const auto& batches = m.batches;
  const BaselineResult mimo = tuned_mimo(g, cl, cost, batches);
  BOOST_TEST_MESSAGE("mimo: " << mimo.config);
  BOOST_REQUIRE(mimo.config.rfind("colocated: ", 0) == 0);
  const std::regex shape(R"(tp=(\d+) pp=(\d+) dp=(\d+) micro_batch=(\d+) first_stage_layers=(\d+) (padding|packing)( distributed_optimizer)?)");
  double states = 0;
  for (int s = 0; s < int(g.nodes.size()); ++s) {
    const std::string name = g.nodes[size_t(s)].name + "[8 dev] ";
    const size_t at = mimo.config.find(name);
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, name + " missing");
    std::smatch x;
    const std::string rest = mimo.config.substr(at + name.size());
    BOOST_REQUIRE(std::regex_search(rest, x, shape));
    FaithfulMegatronConfig c;
    c.tp = std::stoll(x[1]), c.pp = std::stoll(x[2]), c.dp = std::stoll(x[3]), c.micro_batch = std::stoll(x[4]);
    c.first_stage_layers = std::stoll(x[5]), c.packing = x[6] == "packing", c.distributed_optimizer = x[7].matched;
    const SectionPlan plan{0, 8, c.tp, 1, c.dp, c.micro_batch, c.distributed_optimizer};
    double most = 0;  // the module's fullest stage
    for (int64_t j = 0; j < c.pp; ++j)
      most = std::max(most, megatron_stage_share(g, {s}, s, j, c) * double(cost.weights_bytes_per_device(s, plan)));
    states += most;
  }
  BOOST_TEST(states <= double(cl.device.memory_bytes), states / 1e9 << " GB of state per device");
}

// Every search keeps to a tp the model splits over (splits_over_tp): the
// engine runs no other, nor does Megatron-LM. omni_whisper_7b on 1,024 H100
// with every degree left to the planner: Qwen2-7B (28 heads, 4 kv heads)
// splits over tp ≤ 4 and Whisper's encoder (20 heads) over tp ≤ 4, where
// the planner's LLM and every MIMO module took tp 8 before, and the faithful
// Megatron ran everything at tp 8.
BOOST_AUTO_TEST_CASE(every_search_keeps_to_a_tp_the_model_splits_over) {
  const Modelled m("models/omni_whisper_7b.sect", "configs/h100x1024.toml", [](Program& p) {
    for (Section& s : p.sections) s.parallel.tp.reset(), s.parallel.pp.reset(), s.parallel.dp.reset();
  });
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost; const auto& batches = m.batches;
  BOOST_REQUIRE(!splits_over_tp(g.section(g.find("llm")).model, 8));
  BOOST_REQUIRE(!splits_over_tp(g.section(g.find("audio")).model, 8));
  const Plan plan = plan_program(g, cl, cost, batches[0]);
  for (int s = 0; s < int(g.nodes.size()); ++s)
    BOOST_TEST(splits_over_tp(g.section(s).model, plan.sections[size_t(s)].tp), g.nodes[size_t(s)].name);
  // "name[N dev] tp=T" per MIMO module, "tp=T" for Megatron's one layout.
  const std::regex module(R"((\w+)\[\d+ dev\] tp=(\d+))");
  const BaselineResult mimo = tuned_mimo(g, cl, cost, batches);
  int modules = 0;
  for (std::sregex_iterator it(mimo.config.begin(), mimo.config.end(), module), end; it != end; ++it, ++modules)
    BOOST_TEST(splits_over_tp(g.section(g.find((*it)[1])).model, std::stoll((*it)[2])), mimo.config);
  BOOST_TEST(modules == int(g.nodes.size()), mimo.config);
  for (const BaselineResult& r : {tuned_faithful_megatron(g, cl, cost, batches), tuned_megatron(g, cl, cost, batches)}) {
    std::smatch x;
    BOOST_REQUIRE(std::regex_search(r.config, x, std::regex(R"(tp=(\d+))")));
    for (int s = 0; s < int(g.nodes.size()); ++s)
      BOOST_TEST(splits_over_tp(g.section(s).model, std::stoll(x[1])), r.name << ": " << r.config);
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
