// The scheduler actor (see actors.h): one step at a time, it takes the
// prefetched batch, executes the step's Schedule through a StepExecution and sends
// every ready task to its replica at once; each completion releases the next
// frontier. When every task is done it has every replica reduce its
// gradients with the other replicas of its data-parallel group (through
// their Communicator, in replica order: the scheduler never touches a
// gradient) and report its step's losses and the reduced gradients' norm²;
// from those, the global norm over all sections and one clip coefficient;
// then every train replica takes its AdamW step.
// Then it reports the step and, when due, has the checkpointer write one.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "actors/actors.h"
#include "actors/describe.h"
#include "actors/step_execution.h"
#include "log/log.h"

namespace maestro {

namespace {

using Clock = std::chrono::steady_clock;

struct SchedulerState {
  SchedulerConfig cfg;
  caf::actor driver;
  int64_t step = 0, last_step = 0;
  std::optional<StepExecution> exec;
  Clock::time_point step_begin;
  int64_t step_begin_us = 0;  // the same instant on the trace clock
  double sched_s = 0;   // time spent in this actor's handlers during the step
  int64_t samples = 0;  // samples consumed so far (data position)
  std::string last_checkpoint;
  bool ended = false;
  // end of step
  std::vector<std::vector<std::vector<double>>> sq_norms;  // [section][stage][replica] of train sections
  size_t reduces_pending = 0, applies_pending = 0;
  // steered by the repl (SteerRun): hold before step `hold_at`; checkpoint
  // or quit at the next step boundary
  std::optional<int64_t> hold_at;
  bool held = false, quit = false, checkpointing = false;
  std::vector<caf::response_promise> checkpoint_waiters;
  Clock::time_point run_begin = Clock::now();
  int64_t run_samples = 0;
  int64_t run_tokens = 0, step_tokens = 0;  // text tokens: trained this run; of the step in flight
};

using Self = caf::stateful_actor<SchedulerState>;

// Measures a handler's time into sched_s.
struct Busy {
  Self* self;
  Clock::time_point begin = Clock::now();
  ~Busy() { self->state.sched_s += std::chrono::duration<double>(Clock::now() - begin).count(); }
};

void begin_step(Self* self);

// "forward of 'vision' stage 0 replica 1, micro-batch 3 (task 12)", for the trace log.
std::string task_text(const SectionGraph& g, const Task& t) {
  return fmt::format("{} of '{}' stage {} replica {}, micro-batch {} (task {})",
                     t.kind == Task::Kind::Forward ? "forward" : "backward", g.section(t.section).name, t.stage,
                     t.replica, t.micro_batch, t.id);
}

void end_run(Self* self, std::string error, bool interrupted = false, bool bad_input = false) {
  auto& st = self->state;
  if (st.ended) return;
  st.ended = true;
  for (caf::response_promise& rp : st.checkpoint_waiters) rp.deliver(std::string("error: the run ended first"));
  st.checkpoint_waiters.clear();
  self->send(st.driver, TrainingEnded{st.step, st.last_checkpoint, std::move(error), interrupted, bad_input});
}

void checkpoint_then(Self* self, std::function<void()> next) {
  auto& st = self->state;
  WriteCheckpoint w{st.step, st.samples, st.cfg.losses};
  st.checkpointing = true;
  self->request(st.cfg.checkpointer, caf::infinite, w)
      .then(
          [=](const CheckpointWritten& c) {
            auto& st = self->state;
            st.checkpointing = false;
            for (caf::response_promise& rp : st.checkpoint_waiters)
              rp.deliver(c.error.empty() ? "checkpoint written: " + c.dir : "error: checkpoint failed: " + c.error);
            st.checkpoint_waiters.clear();
            if (!c.error.empty()) return end_run(self, fmt::format("checkpoint after step {}: {}", self->state.step, c.error));
            self->state.last_checkpoint = c.dir;
            log(LogLevel::Info, "checkpoint of steps 0..{} written: {}", self->state.step - 1, c.dir);
            next();
          },
          [=](caf::error& err) { end_run(self, fmt::format("checkpointer lost: {}", caf::to_string(err))); });
}

void finish_step(Self* self) {
  auto& st = self->state;
  const double loss = st.exec->loss();
  const int64_t n = int64_t(st.exec->schedule().tasks.empty() ? 0 : st.cfg.global_batch);
  st.samples += n;
  st.cfg.losses.push_back(loss);
  const double step_s = std::chrono::duration<double>(Clock::now() - st.step_begin).count();
  self->send(st.cfg.tracer, TraceEvent{"scheduler", fmt::format("step {}", st.step), "step", st.step_begin_us,
                                       trace_now_us() - st.step_begin_us});
  self->send(st.driver, StepReport{st.step, loss, n, step_s, st.sched_s});
  log(LogLevel::Debug, "step {} done: loss {:.6f}, {} samples, {:.1f} ms ({:.1f} ms in the scheduler)", st.step, loss, n,
      1e3 * step_s, 1e3 * st.sched_s);
  st.exec.reset();
  ++st.step;
  st.run_samples += n;
  if (n > 0) st.run_tokens += st.step_tokens;
  const bool due = st.cfg.checkpointer && st.cfg.checkpoint_every > 0 &&
                   (st.step % st.cfg.checkpoint_every == 0 || st.step == st.last_step);
  if (due) return checkpoint_then(self, [self] { begin_step(self); });
  begin_step(self);
}

void apply_grads(Self* self) {
  Busy busy{self};
  auto& st = self->state;
  const SectionGraph& g = *st.cfg.graph;
  const double loss = st.exec->loss();
  if (!std::isfinite(loss)) return end_run(self, fmt::format("step {}: the loss is not finite ({})", st.step, loss));
  // The global norm: Σ over train sections and stages (in that order) of
  // their group's norm², which every replica of the group computed from
  // the same reduced gradients.
  double sq = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s)
    for (const std::vector<double>& replicas : st.sq_norms[s]) {
      for (double r : replicas)
        if (r != replicas[0] && !(std::isnan(r) && std::isnan(replicas[0])))
          return end_run(self, fmt::format("step {}: the replicas of section '{}' disagree on the reduced gradients",
                                           st.step, g.section(int(s)).name));
      sq += replicas[0];
    }
  st.sq_norms.clear();
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm)) return end_run(self, fmt::format("step {}: the gradient norm is not finite", st.step));
  // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1.
  const double scale = st.cfg.grad_clip > 0 ? std::min(1.0, st.cfg.grad_clip / (norm + 1e-6)) : 1.0;
  const double lr = st.cfg.lr_at(st.step);
  st.applies_pending = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    if (g.section(int(s)).mode != Mode::Train) continue;
    for (const std::vector<caf::actor>& stage : st.cfg.replicas[s])
      for (const caf::actor& r : stage) {
        ++st.applies_pending;
        self->request(r, caf::infinite, ApplyGrads{st.step, scale, lr})
            .then(
                [=](const Applied& a) {
                  if (!a.error.empty()) return end_run(self, a.error);
                  if (--self->state.applies_pending == 0) finish_step(self);
                },
                [=](caf::error& err) { end_run(self, fmt::format("replica lost: {}", caf::to_string(err))); });
      }
  }
  if (st.applies_pending == 0) finish_step(self);  // nothing trains
}

// Every replica of every section: train ones reduce their gradients, loss
// sections report their forwards' losses.
void reduce_grads(Self* self) {
  auto& st = self->state;
  const SectionGraph& g = *st.cfg.graph;
  st.sq_norms.assign(g.nodes.size(), {});
  st.reduces_pending = 0;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const bool trains = g.section(int(s)).mode == Mode::Train;
    if (trains) st.sq_norms[s].resize(st.cfg.replicas[s].size());
    for (size_t k = 0; k < st.cfg.replicas[s].size(); ++k) {
      if (trains) st.sq_norms[s][k].assign(st.cfg.replicas[s][k].size(), 0.0);
      for (const caf::actor& replica : st.cfg.replicas[s][k]) {
        ++st.reduces_pending;
        self->request(replica, caf::infinite, ReduceGrads{st.step})
            .then(
                [=](const GradsReduced& g) {
                  auto& st = self->state;
                  if (st.ended) return;
                  if (!g.error.empty()) return end_run(self, g.error);
                  try {
                    for (const TaskLoss& l : g.losses) st.exec->set_loss(l.task, l.loss);
                  } catch (const std::exception& e) {
                    return end_run(self, fmt::format("step {}: {}", st.step, e.what()));
                  }
                  if (trains) st.sq_norms.at(size_t(g.section)).at(size_t(g.stage)).at(size_t(g.replica)) = g.grad_sq_norm;
                  if (--st.reduces_pending == 0) apply_grads(self);
                },
                [=](caf::error& err) { end_run(self, fmt::format("replica lost: {}", caf::to_string(err))); });
      }
    }
  }
  if (st.reduces_pending == 0) apply_grads(self);
}

void dispatch(Self* self) {
  Busy busy{self};
  auto& st = self->state;
  for (RunTask& t : st.exec->release()) {
    const caf::actor& dest = st.cfg.replicas.at(t.task.section).at(t.task.stage).at(t.task.replica);
    const int64_t step = st.step;
    if (log_enabled(LogLevel::Trace))
      log(LogLevel::Trace, "step {}: {} dispatched", step, task_text(*st.cfg.graph, t.task));
    self->request(dest, caf::infinite, std::move(t))
        .then(
            [=](const TaskDone& d) {
              auto& st = self->state;
              if (st.ended || d.step != step) return;
              if (!d.error.empty()) return end_run(self, d.error);
              if (log_enabled(LogLevel::Trace))
                log(LogLevel::Trace, "step {}: {} done in {:.3f} ms", step,
                    task_text(*st.cfg.graph, st.exec->schedule().tasks.at(size_t(d.task))), 1e-3 * double(d.duration_us));
              try {
                Busy busy{self};
                st.exec->complete(d);
              } catch (const std::exception& e) {
                return end_run(self, fmt::format("step {}: {}", step, e.what()));
              }
              if (st.exec->finished()) return reduce_grads(self);
              dispatch(self);
            },
            [=](caf::error& err) { end_run(self, fmt::format("replica lost: {}", caf::to_string(err))); });
  }
}

bool checkpoint_is_current(const SchedulerState& st) {
  return st.last_checkpoint.ends_with(fmt::format("step-{:08d}", st.step));
}

void begin_step(Self* self) {
  auto& st = self->state;
  if (st.ended) return;
  // The repl's requests, at this step boundary: a checkpoint, quit, hold.
  if (!st.checkpoint_waiters.empty()) return checkpoint_then(self, [self] { begin_step(self); });
  if (st.quit) {
    if (st.cfg.checkpointer && st.cfg.losses.size() == size_t(st.step) && !checkpoint_is_current(st))
      return checkpoint_then(self, [self] { end_run(self, {}); });
    return end_run(self, {});
  }
  if (st.step >= st.last_step) return end_run(self, {});
  if (st.hold_at && st.step >= *st.hold_at) {
    if (!st.held) log(LogLevel::Info, "paused before step {}", st.step);
    st.held = true;
    return;
  }
  if (st.cfg.interrupt && st.cfg.interrupt->load()) {
    // Ctrl-C: keep what was trained (a checkpoint of the steps done), then stop.
    if (st.cfg.checkpointer && st.step > 0 && st.cfg.losses.size() == size_t(st.step) && !checkpoint_is_current(st))
      return checkpoint_then(self, [self] { end_run(self, {}, true); });
    return end_run(self, {}, true);
  }
  st.step_begin = Clock::now();
  st.step_begin_us = trace_now_us();
  st.sched_s = 0;
  self->request(st.cfg.loader, caf::infinite, GetBatch{st.step})
      .then(
          [=](const BatchReady& b) {
            auto& st = self->state;
            if (!b.error.empty()) return end_run(self, b.error, false, b.bad_input);
            {
              Busy busy{self};
              try {
                st.exec.emplace(*st.cfg.graph, *st.cfg.plan, st.cfg.schedule_of(b.data->batch), b.data, st.step);
                st.step_tokens = 0;
                for (const Sample& s : b.data->batch.samples) st.step_tokens += s.text_tokens;
              } catch (const std::exception& e) {
                return end_run(self, fmt::format("step {}: cannot schedule: {}", st.step, e.what()));
              }
            }
            if (st.exec->finished()) return reduce_grads(self);
            dispatch(self);
          },
          [=](caf::error& err) { end_run(self, fmt::format("data loader lost: {}", caf::to_string(err))); });
}

// Releases a held run.
void unhold(Self* self) {
  auto& st = self->state;
  if (!st.held) return;
  st.held = false;
  begin_step(self);
}

std::string scheduler_state(const SchedulerState& st) {
  if (st.ended) return fmt::format("ended after step {}", st.step);
  if (st.checkpointing) return fmt::format("writing the checkpoint of step {}", st.step);
  if (st.held) return fmt::format("paused before step {}", st.step);
  if (!st.exec) return fmt::format("waiting on the data loader for step {}", st.step);
  return fmt::format("running step {} ({} tasks in flight)", st.step, st.exec->running());
}

ActorInfo describe_scheduler(Self* self) {
  const auto& st = self->state;
  const SectionGraph& g = *st.cfg.graph;
  nlohmann::json wave = nlohmann::json::object();
  if (st.exec) {
    const auto w = st.exec->wave(g.nodes.size());
    for (size_t s = 0; s < w.size(); ++s)
      wave[g.nodes[s].name] = {
          {"done", w[s].done}, {"in_flight", w[s].in_flight}, {"ready", w[s].ready}, {"waiting", w[s].waiting}};
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - st.run_begin).count();
  nlohmann::json d = {{"step", st.step},
                      {"last_step", st.last_step},
                      {"paused", st.held},
                      {"pause_before", st.hold_at ? nlohmann::json(*st.hold_at) : nlohmann::json(nullptr)},
                      {"samples", st.samples},
                      {"samples_per_s", elapsed > 0 ? double(st.run_samples) / elapsed : 0.0},
                      {"tokens_per_s", elapsed > 0 ? double(st.run_tokens) / elapsed : 0.0},
                      {"last_loss", st.cfg.losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.cfg.losses.back())},
                      {"last_checkpoint", st.last_checkpoint},
                      {"wave", wave}};
  return describe_self(self, "scheduler", "scheduler", scheduler_state(st), d.dump());
}

caf::behavior scheduler(Self* self, SchedulerConfig cfg) {
  self->state.cfg = std::move(cfg);
  return {
      [=](const StartTraining& s) {
        auto& st = self->state;
        st.driver = caf::actor_cast<caf::actor>(self->current_sender());
        st.step = s.first_step;
        st.last_step = s.last_step;
        st.samples = s.first_step * st.cfg.global_batch;
        st.run_begin = Clock::now();
        begin_step(self);
      },
      [=](const Describe&) { return describe_scheduler(self); },
      [=](const SteerRun& r) -> caf::result<std::string> {
        auto& st = self->state;
        if (st.ended) return std::string("error: the run has ended");
        const int64_t boundary = st.held ? st.step : st.step + 1;  // the next step boundary
        switch (r.kind) {
          case SteerRun::Pause:
            st.hold_at = boundary;
            return st.held ? fmt::format("paused before step {}", st.step)
                           : fmt::format("pausing before step {}", boundary);
          case SteerRun::Resume:
            st.hold_at.reset();
            unhold(self);
            return fmt::format("running from step {}", st.step);
          case SteerRun::Step: {
            st.hold_at = boundary + r.count;
            const std::string out = fmt::format("running to step {}, then pausing", *st.hold_at);
            unhold(self);
            return out;
          }
          case SteerRun::Checkpoint: {
            if (!st.cfg.checkpointer) return std::string("error: this run has no checkpoint dir");
            auto rp = self->make_response_promise<std::string>();
            st.checkpoint_waiters.push_back(rp);
            if (st.held && !st.checkpointing) checkpoint_then(self, [] {});
            return rp;
          }
          case SteerRun::Quit:
            st.quit = true;
            st.hold_at.reset();
            unhold(self);
            return std::string(st.cfg.checkpointer ? "quitting after a checkpoint at the step boundary"
                                                   : "quitting at the step boundary (no checkpoint dir)");
        }
        return std::string("error: unknown steering request");
      },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, SchedulerConfig config) {
  return sys.spawn(scheduler, std::move(config));
}

}  // namespace maestro
