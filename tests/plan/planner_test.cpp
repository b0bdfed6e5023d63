// The planner (explicit values kept, autos resolved within the device and
// memory budgets, clear errors when nothing fits) and the baselines (a
// single text-only section: wavefront and megatron take the same time).
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "data/sampler.h"
#include "dsl/frontend.h"
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

Program parse(const std::string& text) {
  Diagnostics diags;
  std::optional<Program> p = load_program_text(text, "planner_test.sect", diags);
  BOOST_REQUIRE_MESSAGE(p, "cannot parse the test program");
  return std::move(*p);
}

// One text-only section of a given model and parallel block.
std::string text_only(const std::string& model, const std::string& parallel, int64_t global_batch,
                      const std::string& tokens = "4096") {
  return "section llm {\n  model = " + model + ";\n  consumes = [text];\n  parallel { " + parallel +
         " }\n  loss = cross_entropy;\n}\n"
         "data {\n  source = synthetic(seed: 1);\n  mix { text = 1.0; }\n  text_tokens = " + tokens +
         ";\n}\ntrain {\n  global_batch = " + std::to_string(global_batch) +
         ";\n  steps = 1;\n  optimizer = adamw(lr: 1e-4);\n  precision = bf16;\n}\n";
}

const char* kLlama70b = "transformer(layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, vocab: 128256)";
const char* kLlama7b = "transformer(layers: 32, hidden: 4096, heads: 32, ffn: 11008, vocab: 32000)";

std::string plan_error(const Program& program, const Cluster& cl) {
  const SectionGraph g = build_graph(program);
  const RooflineCost cost(g, cl);
  const Sampler sampler(program.data, program.train.global_batch);
  try {
    plan_program(g, cl, cost, sampler.batch(0));
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(planner)

BOOST_AUTO_TEST_CASE(keeps_explicit_values_and_resolves_autos_within_budget) {
  for (const char* model : {"models/llava15_7b.sect", "models/omni_7b.sect"}) {
    const Program program = load(model);
    const SectionGraph g = build_graph(program);
    const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
    const RooflineCost cost(g, cl);
    const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
    const Plan plan = plan_program(g, cl, cost, batch);
    BOOST_REQUIRE(plan.sections.size() == program.sections.size());
    // Either every section shares the whole cluster, or each has its own
    // devices, in declaration order.
    const bool shared = std::all_of(plan.sections.begin(), plan.sections.end(),
                                    [](const SectionPlan& p) { return p.first_device == 0; });
    int64_t used = 0;
    for (size_t s = 0; s < plan.sections.size(); ++s) {
      const Section& sec = program.sections[s];
      const SectionPlan& p = plan.sections[s];
      if (sec.parallel.tp) BOOST_TEST(p.tp == *sec.parallel.tp);
      if (sec.parallel.pp) BOOST_TEST(p.pp == *sec.parallel.pp);
      if (sec.parallel.dp) BOOST_TEST(p.dp == *sec.parallel.dp);
      if (sec.micro_batch) BOOST_TEST(p.micro_batch == *sec.micro_batch);
      BOOST_TEST(p.tp >= 1);
      BOOST_TEST(p.pp >= 1);
      BOOST_TEST(p.dp >= 1);
      BOOST_TEST(p.micro_batch >= 1);
      BOOST_TEST(p.devices == p.tp * p.pp * p.dp);
      if (shared) {
        BOOST_TEST(p.devices <= cl.devices);
        used = std::max(used, p.devices);
      } else {
        BOOST_TEST(p.first_device == used);
        used += p.devices;
      }
      int64_t worst = 0;
      for (const auto& mb : loader_order_micro_batches(g, int(s), batch, p.micro_batch))
        worst = std::max(worst, cost.activation_bytes(int(s), mb, p));
      BOOST_TEST(cost.weights_bytes_per_device(int(s), p) + in_flight_micro_batches(p.pp) * worst <=
                 cl.device.memory_bytes);
    }
    BOOST_TEST(used <= cl.devices);
    BOOST_TEST(used >= cl.devices - 8);  // the budget is spent, up to one replica's worth
    const auto bad = validate(g, plan, wavefront_schedule(g, plan, cost, batch));
    BOOST_TEST(bad.empty());
  }
}

BOOST_AUTO_TEST_CASE(weights_that_do_not_fit_name_section_and_device) {
  const Program program = parse(text_only(kLlama70b, "tp = 1; pp = 1; dp = auto;", 8));
  RuntimeConfig config;
  config.cluster.device = "h100";
  config.cluster.devices = 8;
  const std::string e = plan_error(program, make_cluster(config));
  BOOST_TEST_MESSAGE(e);
  BOOST_TEST(e.find("section 'llm': ") == 0u);
  BOOST_TEST(e.find("GB of weights per device with tp=1, pp=1 exceeds h100's 80 GB") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(auto_degrees_find_a_fit_or_say_what_ran_out) {
  // Auto tp/pp: 70B trained fits across 64 H100s (18 B/param / (tp·pp) ≤ 80 GB needs tp·pp ≥ 16).
  const Program program = parse(text_only(kLlama70b, "tp = auto; pp = auto; dp = auto;", 64));
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
  const RooflineCost cost(g, cl);
  const Plan plan = plan_program(g, cl, cost, Sampler(program.data, 64).batch(0));
  BOOST_TEST(plan.sections[0].tp * plan.sections[0].pp >= 16);
  // On 8 devices no degree is enough.
  RuntimeConfig small;
  small.cluster.device = "h100";
  small.cluster.devices = 8;
  const std::string e = plan_error(program, make_cluster(small));
  BOOST_TEST(e.find("section 'llm'") == 0u);
  BOOST_TEST(e.find("exceeds h100's 80 GB") != std::string::npos);
  // An explicit dp larger than the cluster.
  const std::string d = plan_error(parse(text_only(kLlama7b, "tp = 8; pp = 1; dp = 2;", 8)), make_cluster(small));
  BOOST_TEST(d == "section 'llm': tp=8 × pp=1 × dp=2 needs 16 devices; the cluster has 8");
}

// Nothing to win with one text-only section of equal-length samples: the
// wavefront plan and megatron in the same configuration take the same time,
// and the tuned megatron is never slower than that configuration.
BOOST_AUTO_TEST_CASE(single_section_wavefront_equals_megatron) {
  const Program program = parse(text_only(kLlama7b, "tp = auto; pp = auto; dp = auto;", 64));
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const RooflineCost cost(g, cl);
  const std::vector<Batch> batches = {Sampler(program.data, 64).batch(0)};
  const Plan plan = plan_program(g, cl, cost, batches[0]);
  const SectionPlan& p = plan.sections[0];
  BOOST_REQUIRE(p.devices == cl.devices);
  const double wavefront = simulate(g, plan, wavefront_schedule(g, plan, cost, batches[0]), cost).iteration_s;
  const MegatronConfig same{p.tp, p.pp, p.dp, p.micro_batch};
  const double megatron = megatron_iteration_s(g, cl, cost, same, batches);
  BOOST_TEST_MESSAGE("wavefront " << wavefront << " s, megatron " << megatron << " s at " << same.str());
  BOOST_TEST(wavefront == megatron, boost::test_tools::tolerance(0.01));
  const BaselineResult tuned = tuned_megatron(g, cl, cost, batches);
  BOOST_TEST(tuned.iteration_s <= megatron * 1.0001);
}

// The megatron schedule keeps every data dependency of the monolithic one
// but lets a lane's pipeline overlap consecutive micro-batches (1F1B), so
// with pp > 1 it is faster than micro-batches run one at a time.
BOOST_AUTO_TEST_CASE(megatron_pipelines_its_micro_batches) {
  const Program program = load("models/llava15_7b.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
  const MegatronConfig c{4, 4, 4, 4};
  const Plan plan = megatron_plan(g, cl, c);
  const Schedule pipelined = megatron_schedule(g, plan, batch, c.micro_batch);
  BOOST_TEST(validate(g, plan, pipelined).empty());
  BOOST_TEST(pipelined.in_flight_cap == c.pp);
  const double one_at_a_time = simulate(g, plan, monolithic_schedule(g, plan, batch, c.micro_batch), cost).iteration_s;
  const double overlapped = simulate(g, plan, pipelined, cost).iteration_s;
  BOOST_TEST(overlapped < 0.8 * one_at_a_time);
  // Memory: one micro-batch config that does not fit says so.
  const std::string problem = megatron_memory_problem(g, cl, cost, {1, 1, 64, 16}, batch);
  BOOST_TEST(problem.find("exceeds h100's 80 GB") != std::string::npos, problem);
}

// Issue 10: the tuned Megatron searches the planner's micro-batch sizes,
// 32 included. Short samples on 8 × H100, 32 per replica: one micro-batch
// of 32 per replica makes the largest GEMMs, which the cost model rewards.
BOOST_AUTO_TEST_CASE(tuned_megatron_searches_the_planners_micro_batches) {
  const Program program = parse(text_only(kLlama7b, "tp = auto; pp = auto; dp = auto;", 256, "128"));
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const RooflineCost cost(g, cl);
  const std::vector<Batch> batches = {Sampler(program.data, 256).batch(0)};
  const BaselineResult tuned = tuned_megatron(g, cl, cost, batches);
  BOOST_REQUIRE(tuned.megatron.has_value());
  BOOST_TEST_MESSAGE("tuned megatron: " << tuned.config);
  BOOST_TEST(tuned.megatron->micro_batch == 32);
}

BOOST_AUTO_TEST_CASE(sequential_is_sum_of_sections_on_all_devices) {
  const Program program = load("models/llava15_7b.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
  const RooflineCost cost(g, cl);
  const std::vector<Batch> batches = {Sampler(program.data, program.train.global_batch).batch(0)};
  const Plan plan = plan_program(g, cl, cost, batches[0]);
  const BaselineResult seq = sequential_baseline(g, plan, cl, cost, batches);
  double sum = 0;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    SectionPlan p = plan.sections[s];
    p.first_device = 0;
    p.dp = cl.devices / (p.tp * p.pp);
    p.devices = p.dp * p.tp * p.pp;
    sum += section_step_s(g, cost, int(s), p, batches[0]);
  }
  BOOST_TEST(seq.iteration_s == sum, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(seq.name == "sequential");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
