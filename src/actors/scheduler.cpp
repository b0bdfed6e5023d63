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

#include "actors/actors.h"
#include "actors/step_execution.h"

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
};

using Self = caf::stateful_actor<SchedulerState>;

// Measures a handler's time into sched_s.
struct Busy {
  Self* self;
  Clock::time_point begin = Clock::now();
  ~Busy() { self->state.sched_s += std::chrono::duration<double>(Clock::now() - begin).count(); }
};

void begin_step(Self* self);

void end_run(Self* self, std::string error, bool interrupted = false, bool bad_input = false) {
  auto& st = self->state;
  if (st.ended) return;
  st.ended = true;
  self->send(st.driver, TrainingEnded{st.step, st.last_checkpoint, std::move(error), interrupted, bad_input});
}

void checkpoint_then(Self* self, std::function<void()> next) {
  auto& st = self->state;
  WriteCheckpoint w{st.step, st.samples, st.cfg.losses};
  self->request(st.cfg.checkpointer, caf::infinite, w)
      .then(
          [=](const CheckpointWritten& c) {
            if (!c.error.empty()) return end_run(self, fmt::format("checkpoint after step {}: {}", self->state.step, c.error));
            self->state.last_checkpoint = c.dir;
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
  st.exec.reset();
  ++st.step;
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
    self->request(dest, caf::infinite, std::move(t))
        .then(
            [=](const TaskDone& d) {
              auto& st = self->state;
              if (st.ended || d.step != step) return;
              if (!d.error.empty()) return end_run(self, d.error);
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

void begin_step(Self* self) {
  auto& st = self->state;
  if (st.ended) return;
  if (st.step >= st.last_step) return end_run(self, {});
  if (st.cfg.interrupt && st.cfg.interrupt->load()) {
    // Ctrl-C: keep what was trained (a checkpoint of the steps done), then stop.
    if (st.cfg.checkpointer && st.step > 0 && st.cfg.losses.size() == size_t(st.step) &&
        !st.last_checkpoint.ends_with(fmt::format("step-{:08d}", st.step)))
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
              } catch (const std::exception& e) {
                return end_run(self, fmt::format("step {}: cannot schedule: {}", st.step, e.what()));
              }
            }
            if (st.exec->finished()) return reduce_grads(self);
            dispatch(self);
          },
          [=](caf::error& err) { end_run(self, fmt::format("data loader lost: {}", caf::to_string(err))); });
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
        begin_step(self);
      },
  };
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& sys, SchedulerConfig config) {
  return sys.spawn(scheduler, std::move(config));
}

}  // namespace maestro
