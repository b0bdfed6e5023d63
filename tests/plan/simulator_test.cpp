// The simulator on hand-computed cases (two sections, fixed costs), and the
// Chrome trace it writes.
#include <boost/test/unit_test.hpp>

#include <set>
#include <sstream>

#include "plan/chrome_trace.h"
#include "plan/simulator.h"

namespace maestro {
namespace {

// Producer "enc" (section 0) feeds consumer "llm" (section 1), both train.
// Per micro-batch: enc forward 1 s, backward 2 s; llm forward 3 s, backward
// 4 s; any transfer 0.5 s; grad sync 0.25 s, optimizer 0.125 s.
class FixedCost : public CostModel {
 public:
  double forward_s(int s, const std::vector<const Sample*>&, const SectionPlan&) const override { return s == 0 ? 1 : 3; }
  double backward_s(int s, const std::vector<const Sample*>&, const SectionPlan&) const override { return s == 0 ? 2 : 4; }
  double transfer_s(const Flow&, const std::vector<const Sample*>&, const SectionPlan&, const SectionPlan&) const override {
    return 0.5;
  }
  double grad_sync_s(int, const SectionPlan&) const override { return 0.25; }
  double optimizer_s(int, const SectionPlan&) const override { return 0.125; }
  int64_t weights_bytes_per_device(int s, const SectionPlan&) const override { return s == 0 ? 10 : 20; }
  int64_t activation_bytes(int s, const std::vector<const Sample*>&, const SectionPlan&) const override {
    return s == 0 ? 100 : 1000;
  }
  double peak_device_s(int s, const Sample&) const override { return s == 0 ? 3 : 7; }
};

// n text samples of 5 tokens.
Batch texts(int n) {
  Batch batch;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.id = i;
    s.modalities.add(Modality::Text);
    s.text_tokens = 5;
    batch.samples.push_back(s);
  }
  return batch;
}

struct TwoSections {
  Program program;
  SectionGraph graph;
  Plan plan;
  Batch batch;
  TwoSections() {
    Section enc, llm;
    enc.name = "enc";
    enc.model = {"mlp", MlpSpec{4, 4, 4, 2}};
    llm.name = "llm";
    llm.model = {"transformer", TransformerSpec{1, 4, 1, 1, 8, 16}};
    llm.consumes = {Modality::Text};
    llm.loss = {LossTerm{}};
    enc.consumes = {Modality::Text};
    program.sections = {enc, llm};
    program.flows = {{"enc", "llm", FlowKind::Activations, {}}};
    graph = build_graph(program);
    plan.sections = {{0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}};  // device 0 and device 1, micro-batch 1
    batch = texts(2);
  }
};

// The same simulated step: its time, every task's start and end, and the peaks.
void check_same_step(const SimResult& a, const SimResult& b) {
  BOOST_CHECK_EQUAL(a.iteration_s, b.iteration_s);
  BOOST_CHECK(a.task_start_s == b.task_start_s);
  BOOST_CHECK(a.task_end_s == b.task_end_s);
  BOOST_CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
}

}  // namespace

// Wavefront, by hand: enc F0 [0,1], F1 [1,2]; llm F0 [1.5,4.5] (transfer
// 0.5), F1 [4.5,7.5]; llm B0 [7.5,11.5], B1 [11.5,15.5]; enc B0 [12,14]
// (gradient 0.5 back), B1 [16,18]; llm sync+step [15.5,15.875], enc
// [18,18.375]. Lower bound: work (2·3 + 2·7) / 2 devices = 10; one sample's
// path 1 + 0.5 + 3 + 4 + 0.5 + 2 = 11.
BOOST_AUTO_TEST_CASE(two_sections_wavefront_by_hand) {
  TwoSections t;
  FixedCost cost;
  const Schedule sch = wavefront_schedule(t.graph, t.plan, cost, t.batch);
  BOOST_REQUIRE(validate(t.graph, t.plan, sch).empty());
  const SimResult r = simulate(t.graph, t.plan, sch, cost);
  BOOST_CHECK_CLOSE(r.compute_end_s, 18.0, 1e-9);
  BOOST_CHECK_CLOSE(r.iteration_s, 18.375, 1e-9);
  BOOST_REQUIRE_EQUAL(r.device_busy_s.size(), 2u);
  BOOST_CHECK_CLOSE(r.device_busy_s[0], 6.375, 1e-9);
  BOOST_CHECK_CLOSE(r.device_busy_s[1], 14.375, 1e-9);
  BOOST_CHECK_CLOSE(r.lower_bound_s, 11.0, 1e-9);
  BOOST_CHECK_CLOSE(r.utilization, 11.0 / 18.375, 1e-9);
  BOOST_CHECK_CLOSE(r.section_utilization[0], 6.375 / 18.375, 1e-9);
  BOOST_CHECK_CLOSE(r.section_utilization[1], 14.375 / 18.375, 1e-9);
  // Both of enc's micro-batches are in flight until B0 ends at 14; both of
  // llm's until B0 ends at 11.5.
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[0], 10 + 2 * 100);
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[1], 20 + 2 * 1000);
  // Task times, in issue order: enc F0 F1, llm F0 F1, llm B0 B1, enc B0 B1.
  const std::vector<double> start{0, 1, 1.5, 4.5, 7.5, 11.5, 12, 16}, end{1, 2, 4.5, 7.5, 11.5, 15.5, 14, 18};
  BOOST_REQUIRE_EQUAL(sch.tasks.size(), start.size());
  for (size_t k = 0; k < start.size(); ++k) {
    BOOST_CHECK_CLOSE(r.task_start_s[k], start[k], 1e-9);
    BOOST_CHECK_CLOSE(r.task_end_s[k], end[k], 1e-9);
  }
}

// llm's forward and backward grow with the sample's tokens (6 and 8 s per
// 10 tokens): a long sample's chain outweighs a short one's.
class LongChainCost : public FixedCost {
 public:
  static double tokens(const std::vector<const Sample*>& mb) {
    double n = 0;
    for (const Sample* x : mb) n += x->text_tokens;
    return n;
  }
  double forward_s(int s, const std::vector<const Sample*>& mb, const SectionPlan& p) const override {
    return s == 0 ? FixedCost::forward_s(s, mb, p) : 0.6 * tokens(mb);
  }
  double backward_s(int s, const std::vector<const Sample*>& mb, const SectionPlan& p) const override {
    return s == 0 ? FixedCost::backward_s(s, mb, p) : 0.8 * tokens(mb);
  }
};

// ScheduleLevers::critical_path_first, by hand: enc on device 0, llm dp 2
// on devices 0 and 1; sample 0 has 5 tokens (llm F 3, B 4), sample 1 has 50
// (F 30, B 40). The long sample's llm replica is device 0, so enc runs both
// samples there, sample 0 first. First ready, first served: enc F0 [0,1],
// F1 [1,2] (held from 0); llm F1 [2.5,32.5] on device 0; enc B0, ready at 9,
// holds device 0 [32.5,34.5], so llm B1 [34.5,74.5] and enc B1 [75,77].
// Longest path first: enc F1 (path 1+30+40+2) [0,1] before F0 [1,2]; llm F1
// [2,32]; at 32 llm B1 (path 42) beats the waiting enc B0 (2): [32,72], enc
// B0 [72,74], enc B1 [74,76].
// A stage recomputed whole (CostModel::kept_activation_bytes): enc keeps 10
// of its 100 bytes from each forward's end to its backward's start. Device
// 0 by hand (the times above): F0 [0,1] 100, then 10; F1 [1,2] 110, then
// 20; B0 [12,14] 110, then 10; B1 [16,18] 100, then 0 — a peak of 110
// where keeping everything took 200. The times do not change.
BOOST_AUTO_TEST_CASE(a_stage_recomputed_whole_keeps_its_input_between_forward_and_backward) {
  struct KeptCost : FixedCost {
    int64_t kept_activation_bytes(int s, const std::vector<const Sample*>& x, const SectionPlan& p) const override {
      return s == 0 ? 10 : activation_bytes(s, x, p);
    }
  };
  TwoSections t;
  KeptCost cost;
  const SimResult r = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  BOOST_CHECK_CLOSE(r.compute_end_s, 18.0, 1e-9);
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[0], 10 + 100 + 10);
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[1], 20 + 2 * 1000);
  // And the planner's count of c micro-batches in flight: c kept, one whole.
  BOOST_CHECK_EQUAL(in_flight_activation_bytes(cost, 0, {}, t.plan.sections[0], 3), 3 * 10 + 90);
  BOOST_CHECK_EQUAL(in_flight_activation_bytes(cost, 1, {}, t.plan.sections[1], 3), 3 * 1000);
}

BOOST_AUTO_TEST_CASE(critical_path_first_runs_the_long_chain_first) {
  TwoSections t;
  t.plan.sections[1] = {0, 2, 1, 1, 2, 1};
  t.batch.samples[1].text_tokens = 50;
  LongChainCost cost;
  t.plan.levers.critical_path_first = false;
  const SimResult fifo = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  BOOST_CHECK_CLOSE(fifo.compute_end_s, 77.0, 1e-9);
  t.plan.levers.critical_path_first = true;
  const SimResult longest = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  BOOST_CHECK_CLOSE(longest.compute_end_s, 76.0, 1e-9);
  BOOST_CHECK_GE(longest.iteration_s, longest.lower_bound_s);
}

// ScheduleLevers::overlap_grad_sync, by hand: the same tasks; llm's sync on
// device 1's link from its last backward's start, [11.5,11.75], its step
// after that backward, [15.5,15.625]; enc's sync [16,16.25] on device 0's
// link, its step [18,18.125]. The syncs leave the devices' busy time; the
// lower bound (no sync in it) is unchanged.
BOOST_AUTO_TEST_CASE(grad_sync_overlaps_the_last_backward) {
  TwoSections t;
  t.plan.levers.overlap_grad_sync = true;
  FixedCost cost;
  const SimResult r =
      simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost, SimOptions{true});
  BOOST_CHECK_CLOSE(r.compute_end_s, 18.0, 1e-9);
  BOOST_CHECK_CLOSE(r.iteration_s, 18.125, 1e-9);
  BOOST_CHECK_CLOSE(r.device_busy_s[0], 6.125, 1e-9);
  BOOST_CHECK_CLOSE(r.device_busy_s[1], 14.125, 1e-9);
  BOOST_CHECK_CLOSE(r.lower_bound_s, 11.0, 1e-9);
  std::set<std::pair<std::string, double>> syncs;
  for (const TraceSpan& sp : r.spans)
    if (sp.category == "grad_sync") syncs.insert({sp.name, sp.start_s});
  BOOST_TEST((syncs == std::set<std::pair<std::string, double>>{{"enc grad sync", 16.0}, {"llm grad sync", 11.5}}));
}

// Co-located, the two sections' syncs take turns on the shared link: llm's
// from its last backward's start, enc's after it, each no earlier than its
// own last backward's start.
BOOST_AUTO_TEST_CASE(overlapped_syncs_share_the_link) {
  TwoSections t;
  t.plan.sections[1].first_device = 0;
  t.plan.levers.overlap_grad_sync = true;
  FixedCost cost;
  const SimResult r =
      simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost, SimOptions{true});
  BOOST_CHECK_CLOSE(r.device_busy_s[0], 20.25, 1e-9);  // work 20 s + two optimizer steps
  BOOST_CHECK_GE(r.iteration_s, r.compute_end_s + 0.125);
  BOOST_CHECK_GE(r.iteration_s, r.lower_bound_s);
  std::vector<double> starts;
  for (const TraceSpan& sp : r.spans)
    if (sp.category == "grad_sync") starts.push_back(sp.start_s);
  BOOST_REQUIRE_EQUAL(starts.size(), 2u);
  std::sort(starts.begin(), starts.end());
  BOOST_CHECK_GE(starts[1], starts[0] + 0.25);
}

// The in-flight cap bounds activation memory: with cap 1 the llm holds one
// micro-batch at a time (its window); enc holds the admitted one, the
// lookahead one, and the one whose backward waits on the llm's.
BOOST_AUTO_TEST_CASE(in_flight_cap_bounds_peak_memory) {
  TwoSections t;
  for (int i = 2; i < 8; ++i) t.batch.samples.push_back(t.batch.samples[0]);
  FixedCost cost;
  t.plan.in_flight_cap = 0;
  const SimResult open = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  t.plan.in_flight_cap = 1;
  const SimResult capped = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  BOOST_CHECK_EQUAL(capped.peak_memory_bytes[1], 20 + 1000);
  BOOST_CHECK_EQUAL(capped.peak_memory_bytes[0], 10 + 3 * 100);
  BOOST_CHECK_GT(open.peak_memory_bytes[0], 10 + 3 * 100);
  BOOST_CHECK_GT(open.peak_memory_bytes[1], 20 + 2 * 1000);
  BOOST_CHECK_GE(capped.iteration_s, capped.lower_bound_s);
}

// SimOptions::resident_handoff_budget, by hand: each hand-off is 7 bytes
// and takes 1.5 s. enc F0 [0,1], F1 [1,2]; llm F0 [2.5,5.5] (F0's output
// arrives at 2.5), F1 [5.5,8.5]. enc's output of F0 waits on device 0 from
// 1 to 2.5, F1's from 2 to 5.5, beside enc's two micro-batches (100 each,
// from 0 and 1): 214 at [2,2.5) when both fit the budget (14), 207 when
// only one does (7: F1's goes through host memory), 200 with none (0). The
// gradients (llm's backward to enc's) wait on device 1 after llm's
// micro-batches are gone: its peak stays. No time changes.
BOOST_AUTO_TEST_CASE(hand_offs_wait_in_their_producers_memory_within_the_budget) {
  struct HandOffCost : FixedCost {
    double transfer_s(const Flow&, const std::vector<const Sample*>&, const SectionPlan&, const SectionPlan&) const override {
      return 1.5;
    }
    int64_t transfer_bytes(const Flow&, const std::vector<const Sample*>&) const override { return 7; }
  };
  TwoSections t;
  const HandOffCost cost;
  const Schedule sch = wavefront_schedule(t.graph, t.plan, cost, t.batch);
  auto sim = [&](int64_t budget) { return simulate(t.graph, t.plan, sch, cost, SimOptions{.resident_handoff_budget = budget}); };
  const SimResult none = sim(0), one = sim(7), both = sim(14);
  BOOST_CHECK_CLOSE(none.task_start_s[2], 2.5, 1e-9);  // llm F0
  BOOST_CHECK_CLOSE(none.task_start_s[3], 5.5, 1e-9);  // llm F1
  BOOST_CHECK_EQUAL(none.peak_memory_bytes[0], 10 + 200);
  BOOST_CHECK_EQUAL(one.peak_memory_bytes[0], 10 + 207);
  BOOST_CHECK_EQUAL(both.peak_memory_bytes[0], 10 + 214);
  for (const SimResult* r : {&none, &one, &both}) {
    BOOST_CHECK_EQUAL(r->peak_memory_bytes[1], 20 + 2000);
    BOOST_CHECK(r->task_start_s == none.task_start_s);
    BOOST_CHECK(r->task_end_s == none.task_end_s);
  }
  // Over the budget's limit: the step stops where device 0 passes it.
  const SimResult over = simulate(t.graph, t.plan, sch, cost,
                                  SimOptions{.memory_limit_bytes = 10 + 210, .resident_handoff_budget = 14});
  BOOST_CHECK(over.over_memory);
  BOOST_CHECK(!sim(14).over_memory);
}

// The same between pipeline stages: one section of two stages (devices 0
// and 1), six micro-batches of one sample, three in flight, forward 1 s
// and backward 2 s a stage, 5 bytes handed on each way. Stage 0's F3 ends
// at 9 while stage 1 runs B2 [8,10]: F3's rows wait on device 0 from 9 to
// 10, beside micro-batches 1, 2 and 3 (100 each) — device 0's peak, 10 +
// 300 + 5, where without the hand-off it is 310 (a budget of 4 keeps
// none). Every other hand-off is taken in as it is made, or waits while
// its device holds less.
BOOST_AUTO_TEST_CASE(stage_hand_offs_wait_on_the_stage_that_made_them) {
  struct StageCost : FixedCost {
    int64_t stage_handoff_bytes(int, const std::vector<const Sample*>&, const SectionPlan&) const override { return 5; }
  };
  Program program;
  Section llm;
  llm.name = "llm";
  llm.model = {"transformer", TransformerSpec{2, 4, 1, 1, 8, 16}};
  llm.consumes = {Modality::Text};
  llm.loss = {LossTerm{}};
  program.sections = {llm};
  const SectionGraph graph = build_graph(program);
  Plan plan;
  plan.sections = {{0, 2, 1, 2, 1, 1}};  // pp 2 on devices 0-1, micro-batch 1
  plan.in_flight_cap = 3;
  const Batch batch = texts(6);
  const StageCost cost;
  const Schedule sch = wavefront_schedule(graph, plan, cost, batch);
  BOOST_REQUIRE(validate(graph, plan, sch).empty());
  auto sim = [&](int64_t budget) { return simulate(graph, plan, sch, cost, SimOptions{.resident_handoff_budget = budget}); };
  const SimResult none = sim(0), below = sim(4), held = sim(5);
  auto task = [&](Task::Kind kind, int64_t micro_batch, int64_t stage) {
    for (const Task& t : sch.tasks)
      if (t.kind == kind && t.micro_batch == micro_batch && t.stage == stage) return size_t(t.id);
    BOOST_FAIL("no such task");
    return size_t(0);
  };
  BOOST_CHECK_CLOSE(none.task_end_s[task(Task::Kind::Forward, 3, 0)], 9.0, 1e-9);
  BOOST_CHECK_CLOSE(none.task_start_s[task(Task::Kind::Forward, 3, 1)], 10.0, 1e-9);
  BOOST_CHECK_CLOSE(none.task_start_s[task(Task::Kind::Backward, 2, 1)], 8.0, 1e-9);
  BOOST_CHECK_EQUAL(none.peak_memory_bytes[0], 10 + 300);
  BOOST_CHECK_EQUAL(below.peak_memory_bytes[0], 10 + 300);
  BOOST_CHECK_EQUAL(held.peak_memory_bytes[0], 10 + 300 + 5);
  for (const SimResult* r : {&none, &below, &held}) {
    BOOST_CHECK_EQUAL(r->peak_memory_bytes[1], 10 + 300);
    BOOST_CHECK(r->task_start_s == none.task_start_s);
  }
}

// Monolithic, by hand: one lane; per micro-batch enc F, llm F, llm B, enc B
// in sequence: [0,1] [1.5,4.5] [4.5,8.5] [9,11], then [11,12] [12.5,15.5]
// [15.5,19.5] [20,22]; llm sync+step [19.5,19.875], enc [22,22.375].
BOOST_AUTO_TEST_CASE(two_sections_monolithic_by_hand) {
  TwoSections t;
  FixedCost cost;
  const Schedule sch = monolithic_schedule(t.graph, t.plan, t.batch, 1);
  BOOST_REQUIRE(validate(t.graph, t.plan, sch).empty());
  const SimResult r = simulate(t.graph, t.plan, sch, cost);
  BOOST_CHECK_CLOSE(r.iteration_s, 22.375, 1e-9);
  BOOST_CHECK_CLOSE(r.device_busy_s[0], 6.375, 1e-9);
  BOOST_CHECK_CLOSE(r.device_busy_s[1], 14.375, 1e-9);
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[0], 10 + 100);
  BOOST_CHECK_EQUAL(r.peak_memory_bytes[1], 20 + 1000);
}

// Co-located on one device, the two sections serialise: all work
// 2·(1+3+4+2) = 20 s plus 0.75 s of sync and steps, the transfers hidden.
BOOST_AUTO_TEST_CASE(shared_device_serialises) {
  TwoSections t;
  t.plan.sections[1].first_device = 0;
  FixedCost cost;
  const SimResult r = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost);
  BOOST_REQUIRE_EQUAL(r.device_busy_s.size(), 1u);
  BOOST_CHECK_CLOSE(r.device_busy_s[0], 20.75, 1e-9);
  BOOST_CHECK_GE(r.iteration_s, 20.75);
  BOOST_CHECK_CLOSE(r.lower_bound_s, 20.0, 1e-9);  // work 20 device-seconds on 1 device
}

// SimOptions::memory_breakdown: each device's activations at its peak, by
// section. Apart (the by-hand case above): enc's two micro-batches on
// device 0, llm's two on device 1. Sharing device 0: the shares add up to
// the peak less both sections' weights, each a whole number of its
// micro-batches.
BOOST_AUTO_TEST_CASE(memory_breakdown_names_what_each_peak_holds) {
  TwoSections t;
  const FixedCost cost;
  auto sim = [&](bool breakdown) {
    return simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost,
                    SimOptions{.memory_breakdown = breakdown});
  };
  const SimResult apart = sim(true);
  BOOST_REQUIRE_EQUAL(apart.peak_activations_by_section.size(), 2u);
  BOOST_CHECK(apart.peak_activations_by_section[0] == (std::vector<int64_t>{2 * 100, 0}));
  BOOST_CHECK(apart.peak_activations_by_section[1] == (std::vector<int64_t>{0, 2 * 1000}));
  BOOST_CHECK(sim(false).peak_activations_by_section.empty());

  t.plan.sections[1].first_device = 0;
  const SimResult shared = sim(true);
  BOOST_REQUIRE_EQUAL(shared.peak_activations_by_section.size(), 1u);
  const std::vector<int64_t>& held = shared.peak_activations_by_section[0];
  BOOST_CHECK_EQUAL(held[0] + held[1], shared.peak_memory_bytes[0] - (10 + 20));
  BOOST_CHECK_EQUAL(held[0] % 100, 0);
  BOOST_CHECK_EQUAL(held[1] % 1000, 0);
  BOOST_CHECK_GT(held[1], 0);
}

// SimOptions::lower_bound off (the planner's candidates): the same step,
// without the bound and the utilization.
BOOST_AUTO_TEST_CASE(the_lower_bound_is_optional_and_changes_nothing_else) {
  TwoSections t;
  t.plan.sections[1].first_device = 0;
  const FixedCost cost;
  const Schedule sch = wavefront_schedule(t.graph, t.plan, cost, t.batch);
  const SimResult with = simulate(t.graph, t.plan, sch, cost);
  const SimResult without = simulate(t.graph, t.plan, sch, cost, SimOptions{.lower_bound = false});
  BOOST_CHECK_GT(with.lower_bound_s, 0.0);
  BOOST_CHECK_GT(with.utilization, 0.0);
  BOOST_CHECK_EQUAL(without.lower_bound_s, 0.0);
  BOOST_CHECK_EQUAL(without.utilization, 0.0);
  check_same_step(without, with);
}

// SimOptions::give_up_at (the planner's search: a candidate is kept only
// when faster than the best so far). The by-hand case's busiest device is
// busy 14.375 s (llm: 2·(3+4) + 0.375), the step 18.375 s: a step to beat
// of 14 gives up before the events with that bound; one of 14.375 or 15 is
// simulated whole, the same as without.
BOOST_AUTO_TEST_CASE(give_up_at_stops_where_the_busiest_device_cannot_beat_it) {
  TwoSections t;
  const FixedCost cost;
  const Schedule sch = wavefront_schedule(t.graph, t.plan, cost, t.batch);
  const SimResult whole = simulate(t.graph, t.plan, sch, cost);
  BOOST_CHECK(!whole.gave_up);
  const SimResult stopped = simulate(t.graph, t.plan, sch, cost, SimOptions{.give_up_at = 14.0});
  BOOST_CHECK(stopped.gave_up);
  BOOST_CHECK_CLOSE(stopped.iteration_s, 14.375, 1e-9);
  BOOST_CHECK_LE(stopped.iteration_s, whole.iteration_s);
  for (double beat : {14.375, 15.0}) {
    const SimResult r = simulate(t.graph, t.plan, sch, cost, SimOptions{.give_up_at = beat});
    BOOST_CHECK(!r.gave_up);
    check_same_step(r, whole);
  }
}

// SimOptions::memory_limit_bytes: the by-hand case peaks at 210 bytes on
// device 0 and 2,020 on device 1, where llm F1 starts at 4.5 s with F0's
// activations still held. At a limit of 2,020 nothing changes; at 2,019 the
// step stops there (no iteration time) with device 1 over the limit.
BOOST_AUTO_TEST_CASE(a_memory_limit_stops_the_step_where_a_device_goes_over) {
  TwoSections t;
  const FixedCost cost;
  const Schedule sch = wavefront_schedule(t.graph, t.plan, cost, t.batch);
  const SimResult whole = simulate(t.graph, t.plan, sch, cost);
  BOOST_CHECK(!whole.over_memory);
  BOOST_CHECK(whole.peak_memory_bytes == (std::vector<int64_t>{210, 2020}));
  const SimResult fits = simulate(t.graph, t.plan, sch, cost, SimOptions{.memory_limit_bytes = 2020});
  BOOST_CHECK(!fits.over_memory);
  check_same_step(fits, whole);
  const SimResult over = simulate(t.graph, t.plan, sch, cost, SimOptions{.memory_limit_bytes = 2019});
  BOOST_CHECK(over.over_memory);
  BOOST_REQUIRE_EQUAL(over.peak_memory_bytes.size(), 2u);
  BOOST_CHECK_EQUAL(over.peak_memory_bytes[1], 2020);
  BOOST_CHECK_EQUAL(over.iteration_s, 0.0);  // stopped at 4.5 s, before the step's end
}

BOOST_AUTO_TEST_CASE(chrome_trace_is_valid_json_with_one_track_per_device) {
  TwoSections t;
  FixedCost cost;
  SimOptions options;
  options.trace = true;
  const SimResult r = simulate(t.graph, t.plan, wavefront_schedule(t.graph, t.plan, cost, t.batch), cost, options);
  std::stringstream out;
  write_chrome_trace(out, r.spans, 2);
  const nlohmann::json trace = nlohmann::json::parse(out.str());
  BOOST_CHECK_EQUAL(trace.at("displayTimeUnit"), "ms");
  std::set<int64_t> named, used;
  int spans = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") named.insert(e.at("tid").get<int64_t>());
    if (e.at("ph") == "X") {
      ++spans;
      used.insert(e.at("tid").get<int64_t>());
      BOOST_CHECK_GE(e.at("dur").get<double>(), 0.0);
      BOOST_CHECK_EQUAL(e.at("pid"), 0);
    }
  }
  BOOST_CHECK_EQUAL(named.size(), 2u);
  BOOST_CHECK(used == named);
  BOOST_CHECK_EQUAL(spans, 8 + 2 * 2);  // 8 tasks on one device each, sync + step per section
  // The llm's first forward runs from 1.5 s to 4.5 s: in microseconds.
  bool found = false;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name") == "llm F mb0 r0 s0") {
      found = true;
      BOOST_CHECK_CLOSE(e.at("ts").get<double>(), 1.5e6, 1e-9);
      BOOST_CHECK_CLOSE(e.at("dur").get<double>(), 3e6, 1e-9);
    }
  BOOST_CHECK(found);
}

}  // namespace maestro
