// Wavefront and monolithic schedules: property tests over random section
// graphs, plans and batches (and the example models), checked by an
// execution of the schedule in random completion order that is written
// independently of the scheduler; plus the in-flight cap and the consumer
// ordering.
#define BOOST_TEST_MODULE plan
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "data/sampler.h"
#include "dsl/frontend.h"
#include "plan/frontier.h"
#include "plan/schedule.h"
#include "plan/simulator.h"
#include "token_cost.h"
#include "support/test_programs.h"

namespace maestro {
using namespace maestro::test;
namespace {

using Rng = std::mt19937_64;
int64_t pick(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

Section make_section(std::string name, ModelSpec model) {
  Section s;
  s.name = std::move(name);
  s.model = std::move(model);
  return s;
}

ModelSpec transformer(int64_t hidden) { return {"transformer", TransformerSpec{2, hidden, 2, 2, 2 * hidden, 64, 100000}}; }

// One text-only LLM section with a loss.
Program text_llm() {
  Program p;
  Section llm = make_section("llm", transformer(8));
  llm.consumes = {Modality::Text};
  llm.loss = {LossTerm{}};
  p.sections = {llm};
  return p;
}

// A random compound model: 0–2 encoders (image, audio), each maybe behind a
// projector, maybe frozen; an LLM with a loss; maybe a frozen teacher
// feeding it logits; random `when` on the LLM.
Program random_program(Rng& rng) {
  Program p;
  auto add_flow = [&p](const std::string& a, const std::string& b, FlowKind k) { p.flows.push_back({a, b, k, {}}); };
  std::vector<std::string> into_llm;
  const int encoders = int(pick(rng, 0, 2));
  for (int e = 0; e < encoders; ++e) {
    const bool image = e == 0 ? pick(rng, 0, 1) == 0 : p.sections[0].consumes[0] == Modality::Audio;
    Section enc = image ? make_section("vision", {"vit", VitSpec{1, 8, 2, 16, 4, 8}})
                        : make_section("audio", {"audio_encoder", AudioEncoderSpec{1, 8, 2, 16, 8, 2, 3000}});
    const Modality m = image ? Modality::Image : Modality::Audio;
    enc.consumes = {m};
    enc.when = Condition::has(m);
    if (pick(rng, 0, 3) == 0) enc.mode = Mode::Frozen;
    const std::string name = enc.name;
    p.sections.push_back(std::move(enc));
    if (pick(rng, 0, 1) == 0) {
      Section proj = make_section(name + "_proj", {"mlp", MlpSpec{8, 16, 16, 2}});
      p.sections.push_back(std::move(proj));
      add_flow(name, name + "_proj", FlowKind::Activations);
      into_llm.push_back(name + "_proj");
    } else {
      into_llm.push_back(name);
    }
  }
  const bool teacher = pick(rng, 0, 2) == 0;
  if (teacher) {
    Section t = make_section("teacher", transformer(16));
    t.consumes = {Modality::Text};
    t.mode = Mode::Frozen;
    p.sections.push_back(std::move(t));
  }
  // The LLM's hidden must match its producers' widths: projectors emit 16,
  // bare encoders 8; with a bare encoder the LLM takes hidden 8.
  bool bare = false;
  for (const std::string& n : into_llm) bare = bare || n.find("_proj") == std::string::npos;
  Section llm = make_section("llm", transformer(bare ? 8 : 16));
  llm.consumes = {Modality::Text};
  llm.loss = {LossTerm{}};
  if (pick(rng, 0, 3) == 0) {
    Condition no_audio;
    no_audio.kind = Condition::Kind::Not;
    no_audio.args = {Condition::has(Modality::Audio)};
    llm.when = no_audio;
  }
  p.sections.push_back(std::move(llm));
  for (const std::string& n : into_llm) add_flow(n, "llm", FlowKind::Activations);
  if (teacher) add_flow("teacher", "llm", FlowKind::Logits);
  std::shuffle(p.sections.begin(), p.sections.end(), rng);  // declaration order must not matter
  return p;
}

Batch random_batch(Rng& rng, int64_t n) {
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    Sample s;
    s.id = i;
    s.modalities.add(Modality::Text);
    if (pick(rng, 0, 2) == 0) s.modalities.add(Modality::Image);
    if (pick(rng, 0, 3) == 0) s.modalities.add(Modality::Audio);
    s.text_tokens = int32_t(pick(rng, 1, 300));
    s.images = s.modalities.has(Modality::Image) ? int32_t(pick(rng, 1, 3)) : 0;
    s.audio_frames = s.modalities.has(Modality::Audio) ? int32_t(pick(rng, 10, 200)) : 0;
    b.samples.push_back(s);
  }
  return b;
}

Plan random_plan(Rng& rng, const Program& p) {
  Plan plan;
  int64_t next = 0;
  for (size_t s = 0; s < p.sections.size(); ++s) {
    SectionPlan sp;
    sp.tp = pick(rng, 1, 2);
    sp.pp = pick(rng, 1, 2);
    sp.dp = pick(rng, 1, 3);
    sp.devices = sp.tp * sp.pp * sp.dp;
    sp.micro_batch = pick(rng, 1, 6);
    // Co-locate with the previous section sometimes; else the next devices.
    sp.first_device = s > 0 && pick(rng, 0, 2) == 0 ? plan.sections.back().first_device : next;
    next = std::max(next, sp.first_device + sp.devices);
    plan.sections.push_back(sp);
  }
  plan.in_flight_cap = pick(rng, 0, 3);
  return plan;
}

// Runs the schedule through a Frontier, completing running tasks in random
// order, and checks it against the rules restated from the samples up:
// producers before consumers per sample, backward after the consumers'
// backward per sample, stages in order, the in-flight cap, no stall.
struct Checker {
  const SectionGraph& g;
  const Plan& plan;
  const Schedule& sch;
  // task id of (section, kind, sample, stage), -1 when none.
  std::map<std::tuple<int, int, int32_t, int64_t>, int64_t> task_of;

  Checker(const SectionGraph& graph, const Plan& p, const Schedule& s) : g(graph), plan(p), sch(s) {
    for (const Task& t : sch.tasks)
      for (int32_t i : sch.micro_batch_of(t).samples) {
        auto key = std::make_tuple(t.section, int(t.kind), i, t.stage);
        BOOST_REQUIRE_MESSAGE(!task_of.count(key), "sample " << i << " twice in section " << t.section);
        task_of[key] = t.id;
      }
  }
  int64_t find(int s, Task::Kind k, int32_t i, int64_t stage) const {
    auto it = task_of.find({s, int(k), i, stage});
    return it == task_of.end() ? -1 : it->second;
  }

  // Every sample exactly once per active section, forward at every stage
  // and (train) backward; nothing on inactive sections.
  void coverage() const {
    for (size_t s = 0; s < g.nodes.size(); ++s)
      for (size_t i = 0; i < sch.batch.samples.size(); ++i)
        for (int64_t st = 0; st < plan.sections[s].pp; ++st) {
          const bool on = g.active(int(s), sch.batch.samples[i].modalities);
          const bool train = g.section(int(s)).mode == Mode::Train;
          BOOST_CHECK_EQUAL(find(int(s), Task::Kind::Forward, int32_t(i), st) >= 0, on);
          BOOST_CHECK_EQUAL(find(int(s), Task::Kind::Backward, int32_t(i), st) >= 0, on && train);
        }
  }

  // What must have completed before task t starts, from its samples.
  std::vector<int64_t> must_precede(const Task& t) const {
    std::vector<int64_t> out;
    const int64_t pp = plan.sections[size_t(t.section)].pp;
    for (int32_t i : sch.micro_batch_of(t).samples) {
      const ModalitySet m = sch.batch.samples[size_t(i)].modalities;
      if (t.kind == Task::Kind::Forward) {
        if (t.stage > 0) out.push_back(find(t.section, Task::Kind::Forward, i, t.stage - 1));
        else
          for (const GraphEdge& e : g.edges)
            if (e.to == t.section && g.active(e.from, m))
              out.push_back(find(e.from, Task::Kind::Forward, i, plan.sections[size_t(e.from)].pp - 1));
      } else {
        out.push_back(find(t.section, Task::Kind::Forward, i, t.stage));
        if (t.stage < pp - 1) out.push_back(find(t.section, Task::Kind::Backward, i, t.stage + 1));
        else
          for (const GraphEdge& e : g.edges)
            if (e.from == t.section && e.kind == FlowKind::Activations && g.active(e.to, m) &&
                g.section(e.to).mode == Mode::Train)
              out.push_back(find(e.to, Task::Kind::Backward, i, 0));
      }
    }
    return out;
  }

  // Window micro-batches: no consumer runs on any of their samples, so no
  // other section's forward waits on them.
  std::vector<std::vector<char>> window_mbs() const {
    std::vector<std::vector<char>> window(g.nodes.size());
    for (size_t s = 0; s < g.nodes.size(); ++s)
      for (const MicroBatch& mb : sch.sections[s].micro_batches) {
        bool fed_on = false;
        for (const GraphEdge& e : g.edges)
          for (int32_t i : mb.samples)
            fed_on = fed_on || (e.from == int(s) && g.carries(int(&e - g.edges.data()), sch.batch.samples[size_t(i)].modalities));
        window[s].push_back(!fed_on);
      }
    return window;
  }

  // Random completion order; checks every task's samples' rules at its
  // release and the cap on window micro-batches (started, not finished) per
  // section replica. Returns the largest such count seen.
  int64_t run(Rng& rng) const {
    Frontier f(sch);
    const auto window = window_mbs();
    std::vector<char> done(sch.tasks.size(), 0), started_mb;
    std::vector<int64_t> running, base{0}, last_task;
    for (const auto& s : sch.sections) base.push_back(base.back() + int64_t(s.micro_batches.size()));
    started_mb.assign(size_t(base.back()), 0);
    last_task.assign(size_t(base.back()), -1);
    for (const Task& t : sch.tasks) last_task[size_t(base[size_t(t.section)] + t.micro_batch)] = t.id;
    std::map<std::pair<int, int64_t>, int64_t> open;
    int64_t max_open = 0;
    while (!f.finished()) {
      const auto ready = f.take_ready();
      BOOST_REQUIRE_MESSAGE(!ready.empty() || !running.empty(), "the frontier stalled");
      for (int64_t id : ready) {
        const Task& t = sch.tasks[size_t(id)];
        for (int64_t d : must_precede(t)) BOOST_REQUIRE_MESSAGE(d >= 0 && done[size_t(d)], "task " << id << " before " << d);
        for (int64_t d : t.deps) BOOST_REQUIRE(done[size_t(d)]);
        const size_t m = size_t(base[size_t(t.section)] + t.micro_batch);
        if (window[size_t(t.section)][size_t(t.micro_batch)] && !started_mb[m]) {
          started_mb[m] = 1;
          const int64_t n = ++open[{t.section, t.replica}];
          max_open = std::max(max_open, n);
          if (sch.in_flight_cap > 0) BOOST_REQUIRE_LE(n, sch.in_flight_cap);
        }
        running.push_back(id);
      }
      const size_t k = size_t(pick(rng, 0, int64_t(running.size()) - 1));
      const int64_t id = running[k];
      running.erase(running.begin() + std::ptrdiff_t(k));
      const Task& t = sch.tasks[size_t(id)];
      if (window[size_t(t.section)][size_t(t.micro_batch)] && last_task[size_t(base[size_t(t.section)] + t.micro_batch)] == id)
        open[{t.section, t.replica}]--;
      done[size_t(id)] = 1;
      f.complete(id);
    }
    BOOST_CHECK_EQUAL(f.forced_admissions(), 0);
    BOOST_CHECK(running.empty());
    BOOST_CHECK(std::all_of(done.begin(), done.end(), [](char c) { return c != 0; }));
    return max_open;
  }
};

void check_schedule(const SectionGraph& g, const Plan& plan, const Schedule& sch, const CostModel& cost, Rng& rng) {
  const auto bad = validate(g, plan, sch);
  BOOST_REQUIRE_MESSAGE(bad.empty(), (bad.empty() ? std::string() : bad.front()));
  Checker c(g, plan, sch);
  c.coverage();
  c.run(rng);
  const SimResult r = simulate(g, plan, sch, cost);
  BOOST_CHECK_GE(r.iteration_s, r.lower_bound_s * (1 - 1e-12));
  // No section active on any sample (e.g. an image-only program on a
  // text-only batch): nothing to do, a bound of 0.
  bool any_work = false;
  for (const Sample& x : sch.batch.samples)
    for (int s = 0; s < int(g.nodes.size()); ++s) any_work = any_work || g.active(s, x.modalities);
  if (any_work) BOOST_CHECK_GT(r.lower_bound_s, 0.0);
  BOOST_CHECK_LE(r.utilization, 1.0 + 1e-12);
}

}  // namespace

BOOST_AUTO_TEST_CASE(random_graphs_plans_and_batches) {
  Rng rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const Program p = random_program(rng);
    const SectionGraph g = build_graph(p);
    const Plan plan = random_plan(rng, p);
    const Batch batch = random_batch(rng, pick(rng, 1, 40));
    test::TokenCost cost(g);
    BOOST_TEST_CONTEXT("trial " << trial) {
      check_schedule(g, plan, wavefront_schedule(g, plan, cost, batch), cost, rng);
      check_schedule(g, plan, monolithic_schedule(g, plan, batch, pick(rng, 1, 8)), cost, rng);
      Plan grouped = plan;
      grouped.levers.consumer_groups = true;
      check_schedule(g, grouped, wavefront_schedule(g, grouped, cost, batch), cost, rng);
    }
  }
}

BOOST_AUTO_TEST_CASE(example_models) {
  Rng rng(7);
  for (const char* file : {"models/tiny_mllm.sect", "models/tiny_kd.sect", "models/omni_7b.sect",
                           "models/llava15_7b.sect", "models/kd_70b_to_8b.sect"}) {
    BOOST_TEST_CONTEXT(file) {
      Diagnostics diags;
      const auto p = load_program(file, diags);
      BOOST_REQUIRE(p.has_value());
      const SectionGraph g = build_graph(*p);
      Plan plan;
      int64_t next = 0;
      for (const Section& s : p->sections) {
        SectionPlan sp;
        sp.tp = s.parallel.tp.value_or(1);
        sp.pp = s.parallel.pp.value_or(1);
        sp.dp = s.parallel.dp.value_or(2);
        sp.devices = sp.tp * sp.pp * sp.dp;
        sp.micro_batch = s.micro_batch.value_or(4);
        sp.first_device = next;
        next += sp.devices;
        plan.sections.push_back(sp);
      }
      plan.in_flight_cap = 4;
      const Batch batch = Sampler(p->data, std::min<int64_t>(p->train.global_batch, 96)).batch(3);
      test::TokenCost cost(g);
      check_schedule(g, plan, wavefront_schedule(g, plan, cost, batch), cost, rng);
      check_schedule(g, plan, monolithic_schedule(g, plan, batch, 4), cost, rng);
    }
  }
}

// The in-flight cap only gates release (Frontier): the tasks, their
// dependencies and the micro-batches are the same at every cap. The
// planner relies on it: a bound of a step from its tasks holds at every
// cap (SimOptions::give_up_at, docs/planner.md "Simulations cut short").
BOOST_AUTO_TEST_CASE(the_tasks_do_not_depend_on_the_in_flight_cap) {
  for (const char* file : {"models/tiny_mllm.sect", "models/omni_7b.sect", "models/kd_70b_to_8b.sect"}) {
    BOOST_TEST_CONTEXT(file) {
      const Program p = load(file);
      const SectionGraph g = build_graph(p);
      Plan plan;
      int64_t next = 0;
      for (const Section& s : p.sections) {
        SectionPlan sp{next, 2 * s.parallel.tp.value_or(1) * s.parallel.pp.value_or(1), s.parallel.tp.value_or(1),
                       s.parallel.pp.value_or(1), 2, 4};
        next += sp.devices;
        plan.sections.push_back(sp);
      }
      const Batch batch = Sampler(p.data, std::min<int64_t>(p.train.global_batch, 96)).batch(1);
      test::TokenCost cost(g);
      plan.in_flight_cap = 1;
      const Schedule one = wavefront_schedule(g, plan, cost, batch);
      for (int64_t cap : {0, 2, 7}) {
        plan.in_flight_cap = cap;
        const Schedule other = wavefront_schedule(g, plan, cost, batch);
        BOOST_REQUIRE_EQUAL(other.tasks.size(), one.tasks.size());
        for (size_t k = 0; k < one.tasks.size(); ++k) {
          const Task &a = one.tasks[k], &b = other.tasks[k];
          BOOST_CHECK(std::tie(a.id, a.section, a.replica, a.stage, a.kind, a.micro_batch, a.deps) ==
                      std::tie(b.id, b.section, b.replica, b.stage, b.kind, b.micro_batch, b.deps));
        }
        for (size_t s = 0; s < one.sections.size(); ++s) {
          BOOST_REQUIRE_EQUAL(other.sections[s].micro_batches.size(), one.sections[s].micro_batches.size());
          for (size_t m = 0; m < one.sections[s].micro_batches.size(); ++m)
            BOOST_CHECK(other.sections[s].micro_batches[m].samples == one.sections[s].micro_batches[m].samples);
        }
      }
    }
  }
}

// Issue 10: the monolithic baseline runs as many lanes as the largest dp,
// and every section spreads its chunks over all of its own replicas (with
// the smallest dp as lane count, tiny_mllm's LLM replica 1 sat idle behind
// the vision encoder's dp 1).
BOOST_AUTO_TEST_CASE(monolithic_uses_every_replica_of_every_section) {
  const Program p = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(p);
  Plan plan;
  for (const Section& s : p.sections) {
    const int64_t dp = s.name == "vision" ? 1 : (s.name == "llm" ? 2 : 3);
    plan.sections.push_back({0, dp, 1, 1, dp, 4});
  }
  const Batch batch = Sampler(p.data, 64).batch(0);
  const Schedule sch = monolithic_schedule(g, plan, batch, 4);
  BOOST_REQUIRE(validate(g, plan, sch).empty());
  for (size_t s = 0; s < p.sections.size(); ++s) {
    std::vector<int64_t> per_replica(size_t(plan.sections[s].dp), 0);
    for (const MicroBatch& mb : sch.sections[s].micro_batches) per_replica[size_t(mb.replica)]++;
    BOOST_TEST_CONTEXT(p.sections[s].name) {
      BOOST_REQUIRE(int64_t(sch.sections[s].micro_batches.size()) >= 2 * plan.sections[s].dp);
      for (int64_t n : per_replica) BOOST_TEST(n > 0);
      const auto [lo, hi] = std::minmax_element(per_replica.begin(), per_replica.end());
      BOOST_TEST(*hi - *lo <= int64_t(sch.sections[s].micro_batches.size()) / 2);
    }
  }
}

// A consumer whose micro-batch spans more producer micro-batches than the
// cap allows must still finish (the cap never stalls), and the cap holds
// otherwise.
BOOST_AUTO_TEST_CASE(in_flight_cap_bounds_and_never_stalls) {
  Program p;
  Section enc = make_section("vision", {"vit", VitSpec{1, 8, 2, 16, 4, 8}});
  enc.consumes = {Modality::Image};
  enc.when = Condition::has(Modality::Image);
  Section llm = make_section("llm", transformer(8));
  llm.consumes = {Modality::Text};
  llm.loss = {LossTerm{}};
  p.sections = {enc, llm};
  p.flows = {{"vision", "llm", FlowKind::Activations, {}}};
  const SectionGraph g = build_graph(p);
  Batch batch;
  for (int i = 0; i < 24; ++i) {
    Sample s;
    s.id = i;
    s.modalities.add(Modality::Text);
    s.modalities.add(Modality::Image);
    s.text_tokens = 10 + i;
    s.images = 1;
    batch.samples.push_back(s);
  }
  test::TokenCost cost(g);
  Rng rng(3);
  for (int64_t cap : {1, 2, 3}) {
    Plan plan;
    plan.sections = {{0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 8}};  // vision mb 1, llm mb 8
    plan.in_flight_cap = cap;
    const Schedule sch = wavefront_schedule(g, plan, cost, batch);
    BOOST_REQUIRE(validate(g, plan, sch).empty());
    Checker c(g, plan, sch);
    for (int run = 0; run < 20; ++run) BOOST_CHECK_LE(c.run(rng), cap);
    BOOST_CHECK_GE(simulate(g, plan, sch, cost).iteration_s, 0.0);
  }
}

// The wavefront sink puts the samples that need no producer work at both
// ends — half lead, half trail — and producers process samples in the
// order the sink needs them.
BOOST_AUTO_TEST_CASE(consumers_lead_producers_follow) {
  Diagnostics diags;
  const auto p = load_program("models/tiny_mllm.sect", diags);
  BOOST_REQUIRE(p.has_value());
  const SectionGraph g = build_graph(*p);
  Plan plan;
  for (size_t s = 0; s < p->sections.size(); ++s) plan.sections.push_back({int64_t(s), 1, 1, 1, 1, 4});
  const Batch batch = Sampler(p->data, 64).batch(0);
  test::TokenCost cost(g);
  const Schedule sch = wavefront_schedule(g, plan, cost, batch);
  BOOST_REQUIRE(validate(g, plan, sch).empty());
  const int llm = g.find("llm"), vision = g.find("vision");
  auto fed = [&](int32_t i) {
    for (int e : g.nodes[size_t(llm)].producers)
      if (g.carries(e, batch.samples[size_t(i)].modalities)) return true;
    return false;
  };
  // The LLM's order: unfed*, fed*, unfed*, with the unfed split in halves.
  std::vector<int> runs;  // alternating run kinds: 0 unfed, 1 fed
  int64_t unfed_before = 0, unfed_after = 0, fed_count = 0;
  std::vector<int64_t> llm_round(batch.samples.size(), -1);  // its LLM micro-batch (dp 1: the round)
  for (const MicroBatch& mb : sch.sections[size_t(llm)].micro_batches)
    for (int32_t i : mb.samples) {
      const int kind = fed(i) ? 1 : 0;
      if (runs.empty() || runs.back() != kind) runs.push_back(kind);
      (kind ? fed_count : fed_count > 0 ? unfed_after : unfed_before)++;
      llm_round[size_t(i)] = int64_t(&mb - sch.sections[size_t(llm)].micro_batches.data());
    }
  BOOST_CHECK(runs == (std::vector<int>{0, 1, 0}));
  BOOST_CHECK_LE(std::abs(unfed_before - unfed_after), 1);
  BOOST_CHECK_GT(fed_count, 0);
  // The vision encoder's micro-batches follow the LLM's need order.
  int64_t last = -1;
  for (const MicroBatch& mb : sch.sections[size_t(vision)].micro_batches) {
    int64_t first_needed = int64_t(batch.samples.size());
    for (int32_t i : mb.samples) first_needed = std::min(first_needed, llm_round[size_t(i)]);
    BOOST_CHECK_GE(first_needed, last);
    last = first_needed;
  }
}

// LPT across replicas: with dp = 2 the replicas' costs are balanced within
// the largest single sample's cost.
BOOST_AUTO_TEST_CASE(replicas_balanced_by_cost) {
  Rng rng(99);
  const Program p = text_llm();
  const SectionGraph g = build_graph(p);
  const Batch batch = random_batch(rng, 37);
  test::TokenCost cost(g);
  Plan plan;
  plan.sections = {{0, 2, 1, 1, 2, 3}};
  const Schedule sch = wavefront_schedule(g, plan, cost, batch);
  double load[2] = {0, 0}, largest = 0;
  for (const MicroBatch& mb : sch.sections[0].micro_batches)
    for (int32_t i : mb.samples) {
      const double c = cost.forward_s(0, {&batch.samples[size_t(i)]}, plan.sections[0]) +
                       cost.backward_s(0, {&batch.samples[size_t(i)]}, plan.sections[0]);
      load[mb.replica] += c;
      largest = std::max(largest, c);
    }
  BOOST_CHECK_LE(std::abs(load[0] - load[1]), largest);
}

// A producer on part of its consumer's devices: llava15_7b's vision and
// projector (tp 1, dp 8) on devices 0-7, its LLM (tp 4, dp 4) on 0-15. Every
// sample whose LLM replica holds projector replicas (replicas 0 and 1) is
// projected, and encoded, on a device of that LLM replica; the others are
// spread over all 8 (least loaded). Before issue 17 only equal device ranges
// nested, and these samples went to any replica.
BOOST_AUTO_TEST_CASE(producers_nest_in_a_consumer_on_more_devices) {
  const Program p = load("models/llava15_7b.sect");
  const SectionGraph g = build_graph(p);
  Plan plan;
  plan.sections = {{0, 8, 1, 1, 8, 1}, {0, 8, 1, 1, 8, 1}, {0, 16, 4, 1, 4, 1}};
  const Batch batch = Sampler(p.data, 64).batch(0);
  test::TokenCost cost(g);
  const Schedule sch = wavefront_schedule(g, plan, cost, batch);
  BOOST_REQUIRE(validate(g, plan, sch).empty());
  std::vector<int64_t> llm_device(batch.samples.size(), -1), vision_device(batch.samples.size(), -1);
  for (const MicroBatch& mb : sch.sections[2].micro_batches)
    for (int32_t i : mb.samples) llm_device[size_t(i)] = stage_first_device(plan.sections[2], mb.replica, 0);
  for (const MicroBatch& mb : sch.sections[0].micro_batches)
    for (int32_t i : mb.samples) vision_device[size_t(i)] = mb.replica;
  int64_t nested = 0, spread = 0;
  std::vector<int64_t> used(8, 0);
  for (const MicroBatch& mb : sch.sections[1].micro_batches)
    for (int32_t i : mb.samples) {
      const int64_t home = llm_device[size_t(i)];
      ++used[size_t(mb.replica)];
      BOOST_TEST(vision_device[size_t(i)] == mb.replica);  // the encoder runs it on the projector's device
      if (home < 8) {
        BOOST_TEST((mb.replica >= home && mb.replica < home + 4));
        ++nested;
      } else {
        ++spread;
      }
    }
  BOOST_TEST(nested > 0);
  BOOST_TEST(spread > 0);
  for (int64_t n : used) BOOST_TEST(n > 0);
}

// The other way round: a producer whose every replica holds several of its
// consumer's (kd_70b_to_8b's teacher at tp 8 over students at tp 2, both on
// devices 0-15). Each teacher replica is a group of four student replicas:
// the student deals its samples to the group least loaded by teacher cost
// (plus its own over the group), and the teacher runs each sample in the
// group of the student replica that consumes it, so its logits stay on
// that replica's devices and no group waits for another's teacher. Before,
// the teacher's own LPT sent most samples' logits to another group.
BOOST_AUTO_TEST_CASE(consumers_grouped_under_a_producer_on_their_devices) {
  const Program p = load("models/kd_70b_to_8b.sect");
  const SectionGraph g = build_graph(p);
  Plan plan;
  plan.sections = {{0, 16, 8, 1, 2, 4}, {0, 16, 2, 1, 8, 2}};  // teacher, student
  const Batch batch = Sampler(p.data, 64).batch(0);
  test::TokenCost cost(g);
  const Schedule sch = wavefront_schedule(g, plan, cost, batch);
  BOOST_REQUIRE(validate(g, plan, sch).empty());
  std::vector<int64_t> teacher_replica(batch.samples.size(), -1);
  for (const MicroBatch& mb : sch.sections[0].micro_batches)
    for (int32_t i : mb.samples) teacher_replica[size_t(i)] = mb.replica;
  double group_load[2] = {0, 0}, largest = 0;
  std::vector<int64_t> used(8, 0);
  for (const MicroBatch& mb : sch.sections[1].micro_batches)
    for (int32_t i : mb.samples) {
      BOOST_TEST(teacher_replica[size_t(i)] == mb.replica / 4);  // the group holding the student replica
      ++used[size_t(mb.replica)];
      const Sample* one = &batch.samples[size_t(i)];
      const double c = cost.forward_s(0, {one}, plan.sections[0]) +
                       (cost.forward_s(1, {one}, plan.sections[1]) + cost.backward_s(1, {one}, plan.sections[1])) / 4;
      group_load[mb.replica / 4] += c;
      largest = std::max(largest, c);
    }
  BOOST_CHECK_LE(std::abs(group_load[0] - group_load[1]), largest);  // the groups' LPT
  for (int64_t n : used) BOOST_TEST(n > 0);
}

// ScheduleLevers::consumer_groups: tiny_mllm's vision at dp 1, micro-batch
// 8, feeds projectors at micro-batch 2 over 8 replicas and an LLM at dp 32,
// micro-batch 1, so every vision sample is due in the LLM's first round.
// Off, the vision's micro-batches take its samples largest first and a
// projector micro-batch can hold samples of both, waiting for the second;
// on, each projector micro-batch's samples lie in one vision micro-batch.
BOOST_AUTO_TEST_CASE(consumer_groups_keep_a_consumer_micro_batch_in_one_producer_micro_batch) {
  const Program p = load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(p);
  const int vision = g.find("vision"), proj = g.find("vision_proj"), llm = g.find("llm");
  Plan plan;
  plan.sections.resize(g.nodes.size(), {0, 1, 1, 1, 1, 2});
  plan.sections[size_t(vision)] = {0, 1, 1, 1, 1, 8};
  plan.sections[size_t(proj)] = {1, 8, 1, 1, 8, 2};
  plan.sections[size_t(llm)] = {9, 32, 1, 1, 32, 1};
  plan.sections[size_t(g.find("audio"))] = {41, 8, 1, 1, 8, 2};
  plan.sections[size_t(g.find("audio_proj"))] = {49, 8, 1, 1, 8, 2};
  plan.levers.token_micro_batches = false;
  const Batch batch = Sampler(p.data, 32).batch(0);
  test::TokenCost cost(g);
  // The number of projector micro-batches holding samples of more than one
  // vision micro-batch.
  auto straddling = [&](const Plan& pl) {
    const Schedule sch = wavefront_schedule(g, pl, cost, batch);
    BOOST_REQUIRE(validate(g, pl, sch).empty());
    BOOST_REQUIRE_GT(sch.sections[size_t(vision)].micro_batches.size(), 1u);
    std::vector<int64_t> vision_mb(batch.samples.size(), -1);
    for (const MicroBatch& mb : sch.sections[size_t(vision)].micro_batches)
      for (int32_t i : mb.samples) vision_mb[size_t(i)] = mb.id;
    int64_t n = 0;
    for (const MicroBatch& mb : sch.sections[size_t(proj)].micro_batches) {
      std::set<int64_t> from;
      for (int32_t i : mb.samples) from.insert(vision_mb[size_t(i)]);
      n += from.size() > 1;
    }
    return n;
  };
  BOOST_TEST(straddling(plan) > 0);
  plan.levers.consumer_groups = true;
  BOOST_TEST(straddling(plan) == 0);
}

// ScheduleLevers::reorder off: loader order, micro_batch consecutive
// samples to the replicas in turn (the ablation's baseline). On: the
// replicas' loads are balanced by LPT (replicas_balanced_by_cost).
BOOST_AUTO_TEST_CASE(reorder_off_keeps_loader_order) {
  Rng rng(41);
  const Program p = text_llm();
  const SectionGraph g = build_graph(p);
  const Batch batch = random_batch(rng, 29);
  test::TokenCost cost(g);
  Plan plan;
  plan.sections = {{0, 3, 1, 1, 3, 2}};
  plan.levers = {false, false};
  const Schedule sch = wavefront_schedule(g, plan, cost, batch);
  BOOST_REQUIRE(validate(g, plan, sch).empty());
  std::vector<int32_t> previous(3, -1);
  for (const MicroBatch& mb : sch.sections[0].micro_batches) {
    BOOST_TEST(int64_t(mb.samples.size()) <= 2);
    for (int32_t i : mb.samples) {
      BOOST_TEST(i / 2 % 3 == mb.replica);  // chunk i / 2 on replica (i / 2) mod 3
      BOOST_TEST(i > previous[size_t(mb.replica)]);
      previous[size_t(mb.replica)] = i;
    }
  }
}

// ScheduleLevers::token_micro_batches: micro-batches cut by tokens, up to
// micro_batch × the step's mean tokens per sample (a longer sample alone),
// so short samples share a micro-batch beyond micro_batch; off: by count.
BOOST_AUTO_TEST_CASE(token_micro_batches_cut_by_tokens) {
  const Program p = text_llm();
  const SectionGraph g = build_graph(p);
  Batch batch;
  for (int i = 0; i < 40; ++i) {
    Sample x;
    x.id = i;
    x.modalities.add(Modality::Text);
    x.text_tokens = i % 8 == 0 ? 2000 : 20;  // a few long, many short
    batch.samples.push_back(x);
  }
  int64_t mean = 0;
  for (const Sample& x : batch.samples) mean += g.tokens(0, {x.modalities, x.text_tokens, x.images, x.audio_frames});
  mean /= int64_t(batch.samples.size());
  test::TokenCost cost(g);
  Plan plan;
  plan.sections = {{0, 2, 1, 1, 2, 2}};
  plan.levers.per_step_micro_batch = false;  // the mean rule alone (the next test adds the per-step choice)
  for (const bool by_tokens : {true, false}) {
    plan.levers.token_micro_batches = by_tokens;
    const Schedule sch = wavefront_schedule(g, plan, cost, batch);
    BOOST_REQUIRE(validate(g, plan, sch).empty());
    size_t most = 0;
    for (const MicroBatch& mb : sch.sections[0].micro_batches) {
      int64_t tokens = 0;
      for (int32_t i : mb.samples) {
        const Sample& x = batch.samples[size_t(i)];
        tokens += g.tokens(0, {x.modalities, x.text_tokens, x.images, x.audio_frames});
      }
      most = std::max(most, mb.samples.size());
      if (by_tokens && mb.samples.size() > 1) BOOST_TEST(tokens <= 2 * mean);
    }
    BOOST_TEST_CONTEXT("by tokens " << by_tokens) { BOOST_TEST((most > 2) == by_tokens); }
  }
}

// ScheduleLevers::per_step_micro_batch: each step's token budget chosen
// from that step's samples between micro_batch × the mean and the memory
// bound (the tokens of the micro_batch largest samples). With one replica
// and pp 1 the estimate is the replica's summed forward + backward, which
// bigger micro-batches shrink (TokenCost: a fixed cost per micro-batch), so
// the bound is chosen: no micro-batch of several samples exceeds it, and
// there are fewer micro-batches than under the mean rule.
BOOST_AUTO_TEST_CASE(per_step_micro_batch_fills_to_the_memory_bound) {
  const Program p = text_llm();
  const SectionGraph g = build_graph(p);
  Batch batch;
  for (int i = 0; i < 40; ++i) {
    Sample x;
    x.id = i;
    x.modalities.add(Modality::Text);
    x.text_tokens = i % 8 == 0 ? 2000 : 20 + i;
    batch.samples.push_back(x);
  }
  std::vector<int64_t> tokens;
  for (const Sample& x : batch.samples) tokens.push_back(g.tokens(0, {x.modalities, x.text_tokens, x.images, x.audio_frames}));
  std::sort(tokens.begin(), tokens.end(), std::greater<>());
  const int64_t bound = tokens[0] + tokens[1];
  test::TokenCost cost(g);
  Plan plan;
  plan.sections = {{0, 1, 1, 1, 1, 2}};
  size_t count[2] = {0, 0};
  for (const bool per_step : {false, true}) {
    plan.levers.per_step_micro_batch = per_step;
    const Schedule sch = wavefront_schedule(g, plan, cost, batch);
    BOOST_REQUIRE(validate(g, plan, sch).empty());
    for (const MicroBatch& mb : sch.sections[0].micro_batches) {
      int64_t sum = 0;
      for (int32_t i : mb.samples) sum += g.tokens(0, {batch.samples[size_t(i)].modalities, batch.samples[size_t(i)].text_tokens, {}, {}});
      if (mb.samples.size() > 1) BOOST_TEST(sum <= bound);
    }
    count[per_step] = sch.sections[0].micro_batches.size();
  }
  BOOST_TEST(count[1] < count[0]);
}

BOOST_AUTO_TEST_CASE(validate_reports_broken_schedules) {
  Rng rng(5);
  Program p = random_program(rng);
  const SectionGraph g = build_graph(p);
  Plan plan;
  for (size_t s = 0; s < p.sections.size(); ++s) plan.sections.push_back({int64_t(s), 1, 1, 1, 1, 2});
  const Batch batch = random_batch(rng, 12);
  test::TokenCost cost(g);
  const Schedule good = wavefront_schedule(g, plan, cost, batch);
  BOOST_REQUIRE(validate(g, plan, good).empty());
  // A consumer forward without its producers.
  Schedule no_deps = good;
  for (Task& t : no_deps.tasks) t.deps.clear();
  BOOST_CHECK(!validate(g, plan, no_deps).empty());
  // A sample dropped from a micro-batch.
  Schedule dropped = good;
  for (auto& s : dropped.sections)
    if (!s.micro_batches.empty() && s.micro_batches[0].samples.size() > 1) {
      s.micro_batches[0].samples.pop_back();
      break;
    }
  BOOST_CHECK(!validate(g, plan, dropped).empty());
  // A task on the wrong replica.
  Schedule moved = good;
  moved.tasks[0].replica = 1;
  BOOST_CHECK(!validate(g, plan, moved).empty());
}

}  // namespace maestro
