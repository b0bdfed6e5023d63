// The planner (explicit values kept, autos resolved within the device and
// memory budgets, clear errors when nothing fits) and the baselines (a
// single text-only section: wavefront and megatron take the same time).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "data/sampler.h"
#include "dsl/frontend.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"
#include "modelled.h"
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


double simulated(const SectionGraph& g, const Plan& plan, const CostModel& cost, const Batch& batch) {
  return simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost).iteration_s;
}

// The best simulated step over the free degrees of a single-section program,
// exhaustively: tp, pp ∈ {1,2,4,8} (tp within a node, pp ≤ layers),
// micro_batch ∈ {1,…,32} (≤ samples), dp ∈ every power of two below
// devices / (tp·pp) and that quotient itself; explicit values kept; the
// planner's memory rule (parameter state + pp micro-batches of the largest
// samples fit the device). Returns the time and the configuration.
std::pair<double, std::string> grid_search(const Program& program, const SectionGraph& g, const Cluster& cl,
                                           const CostModel& cost, const Batch& batch) {
  const Section& sec = program.sections[0];
  const int64_t layers = std::get<TransformerSpec>(sec.model.spec).layers;
  std::vector<const Sample*> by_size;
  for (const Sample& x : batch.samples) by_size.push_back(&x);
  std::sort(by_size.begin(), by_size.end(), [](const Sample* a, const Sample* b) { return a->text_tokens > b->text_tokens; });
  double best = std::numeric_limits<double>::infinity();
  std::string where;
  for (int64_t tp : {1, 2, 4, 8})
    for (int64_t pp : {1, 2, 4, 8})
      for (int64_t mb : {1, 2, 4, 8, 16, 32}) {
        if (sec.parallel.tp ? tp != *sec.parallel.tp : tp > cl.devices_per_node) continue;
        if (sec.parallel.pp ? pp != *sec.parallel.pp : pp > layers) continue;
        if (sec.micro_batch ? mb != *sec.micro_batch : mb > int64_t(batch.samples.size())) continue;
        if (tp * pp > cl.devices) continue;
        std::vector<int64_t> dps;
        if (sec.parallel.dp) dps = {*sec.parallel.dp};
        else
          for (int64_t d = 1; d <= cl.devices / (tp * pp); d = d * 2 > cl.devices / (tp * pp) && d != cl.devices / (tp * pp) ? cl.devices / (tp * pp) : d * 2)
            dps.push_back(d);
        for (int64_t dp : dps) {
          if (tp * pp * dp > cl.devices) continue;
          Plan plan;
          plan.cluster_devices = cl.devices;
          plan.sections = {{0, tp * pp * dp, tp, pp, dp, mb}};
          plan.in_flight_cap = pp;
          const std::vector<const Sample*> largest(by_size.begin(), by_size.begin() + std::min<size_t>(size_t(mb), by_size.size()));
          if (cost.weights_bytes_per_device(0, plan.sections[0]) + pp * cost.activation_bytes(0, largest, plan.sections[0]) >
              cl.device.memory_bytes)
            continue;
          if (const double t = simulated(g, plan, cost, batch); t < best)
            best = t, where = fmt::format("tp{} pp{} dp{} mb{}", tp, pp, dp, mb);
        }
      }
  return {best, where};
}

// Checks the planner against grid_search on one program and cluster.
void check_against_grid(const std::string& text, const std::string& cluster_toml) {
  const Program program = parse(text);
  const SectionGraph g = build_graph(program);
  const std::string path = (std::filesystem::temp_directory_path() / "maestro_planner_grid.toml").string();
  std::ofstream(path) << cluster_toml;
  const Cluster cl = make_cluster(load_runtime_config(path));
  std::filesystem::remove(path);
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
  const auto [grid, where] = grid_search(program, g, cl, cost, batch);
  Plan plan;
  try {
    plan = plan_program(g, cl, cost, batch);
  } catch (const PlanError& e) {
    // Nothing fits: the grid must find nothing either.
    BOOST_TEST(grid == std::numeric_limits<double>::infinity(), e.what() << "; grid found " << where);
    return;
  }
  const SectionPlan& p = plan.sections[0];
  const double planned = simulated(g, plan, cost, batch);
  BOOST_TEST_CONTEXT(text << cluster_toml << "planned tp" << p.tp << " pp" << p.pp << " dp" << p.dp << " mb"
                          << p.micro_batch << ": " << planned << " s; grid " << where << ": " << grid << " s") {
    BOOST_TEST(planned <= grid * 1.03);
  }
  BOOST_TEST_MESSAGE("planned " << planned << " s, grid " << grid << " s (" << where << ")");
}

// Steps 0-3 of the program's run: the batches maestro-run plans on
// (step 0, then PlannerOptions::later_batches).
std::vector<Batch> sampled_steps(const Modelled& m) {
  const Sampler sampler(m.program.data, m.program.train.global_batch);
  std::vector<Batch> batches;
  for (int64_t k = 0; k < 4; ++k) batches.push_back(sampler.batch(k));
  return batches;
}

// The plan maestro-run makes: searched on batches[0], the rest its later
// batches (PlannerOptions::later_batches).
Plan planned_over(const Modelled& m, const std::vector<Batch>& batches) {
  PlannerOptions options;
  options.later_batches.assign(batches.begin() + 1, batches.end());
  return plan_program(m.g, m.cl, m.cost, batches[0], options);
}

// A plan's simulated step on batch b, and its mean over `batches`
// (infinity where a device's memory is exceeded on any of them).
double step_s(const Modelled& m, const Plan& p, const Batch& b) {
  return simulate(m.g, p, wavefront_schedule(m.g, p, m.cost, b), m.cost).iteration_s;
}
double mean_s(const Modelled& m, const Plan& p, const std::vector<Batch>& batches) {
  double sum = 0;
  for (const Batch& b : batches) {
    const SimResult r = simulate(m.g, p, wavefront_schedule(m.g, p, m.cost, b), m.cost);
    if (*std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end()) > m.cl.device.memory_bytes)
      return std::numeric_limits<double>::infinity();
    sum += r.iteration_s;
  }
  return sum / double(batches.size());
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
        worst = std::max(worst, in_flight_activation_bytes(cost, int(s), mb, p, in_flight_micro_batches(p.pp)));
      BOOST_TEST(cost.weights_bytes_per_device(int(s), p) + worst <= cl.device.memory_bytes);
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
  const MegatronConfig same{p.tp, p.pp, p.dp, p.micro_batch, p.shard_optimizer};
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

// Issue 17: never worse than a grid search. The known case: Llama-2-7B with
// tp = 4 pinned, 64 sequences of 4,096 tokens on 64 H100 (the planner used
// to pick pp 1, dp 16 where pp 8, dp 2 is faster).
BOOST_AUTO_TEST_CASE(single_section_within_3_percent_of_grid_search_llama7b_tp4) {
  check_against_grid(text_only(kLlama7b, "tp = 4;", 64),
                     "[cluster]\ndevice = \"h100\"\ndevices = 64\nnodes = 8\ndevices_per_node = 8\n"
                     "intra_node_gbps = 900\ninter_node_gbps = 50\n");
}

// The property: random transformer sizes, random pinned/auto degrees and
// micro-batch, random global batches and sequence lengths, random clusters.
BOOST_AUTO_TEST_CASE(single_section_within_3_percent_of_grid_search_random) {
  std::mt19937_64 rng(17);
  auto pick = [&](std::vector<int64_t> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  for (int k = 0; k < 100; ++k) {
    const int64_t hidden = pick({1024, 2048, 4096}), layers = pick({8, 16, 32});
    const std::string model = fmt::format("transformer(layers: {}, hidden: {}, heads: {}, ffn: {}, vocab: 32000)",
                                          layers, hidden, hidden / 128, hidden * 8 / 3);
    std::string parallel;
    if (pick({0, 1, 2}) == 0) parallel += fmt::format("tp = {}; ", pick({1, 2, 4}));
    if (pick({0, 1, 2}) == 0) parallel += fmt::format("pp = {}; ", pick({1, 2, 4}));
    if (pick({0, 1, 2, 3}) == 0) parallel += fmt::format("dp = {}; ", pick({1, 2}));
    const int64_t devices = pick({8, 16, 32, 64});
    const std::string tokens = fmt::format("lognormal(median: {}, sigma: 0.6, max: 4096)", pick({256, 1024, 2048}));
    std::string text = text_only(model, parallel, pick({16, 64, 128, 256}), tokens);
    if (pick({0, 1, 2}) == 0) text.replace(text.find("  loss"), 0, fmt::format("  micro_batch = {};\n", pick({1, 2, 4})));
    check_against_grid(text, fmt::format("[cluster]\ndevice = \"{}\"\ndevices = {}\nnodes = {}\ndevices_per_node = 8\n"
                                         "intra_node_gbps = 900\ninter_node_gbps = 50\n",
                                         pick({0, 1}) ? "h100" : "a100", devices, devices / 8));
  }
}

// `recompute = auto`: a Llama-7B pinned to tp 1, pp 1 on 8 H100 with 8,192-token
// samples holds 35 GB of activations next to 52 GB of ZeRO-1 state — it fits
// only recomputing, half of its layers (19 GB) being enough, which the planner
// then chooses; with 16,384 tokens only all of them (6 GB) fit; pinned off,
// nothing fits. With 512-token samples everything fits and recomputation
// (4/3 of the compute) is not chosen. Megatron's evaluation honours its
// recompute switch the same way (its tuning searches it: same freedom).
BOOST_AUTO_TEST_CASE(recompute_auto_is_chosen_where_memory_needs_it) {
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x8.toml"));
  const std::string model = "transformer(layers: 32, hidden: 4096, heads: 32, ffn: 11008, vocab: 32000, max_seq: 16384)";
  auto program = [&](const std::string& tokens, const std::string& value) {
    std::string text = text_only(model, "tp = 1; pp = 1; dp = auto;", 16, tokens);
    return parse(text.replace(text.find("  loss"), 0, "  recompute = " + value + ";\n"));
  };
  auto chosen = [&](const Program& p) {
    const SectionGraph g = build_graph(p);
    const RooflineCost cost(g, cl);
    const Batch batch = Sampler(p.data, p.train.global_batch).batch(0);
    const Plan plan = plan_program(g, cl, cost, batch);
    const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost);
    for (int64_t bytes : r.peak_memory_bytes) BOOST_TEST(bytes <= cl.device.memory_bytes);
    return plan.sections[0].recompute_level;
  };
  BOOST_TEST(chosen(program("8192", "auto")) == 1);    // half of the layers suffice
  BOOST_TEST(chosen(program("16384", "auto")) == 2);   // twice the tokens: all of them
  BOOST_TEST(chosen(program("512", "auto")) == 0);
  const std::string e = plan_error(program("8192", "false"), cl);
  BOOST_TEST(e.find("exceeds h100's 80 GB") != std::string::npos, e);
  const Program p = program("8192", "auto");
  const SectionGraph g = build_graph(p);
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(p.data, p.train.global_batch).batch(0);
  std::string plain_problem, recompute_problem;
  FaithfulMegatronConfig c{1, 1, 8, 1, 32, false, true, 0};
  faithful_megatron_iteration_s(g, cl, cost, c, batch, &plain_problem);
  c.recompute_level = 2;
  const double t = faithful_megatron_iteration_s(g, cl, cost, c, batch, &recompute_problem);
  BOOST_TEST(plain_problem.find("exceeds h100's 80 GB") != std::string::npos, plain_problem);
  BOOST_TEST(recompute_problem.empty(), recompute_problem);
  BOOST_TEST(t > 0);
}

// PlannerOptions::disjoint_placement: a frozen 70B teacher (tp 8) and a
// 7B student (tp 2, one replica: no ZeRO-1) do not fit one H100 together, side by side they do: the
// planner places them on disjoint devices; with the lever off it cannot.
BOOST_AUTO_TEST_CASE(disjoint_placement_when_sharing_does_not_fit) {
  const Program program = parse(
      "section teacher {\n  model = transformer(layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, "
      "vocab: 32000)"
      ";\n  mode = frozen;\n  consumes = [text];\n  parallel { tp = 8; pp = 1; }\n}\n"
      "section student {\n  model = " + std::string(kLlama7b) +
      ";\n  consumes = [text];\n  parallel { tp = 2; pp = 1; dp = 1; }\n  loss = cross_entropy + 1.0 * kl(temperature: 1.0);\n}\n"
      "flow teacher -> student : logits;\n"
      "data {\n  source = synthetic(seed: 1);\n  mix { text = 1.0; }\n  text_tokens = 1024;\n}\n"
      "train {\n  global_batch = 64;\n  steps = 1;\n  optimizer = adamw(lr: 1e-4);\n  precision = bf16;\n}\n");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(program.data, 64).batch(0);
  const Plan plan = plan_program(g, cl, cost, batch);
  const SectionPlan &teacher = plan.sections[0], &student = plan.sections[1];
  BOOST_TEST((teacher.first_device + teacher.devices <= student.first_device ||
              student.first_device + student.devices <= teacher.first_device));
  const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, batch), cost);
  for (int64_t bytes : r.peak_memory_bytes) BOOST_TEST(bytes <= cl.device.memory_bytes);
  PlannerOptions shared_only;
  shared_only.disjoint_placement = false;
  const Plan forced = plan_program(g, cl, cost, batch, shared_only);
  BOOST_TEST(forced.sections[0].first_device == 0);
  BOOST_TEST(forced.sections[1].first_device == 0);
}

// PlannerOptions::disjoint_placement: the disjoint plan is one of the
// finalists ranked by their mean over the sampled steps, so it is chosen
// where it loses on step 0 but wins over the steps. tiny_mllm with steps
// 1-3 as later batches, as maestro-run plans it, as written on 8 H100 and
// with every degree auto on 64 H100: its LLM then runs on devices of its
// own (docs/planner.md, "Separate devices").
BOOST_AUTO_TEST_CASE(the_disjoint_plan_is_a_finalist_over_the_sampled_steps) {
  auto every_degree_auto = [](Program& p) {
    for (Section& sec : p.sections) sec.parallel = ParallelSpec{std::nullopt, std::nullopt, std::nullopt};
  };
  for (const auto& [cluster, edit] : std::vector<std::pair<std::string, std::function<void(Program&)>>>{
           {"configs/h100x8.toml", {}}, {"configs/h100x64.toml", every_degree_auto}}) {
    const Modelled m("models/tiny_mllm.sect", cluster, edit);
    const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost;
    const std::vector<Batch> batches = sampled_steps(m);
    PlannerOptions on;
    on.later_batches.assign(batches.begin() + 1, batches.end());
    PlannerOptions off = on;
    off.disjoint_placement = false;
    const Plan plan = plan_program(g, cl, cost, batches[0], on), shared = plan_program(g, cl, cost, batches[0], off);
    BOOST_TEST_MESSAGE("tiny_mllm on " << cluster << ": mean of 4 steps " << mean_s(m, plan, batches)
                                       << " s, step 0 " << step_s(m, plan, batches[0]) << " s; shared only "
                                       << mean_s(m, shared, batches) << " s, step 0 " << step_s(m, shared, batches[0])
                                       << " s");
    BOOST_TEST(mean_s(m, plan, batches) < mean_s(m, shared, batches) * 0.95, cluster);
    const int llm = g.find("llm");
    BOOST_REQUIRE(llm >= 0);
    int64_t others_end = 0;
    for (size_t s = 0; s < plan.sections.size(); ++s)
      if (int(s) != llm) others_end = std::max(others_end, plan.sections[s].first_device + plan.sections[s].devices);
    BOOST_TEST(plan.sections[size_t(llm)].first_device >= others_end, cluster);
  }
}

// ScheduleLevers::consumer_groups is flipped on the chosen plan and kept
// where the mean over the sampled steps is lower: the plan returned is never
// slower over them than the same plan with the lever flipped, and on
// tiny_mllm as written on 64 H100 (the ViT at dp 1, micro-batch 8, feeding
// projectors at micro-batch 2) the lever is on.
BOOST_AUTO_TEST_CASE(consumer_groups_kept_where_faster_over_the_sampled_steps) {
  const Modelled m("models/tiny_mllm.sect", "configs/h100x64.toml");
  const std::vector<Batch> batches = sampled_steps(m);
  const Plan plan = planned_over(m, batches);
  Plan flipped = plan;
  flipped.levers.consumer_groups = !plan.levers.consumer_groups;
  BOOST_TEST_MESSAGE("tiny_mllm on 64 H100: consumer_groups " << plan.levers.consumer_groups << ", mean of 4 steps "
                                                              << mean_s(m, plan, batches) << " s, flipped "
                                                              << mean_s(m, flipped, batches) << " s");
  BOOST_TEST(plan.levers.consumer_groups);
  BOOST_TEST(mean_s(m, plan, batches) < mean_s(m, flipped, batches));
}

// Each section's micro-batch that the program leaves auto is tried again on
// the chosen plan at the planner's other choices and kept where the mean
// over the sampled steps is lower (the search ranks on step 0 alone). On
// tiny_mllm on 8 H100 no single such change that fits memory makes the
// returned plan's mean lower; before the pass one did (the vision projector's
// micro-batch: 0.8866 → 0.8604 ms over the four steps).
BOOST_AUTO_TEST_CASE(micro_batches_tried_again_over_the_sampled_steps) {
  const Modelled m("models/tiny_mllm.sect", "configs/h100x8.toml");
  const std::vector<Batch> batches = sampled_steps(m);
  const Plan plan = planned_over(m, batches);
  const double planned = mean_s(m, plan, batches);
  int tried = 0;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    if (m.program.sections[s].micro_batch) continue;
    for (int64_t mb : kMicroBatchChoices) {
      Plan other = plan;
      other.sections[s].micro_batch = mb;
      BOOST_TEST(mean_s(m, other, batches) >= planned * (1 - 1e-9),
                 m.program.sections[s].name << " at micro-batch " << mb);
      ++tried;
    }
  }
  BOOST_TEST(tried > 0);
  BOOST_TEST_MESSAGE("tiny_mllm on 8 H100: mean of 4 steps " << planned << " s");
}

// PlannerOptions::raise_in_flight_cap: omni_7b's LLM (pp 2) gets more than
// pp micro-batches in flight where memory allows; off, the cap is the pp.
BOOST_AUTO_TEST_CASE(in_flight_cap_raised_within_memory) {
  const Program program = load("models/omni_7b.sect");
  const SectionGraph g = build_graph(program);
  const Cluster cl = make_cluster(load_runtime_config("configs/h100x64.toml"));
  const RooflineCost cost(g, cl);
  const Batch batch = Sampler(program.data, program.train.global_batch).batch(0);
  const Plan raised = plan_program(g, cl, cost, batch);
  PlannerOptions off;
  off.raise_in_flight_cap = false;
  const Plan plain = plan_program(g, cl, cost, batch, off);
  int64_t max_pp = 1;
  for (const SectionPlan& p : plain.sections) max_pp = std::max(max_pp, p.pp);
  BOOST_TEST(plain.in_flight_cap == max_pp);
  BOOST_TEST(raised.in_flight_cap > 2);
  const SimResult r = simulate(g, raised, wavefront_schedule(g, raised, cost, batch), cost);
  for (int64_t bytes : r.peak_memory_bytes) BOOST_TEST(bytes <= cl.device.memory_bytes);
}

// PlannerOptions::later_batches: the search's finalists are ranked by their
// mean over all the batches, not by step 0. omni_7b with every degree auto
// on 64 H200: the plan chosen on step 0 alone is 1.2 % faster there but 5 %
// slower over steps 0-3 (2.669 s against 2.535 s, docs/planner.md). With
// the best plan swept again (PlannerOptions::sweep_best_again) the step-0
// search itself finds a plan as good over the four steps, so both are
// planned with one sweep here: the mean ranking is what is tested.
BOOST_AUTO_TEST_CASE(the_plan_is_chosen_by_its_mean_over_the_sampled_steps) {
  const Modelled m("bench/plan_simulate/omni_7b_auto.sect", "configs/h200x64.toml");
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost;
  const std::vector<Batch> batches = sampled_steps(m);
  PlannerOptions options;
  options.sweep_best_again = false;
  const Plan by_step0 = plan_program(g, cl, cost, batches[0], options);
  options.later_batches.assign(batches.begin() + 1, batches.end());
  const Plan by_mean = plan_program(g, cl, cost, batches[0], options);
  auto step_s = [&](const Plan& plan, const Batch& b) {
    const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, b), cost);
    for (int64_t bytes : r.peak_memory_bytes) BOOST_TEST(bytes <= cl.device.memory_bytes);
    return r.iteration_s;
  };
  double mean = 0, mean0 = 0;
  for (const Batch& b : batches) mean += step_s(by_mean, b) / 4, mean0 += step_s(by_step0, b) / 4;
  BOOST_TEST_MESSAGE("mean of 4 steps: " << mean << " s, of the step-0 choice " << mean0 << " s");
  BOOST_TEST(step_s(by_step0, batches[0]) < step_s(by_mean, batches[0]));
  BOOST_TEST(mean < mean0 * 0.97);
}

// PlannerOptions::sweep_best_again: the best shared plan swept again until
// no section's shape changes. Each search only gains by it on the batch
// searched (the levers' comparison may still keep a plan within 0.1 % of
// the fastest, plan_on): here the same where nothing moves (llava15_7b on
// 8 H100) and faster where a section's shape tried before another moved
// wins after (kd_32b_to_1_5b on 8 H100, docs/planner.md).
BOOST_AUTO_TEST_CASE(sweeping_the_best_plan_again_is_never_slower) {
  for (const auto& [model, cluster, faster] :
       std::vector<std::tuple<std::string, std::string, bool>>{{"models/kd_32b_to_1_5b.sect", "configs/h100x8.toml", true},
                                                               {"models/llava15_7b.sect", "configs/h100x8.toml", false}}) {
    const Modelled m(model, cluster);
    const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost; const auto& batches = m.batches;
    PlannerOptions once;
    once.sweep_best_again = false;
    const Plan swept = plan_program(g, cl, cost, batches[0]), single = plan_program(g, cl, cost, batches[0], once);
    auto step_s = [&](const Plan& p) { return simulate(g, p, wavefront_schedule(g, p, cost, batches[0]), cost).iteration_s; };
    BOOST_TEST_MESSAGE(model << ": " << step_s(swept) << " s swept again, " << step_s(single) << " s once");
    BOOST_TEST(step_s(swept) <= step_s(single), model);
    if (faster) BOOST_TEST(step_s(swept) < step_s(single) * (1 - 1e-4), model);
  }
}

// PlannerOptions::on_simulation (maestro-run's status line): called after
// each new simulation with the running count, 1, 2, 3, …, remembered
// results not counted again; the plan is the same without it.
BOOST_AUTO_TEST_CASE(on_simulation_counts_each_new_simulation_and_changes_nothing) {
  const Modelled m("models/llava15_7b.sect", "configs/h100x8.toml");
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost;
  const Sampler sampler(m.program.data, m.program.train.global_batch);
  PlannerOptions options;
  options.later_batches = {sampler.batch(1)};
  const Plan plain = plan_program(g, cl, cost, m.batches[0], options);
  std::vector<int64_t> counts;
  options.on_simulation = [&](int64_t n) { counts.push_back(n); };
  const Plan watched = plan_program(g, cl, cost, m.batches[0], options);
  BOOST_TEST(bool(watched == plain));
  BOOST_TEST_MESSAGE(counts.size() << " simulations");
  BOOST_TEST(counts.size() > 10u);
  for (size_t i = 0; i < counts.size(); ++i) BOOST_TEST(counts[i] == int64_t(i + 1));
}

// The ideal sequential baseline: each section's best shape alone, summed
// (the one that can run is tested in baselines_test).
BOOST_AUTO_TEST_CASE(sequential_ideal_is_sum_of_sections_on_all_devices) {
  const Modelled m("models/llava15_7b.sect", "configs/h100x64.toml");
  const auto& g = m.g; const auto& cl = m.cl; const auto& cost = m.cost; const auto& batches = m.batches;
  const BaselineResult seq = sequential_ideal_baseline(g, cl, cost, batches);
  double sum = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const SectionPlan p = best_shape_alone(g, cl, cost, int(s), batches[0]);
    BOOST_TEST(p.devices <= cl.devices);
    sum += section_step_s(g, cost, int(s), p, batches[0]);
  }
  BOOST_TEST(seq.iteration_s == sum, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(seq.name == "sequential-ideal");
  // With the grad sync overlapped, each section pays only what its largest
  // micro-batch's backward does not hide: less, never more than the sync.
  const double overlapped = sequential_ideal_baseline(g, cl, cost, batches, true).iteration_s;
  double syncs = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    syncs += cost.grad_sync_s(int(s), best_shape_alone(g, cl, cost, int(s), batches[0]));
  BOOST_TEST(overlapped < seq.iteration_s);
  BOOST_TEST(overlapped >= seq.iteration_s - syncs - 1e-12);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
