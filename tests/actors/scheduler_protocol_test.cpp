// The scheduler's step protocol, end to end through real actors (scheduler,
// replicas, detached workers, data loader, checkpointer, tracer), with a
// two-section model small enough to solve by hand: enc (one weight a) feeds
// head (one weight b, dp = 2); loss = sum_i b * a * x_i / N. The test
// workers sleep a random time per task, so completions arrive in a
// different order on every run: the losses must not change by a bit, and
// must equal the closed form. Also: a failing task ends the run with a
// message naming section, replica and step, and every actor shuts down.
#define BOOST_TEST_MODULE actors
#include <boost/test/unit_test.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "actors/actors.h"
#include "actors/checkpoint.h"
#include "actors/step_execution.h"
#include "plan/backward_order.h"
#include "transport/collectives.h"

using namespace maestro;

namespace {

Program two_section_program() {
  Program p;
  Section enc, head;
  enc.name = "enc";
  head.name = "head";
  head.loss = {LossTerm{}};
  enc.model = head.model = {"mlp", MlpSpec{4, 4, 4}};  // the graph counts parameters; the test never runs them
  p.sections = {enc, head};
  p.flows = {Flow{"enc", "head", FlowKind::Activations, {}}};
  p.train.global_batch = 8;
  return p;
}

// The test double of a compute worker: scalar weight w, gradient g, the
// step's losses kept until ReduceGrads, which all-reduces g over the
// section's replicas through their communicator (null: one replica).
struct LinearState {
  float w = 0, g = 0;
  std::map<int64_t, std::vector<float>> saved;  // mb -> inputs kept for backward
  std::vector<TaskLoss> losses;
};

caf::behavior linear_worker(caf::stateful_actor<LinearState>* self, int section, int replica, float w0,
                            int fail_at_step, unsigned seed, std::shared_ptr<Communicator> dp_group) {
  self->state.w = w0;
  auto rng = std::make_shared<std::mt19937>(seed);
  return {
      [=](const RunTask& t) -> TaskDone {
        std::this_thread::sleep_for(std::chrono::microseconds((*rng)() % 1500));
        auto& st = self->state;
        TaskDone d;
        d.step = t.step;
        d.task = t.task.id;
        if (t.step == fail_at_step && t.task.kind == Task::Kind::Backward) {
          d.error = fmt::format("section '{}', replica {}, step {}: backward failed: injected", section == 0 ? "enc" : "head",
                                replica, t.step);
          return d;
        }
        const float n = float(t.data->batch.samples.size());
        if (t.task.kind == Task::Kind::Forward) {
          if (section == 0) {
            for (int32_t i : t.samples) {
              TensorRef r;
              r = TensorRef::of({st.w * 0.1f * float(i + 1)});
              r.shape = {1};
              d.outputs.push_back({0, i, r});
            }
          } else {
            std::vector<float> xs;
            TaskLoss loss{t.task.id, 0.0};
            for (const FlowTensor& in : t.inputs) {
              xs.push_back(in.tensor.values()[0]);
              loss.loss += double(st.w * in.tensor.values()[0] / n);
            }
            st.losses.push_back(loss);
            st.saved[t.task.micro_batch] = xs;
          }
        } else if (section == 1) {
          const auto& xs = st.saved[t.task.micro_batch];
          for (size_t k = 0; k < xs.size(); ++k) {
            st.g += xs[k] / n;
            TensorRef r;
            r = TensorRef::of({st.w / n});
            r.shape = {1};
            d.outputs.push_back({0, t.samples[k], r});
          }
        } else {
          for (const FlowTensor& in : t.inputs) st.g += in.tensor.values()[0] * 0.1f * float(in.sample + 1);
        }
        return d;
      },
      [=](const ReduceGrads&) -> GradsReduced {
        auto& st = self->state;
        if (dp_group) dp_group->all_reduce(&st.g, 1);
        GradsReduced out{section, 0, replica, double(st.g) * st.g, std::move(st.losses), {}};
        st.losses.clear();
        return out;
      },
      [=](const ApplyGrads& a) -> Applied {
        self->state.w -= float(a.lr * a.scale) * self->state.g;
        self->state.g = 0;
        return Applied{section, 0, replica, {}};
      },
      [=](const SaveSection& s) -> Saved {
        std::ofstream(s.path) << self->state.w << "\n";
        return Saved{section, {}};
      },
  };
}

// enc: 2 micro-batches on 1 replica; head: 2 replicas, 2 micro-batches each,
// samples interleaved so that every head micro-batch needs both enc ones.
// Dependencies by hand from plan/schedule.h's rules, then each replica's
// backwards chained (plan/backward_order.h), as the runtime runs them.
Plan two_section_plan() {
  Plan plan;
  plan.sections = {SectionPlan{0, 1, 1, 1, 1, 4}, SectionPlan{0, 2, 1, 1, 2, 2}};
  return plan;
}

Schedule two_section_schedule() {
  Schedule sch;
  sch.batch.samples.resize(8);
  sch.sections.resize(2);
  sch.sections[0] = {{{0, 0, {0, 1, 2, 3}}, {1, 0, {4, 5, 6, 7}}}, true};
  sch.sections[1] = {{{0, 0, {0, 5}}, {1, 1, {1, 4}}, {2, 0, {2, 7}}, {3, 1, {3, 6}}}, true};
  auto add = [&](int sec, Task::Kind k, int64_t mb, std::vector<int64_t> deps) {
    sch.tasks.push_back(
        Task{int64_t(sch.tasks.size()), sec, sch.sections[size_t(sec)].micro_batches[size_t(mb)].replica, 0, k, mb, deps});
  };
  add(0, Task::Kind::Forward, 0, {});
  add(0, Task::Kind::Forward, 1, {});
  for (int64_t mb = 0; mb < 4; ++mb) add(1, Task::Kind::Forward, mb, {0, 1});  // 2..5
  for (int64_t mb = 3; mb >= 0; --mb) add(1, Task::Kind::Backward, mb, {2 + mb});  // 6..9
  add(0, Task::Kind::Backward, 1, {1, 6, 7, 8, 9});
  add(0, Task::Kind::Backward, 0, {0, 6, 7, 8, 9});
  sch.waves = compute_waves(sch.tasks);
  chain_replica_backwards(sch);
  return sch;
}

struct RunOutcome {
  std::vector<double> losses;
  TrainingEnded end;
};

RunOutcome run_two_sections(unsigned seed, int steps, int fail_at_step = -1, std::string ckpt_root = {}) {
  static const Program program = two_section_program();
  static const SectionGraph graph = build_graph(program);
  static const Plan plan = two_section_plan();
  static const Schedule schedule = two_section_schedule();
  RunOutcome out;
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  std::vector<caf::actor> all;
  const auto head_group = make_local_group(2);
  caf::actor tracer = spawn_tracer(sys, true);
  std::vector<std::vector<caf::actor>> replicas(2);
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < (s == 0 ? 1 : 2); ++r) {
      caf::actor w = sys.spawn<caf::detached>(linear_worker, s, r, s == 0 ? 1.0f : 0.5f, fail_at_step,
                                              seed * 7 + unsigned(s * 2 + r),
                                              s == 1 ? head_group[size_t(r)] : std::shared_ptr<Communicator>());
      caf::actor rep = spawn_section_replica(sys, {w}, fmt::format("{}/{}", s, r), tracer);
      replicas[s].push_back(rep);
      all.push_back(w);
      all.push_back(rep);
    }
  caf::actor loader = spawn_data_loader(
      sys,
      [](int64_t step) {
        auto d = std::make_shared<StepData>();
        d->batch.step = step;
        d->batch.samples.resize(8);
        return std::shared_ptr<const StepData>(d);
      },
      steps, tracer);
  caf::actor checkpointer;
  if (!ckpt_root.empty())
    checkpointer = spawn_checkpointer(sys, CheckpointerConfig{ckpt_root, {0, 1}, {"enc", "head"},
                                                              {replicas[0][0], replicas[1][0]}, 1, 2, 8, "wavefront", 0, {}},
                                      tracer);
  SchedulerConfig sc;
  sc.graph = &graph;
  sc.plan = &plan;
  sc.schedule_of = [](const Batch&) { return schedule; };
  sc.lr_at = [](int64_t step) { return 0.1 / double(step + 1); };
  sc.grad_clip = 0;
  sc.checkpoint_every = ckpt_root.empty() ? 0 : 2;
  sc.replicas = {{replicas[0]}, {replicas[1]}};  // one pipeline stage each
  sc.loader = loader;
  sc.checkpointer = checkpointer;
  sc.tracer = tracer;
  sc.global_batch = 8;
  caf::actor scheduler = spawn_scheduler(sys, sc);
  all.insert(all.end(), {loader, tracer, scheduler});
  if (checkpointer) all.push_back(checkpointer);
  {
    caf::scoped_actor self{sys};
    self->send(scheduler, StartTraining{0, steps});
    bool done = false;
    while (!done)
      self->receive([&](const StepReport& r) { out.losses.push_back(r.loss); },
                    [&](const TrainingEnded& e) {
                      out.end = e;
                      done = true;
                    },
                    caf::after(std::chrono::seconds(30)) >> [&] {
                      out.end.error = "timeout";
                      done = true;
                    });
  }
  head_group[0]->abort("test over");  // a head worker may wait for its peer after a failure
  for (const caf::actor& a : all) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return out;  // ~actor_system waits for every actor
}

// Closed form in double: a, b per step; x_i = 0.1 (i+1); N = 8.
std::vector<double> closed_form(int steps) {
  double a = 1, b = 0.5, sx = 0;
  for (int i = 0; i < 8; ++i) sx += 0.1 * (i + 1);
  std::vector<double> losses;
  for (int k = 0; k < steps; ++k) {
    losses.push_back(b * a * sx / 8);
    const double ga = b * sx / 8, gb = a * sx / 8, lr = 0.1 / (k + 1);
    // head's gradient is summed over its 2 replicas, each holding half the samples.
    a -= lr * ga;
    b -= lr * gb;
  }
  return losses;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_two_section_schedule_is_valid) {
  const Program program = two_section_program();
  const auto bad = validate(build_graph(program), two_section_plan(), two_section_schedule());
  BOOST_TEST(bad.empty(), (bad.empty() ? "" : bad.front()));
}

BOOST_AUTO_TEST_CASE(losses_match_closed_form_and_ignore_arrival_order) {
  const RunOutcome first = run_two_sections(1, 4);
  BOOST_TEST_REQUIRE(first.end.error == "");
  BOOST_TEST_REQUIRE(first.losses.size() == 4u);
  const std::vector<double> expect = closed_form(4);
  for (int k = 0; k < 4; ++k) BOOST_TEST(std::abs(first.losses[k] - expect[k]) <= 1e-5 * std::abs(expect[k]));
  for (unsigned seed = 2; seed < 5; ++seed) {
    const RunOutcome again = run_two_sections(seed, 4);
    BOOST_TEST_REQUIRE(again.end.error == "");
    for (int k = 0; k < 4; ++k) BOOST_TEST(again.losses[k] == first.losses[k]);  // bitwise
  }
}

BOOST_AUTO_TEST_CASE(a_failing_task_ends_the_run_naming_where) {
  const RunOutcome out = run_two_sections(3, 4, /*fail_at_step=*/1);
  BOOST_TEST(out.losses.size() == 1u);
  BOOST_TEST(out.end.error.find("replica") != std::string::npos);
  BOOST_TEST(out.end.error.find("step 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(checkpoints_are_written_atomically_every_k_steps) {
  const std::string root = (std::filesystem::temp_directory_path() / fmt::format("maestro-ckpt-{}", ::getpid())).string();
  std::filesystem::remove_all(root);
  const RunOutcome out = run_two_sections(4, 3, -1, root);
  BOOST_TEST_REQUIRE(out.end.error == "");
  BOOST_TEST(out.end.checkpoint == root + "/step-00000003");  // every 2 steps and at the end
  BOOST_TEST(std::filesystem::exists(root + "/step-00000002/enc.safetensors"));
  const CheckpointState s = read_checkpoint_state(resolve_checkpoint_dir(root));
  BOOST_TEST(s.step == 3);
  BOOST_TEST(s.samples == 24);
  BOOST_TEST(s.losses.size() == 3u);
  BOOST_TEST(s.losses[2] == out.losses[2]);
  for (const auto& e : std::filesystem::directory_iterator(root))
    BOOST_TEST(e.path().filename().string().rfind(".tmp", 0) != 0);  // no temporary left
  std::filesystem::remove_all(root);
}
