// StepExecution alone: the dependencies it adds, the frontier it releases,
// the routing of output handles, and the in-flight cap that yields rather
// than stalls.
#include <boost/test/unit_test.hpp>

#include "actors/step_execution.h"

using namespace maestro;

namespace {

Program enc_head() {
  Program p;
  Section enc, head;
  enc.name = "enc";
  head.name = "head";
  p.sections = {enc, head};
  p.flows = {Flow{"enc", "head", FlowKind::Activations, {}}};
  return p;
}

StepGraph graph(const Program& p, int64_t cap) {
  StepGraph g;
  g.in_flight_cap = cap;
  auto add = [&](int sec, TaskKind k, int64_t mb, std::vector<int32_t> s) {
    g.tasks.push_back(StepTask{int64_t(g.tasks.size()), sec, 0, k, mb, std::move(s), {}});
  };
  add(0, TaskKind::Forward, 0, {0, 1});   // 0
  add(0, TaskKind::Forward, 1, {2, 3});   // 1
  add(1, TaskKind::Forward, 0, {1, 2});   // 2
  add(1, TaskKind::Forward, 1, {0, 3});   // 3
  add(1, TaskKind::Backward, 1, {0, 3});  // 4
  add(1, TaskKind::Backward, 0, {1, 2});  // 5
  add(0, TaskKind::Backward, 0, {0, 1});  // 6
  add(0, TaskKind::Backward, 1, {2, 3});  // 7
  add_data_dependencies(p, g);
  return g;
}

TaskDone done_with(const RunTask& t, int32_t flow) {
  TaskDone d;
  d.task = t.task.id;
  for (int32_t s : t.task.samples) {
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

}  // namespace

BOOST_AUTO_TEST_CASE(data_dependencies) {
  const Program p = enc_head();
  const StepGraph g = graph(p, 0);
  BOOST_TEST(g.tasks[2].deps == (std::vector<int64_t>{0, 1}));  // head mb 0 reads samples of both enc mbs
  BOOST_TEST(g.tasks[4].deps == (std::vector<int64_t>{3}));     // its own forward
  BOOST_TEST(g.tasks[5].deps == (std::vector<int64_t>{2, 4}));  // own forward, previous backward of the replica
  BOOST_TEST(g.tasks[6].deps == (std::vector<int64_t>{0, 4, 5}));
  BOOST_TEST(g.tasks[7].deps == (std::vector<int64_t>{1, 4, 5, 6}));
}

BOOST_AUTO_TEST_CASE(frontier_and_routing) {
  const Program p = enc_head();
  auto data = std::make_shared<StepData>();
  StepExecution x(p, graph(p, 0), data, 0);
  auto wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{0, 1}));
  x.complete(done_with(wave[1], 0));
  BOOST_TEST(x.release().empty());
  x.complete(done_with(wave[0], 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{2, 3}));
  // head mb 1 reads sample 0 (from enc task 0) and 3 (from enc task 1), in its own order.
  BOOST_TEST_REQUIRE(wave[1].inputs.size() == 2u);
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

BOOST_AUTO_TEST_CASE(in_flight_cap_holds_forwards_but_never_stalls) {
  // The plan's Frontier: with cap 1, head (the window section: nothing reads
  // it) admits one micro-batch at a time; enc, which feeds it, runs ahead.
  const Program p = enc_head();
  StepExecution x(p, graph(p, 1), std::make_shared<StepData>(), 0);
  auto wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{0, 1}));  // both enc mbs feed head mb 0
  for (const RunTask& t : wave) x.complete(done_with(t, 0));
  wave = x.release();
  BOOST_TEST(ids(wave) == (std::vector<int64_t>{2}));  // head mb 1's forward (3) held by the cap
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

BOOST_AUTO_TEST_CASE(a_task_finished_twice_or_unreleased_is_an_error) {
  const Program p = enc_head();
  StepExecution x(p, graph(p, 0), std::make_shared<StepData>(), 0);
  auto wave = x.release();
  TaskDone early;
  early.task = 2;  // not released yet
  BOOST_CHECK_THROW(x.complete(early), std::logic_error);
  x.complete(done_with(wave[0], 0));
  BOOST_CHECK_THROW(x.complete(done_with(wave[0], 0)), std::logic_error);
}
