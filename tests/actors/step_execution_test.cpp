// StepExecution alone: it executes the Schedule it is given (the plan's
// tasks and dependencies, nothing added), releases the plan's frontier,
// routes output handles to the tasks that read them, and its in-flight cap
// yields rather than stalls.
#include <boost/test/unit_test.hpp>

#include "actors/step_execution.h"
#include "plan/backward_order.h"

using namespace maestro;

namespace {

Program enc_head() {
  Program p;
  Section enc, head;
  enc.name = "enc";
  head.name = "head";
  enc.model = head.model = {"mlp", MlpSpec{4, 4, 4}};  // the graph counts parameters; the test never runs them
  p.sections = {enc, head};
  p.flows = {Flow{"enc", "head", FlowKind::Activations, {}}};
  return p;
}

Plan one_replica_each() {
  Plan plan;
  plan.sections = {SectionPlan{}, SectionPlan{}};
  return plan;
}

// enc runs samples {0,1} and {2,3}; head {1,2} and {0,3}: every head
// micro-batch needs both enc ones. Dependencies written out by hand from the
// rules of plan/schedule.h, then each replica's backwards chained
// (plan/backward_order.h) unless `chained` is false.
Schedule enc_head_schedule(int64_t cap, bool chained = true) {
  Schedule sch;
  sch.batch.samples.resize(4);
  sch.in_flight_cap = cap;
  sch.sections.resize(2);
  sch.sections[0] = {{{0, 0, {0, 1}}, {1, 0, {2, 3}}}, true};
  sch.sections[1] = {{{0, 0, {1, 2}}, {1, 0, {0, 3}}}, true};
  auto add = [&](int sec, Task::Kind k, int64_t mb, std::vector<int64_t> deps) {
    sch.tasks.push_back(Task{int64_t(sch.tasks.size()), sec, 0, 0, k, mb, std::move(deps)});
  };
  add(0, Task::Kind::Forward, 0, {});           // 0
  add(0, Task::Kind::Forward, 1, {});           // 1
  add(1, Task::Kind::Forward, 0, {0, 1});       // 2
  add(1, Task::Kind::Forward, 1, {0, 1});       // 3
  add(1, Task::Kind::Backward, 1, {3});         // 4
  add(1, Task::Kind::Backward, 0, {2});         // 5
  add(0, Task::Kind::Backward, 0, {0, 4, 5});   // 6
  add(0, Task::Kind::Backward, 1, {1, 4, 5});   // 7
  sch.waves = compute_waves(sch.tasks);
  if (chained) chain_replica_backwards(sch);
  return sch;
}

TaskDone done_with(const RunTask& t, int32_t flow) {
  TaskDone d;
  d.task = t.task.id;
  for (int32_t s : t.samples) {
    TensorRef r;
    r = TensorRef::of({float(100 * t.task.id + s)});
    r.shape = {1};
    d.outputs.push_back({flow, s, r});
  }
  return d;
}

std::vector<int64_t> ids(const std::vector<RunTask>& ts) {
  std::vector<int64_t> out;
  for (const RunTask& t : ts) out.push_back(t.task.id);
  return out;
}

struct Fixture {
  Program program = enc_head();
  SectionGraph graph = build_graph(program);
  Plan plan = one_replica_each();
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(the_enc_head_schedule_is_valid, Fixture) {
  const Schedule sch = enc_head_schedule(0);
  const auto bad = validate(graph, plan, sch);
  BOOST_TEST(bad.empty(), (bad.empty() ? "" : bad.front()));
  BOOST_TEST(sch.tasks[5].deps == (std::vector<int64_t>{2, 4}));  // chained after head's previous backward
  BOOST_TEST(sch.tasks[7].deps == (std::vector<int64_t>{1, 4, 5, 6}));
}

BOOST_FIXTURE_TEST_CASE(frontier_and_routing, Fixture) {
  StepExecution x(graph, plan, enc_head_schedule(0), std::make_shared<StepData>(), 0);
  auto wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{0, 1}));
  x.complete(done_with(wave[1], 0));
  BOOST_TEST(x.release().empty());
  x.complete(done_with(wave[0], 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{2, 3}));
  // head mb 1 reads sample 0 (from enc task 0) and 3 (from enc task 1), in its own order.
  BOOST_TEST_REQUIRE(wave[1].inputs.size() == 2u);
  BOOST_TEST(wave[1].samples == (std::vector<int32_t>{0, 3}));
  BOOST_TEST(wave[1].inputs[0].sample == 0);
  BOOST_TEST(wave[1].inputs[0].tensor.values()[0] == 0.0f);
  BOOST_TEST(wave[1].inputs[1].tensor.values()[0] == 103.0f);
  x.complete(done_with(wave[0], 0));
  x.complete(done_with(wave[1], 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{4}));
  x.complete(done_with(wave[0], 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{5}));
  x.complete(done_with(wave[0], 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{6}));
  BOOST_TEST_REQUIRE(wave[0].inputs.size() == 2u);  // gradients for samples 0 (from task 4) and 1 (task 5)
  BOOST_TEST(wave[0].inputs[0].tensor.values()[0] == 400.0f);
  BOOST_TEST(wave[0].inputs[1].tensor.values()[0] == 501.0f);
  x.complete(done_with(wave[0], 0));
  wave = x.release();
  x.complete(done_with(wave[0], 0));
  BOOST_TEST(x.finished());
}

// Without the chain, head's two backwards go out together: the runtime adds
// no dependency of its own.
BOOST_FIXTURE_TEST_CASE(executes_the_schedule_as_given, Fixture) {
  StepExecution x(graph, plan, enc_head_schedule(0, /*chained=*/false), std::make_shared<StepData>(), 0);
  for (const RunTask& t : x.release()) x.complete(done_with(t, 0));
  for (const RunTask& t : x.release()) x.complete(done_with(t, 0));
  BOOST_TEST(ids(x.release()) == (std::vector<int64_t>{4, 5}));
}

BOOST_FIXTURE_TEST_CASE(in_flight_cap_holds_forwards_but_never_stalls, Fixture) {
  // The plan's Frontier: with cap 1, head (the window section: nothing reads
  // it) admits one micro-batch at a time; enc, which feeds it, runs ahead.
  StepExecution x(graph, plan, enc_head_schedule(1), std::make_shared<StepData>(), 0);
  auto wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{0, 1}));  // both enc mbs feed head mb 0
  for (const RunTask& t : wave) x.complete(done_with(t, 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{2}));  // head mb 1's forward (3) held by the cap
  // The REPL's `wave`: 3 is ready (its deps are done), not in flight.
  const auto w = x.wave(2);
  BOOST_TEST((std::vector<int64_t>{w[0].done, w[0].in_flight, w[0].ready, w[0].waiting}) ==
             (std::vector<int64_t>{2, 0, 0, 2}));  // enc: both forwards done, both backwards wait
  BOOST_TEST((std::vector<int64_t>{w[1].done, w[1].in_flight, w[1].ready, w[1].waiting}) ==
             (std::vector<int64_t>{0, 1, 1, 2}));  // head: 2 running, 3 ready, 4 and 5 wait
  x.complete(done_with(wave[0], 0));
  // head mb 0's backward (5) waits for the replica's previous backward (4,
  // head mb 1's): the cap would stall, so with nothing running it yields.
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{3}));
  int64_t steps = 0;
  x.complete(done_with(wave[0], 0));
  while (!x.finished() && steps++ < 20) {
    wave = x.release();
    BOOST_TEST_REQUIRE(!wave.empty());
    for (const RunTask& t : wave) x.complete(done_with(t, 0));
  }
  BOOST_TEST(x.finished());
}

BOOST_FIXTURE_TEST_CASE(a_task_finished_twice_or_unreleased_is_an_error, Fixture) {
  StepExecution x(graph, plan, enc_head_schedule(0), std::make_shared<StepData>(), 0);
  auto wave = x.release();
  TaskDone early;
  early.task = 2;  // not released yet
  BOOST_CHECK_THROW(x.complete(early), std::logic_error);
  x.complete(done_with(wave[0], 0));
  BOOST_CHECK_THROW(x.complete(done_with(wave[0], 0)), std::logic_error);
  TaskDone stranger;
  stranger.task = 99;
  BOOST_CHECK_THROW(x.complete(stranger), std::logic_error);
}
