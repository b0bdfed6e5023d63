// Driving a spawned run to its end (train_phases.h): the driver is a
// scoped_actor that starts the scheduler, turns each StepReport into
// progress, and ends on TrainingEnded or on the scheduler's death (it
// monitors it, so a crash ends the run instead of hanging it). Then every
// actor gets an exit message; ~actor_system waits for them.
#include <fmt/format.h>

#include <chrono>

#include "actors/actors.h"
#include "actors/repl.h"
#include "actors/train_phases.h"

namespace maestro {

void drive_run(caf::actor_system& sys, const RunActors& actors, const RunSetup& setup, const TrainOptions& options,
               const std::function<void(const StepProgress&)>& on_step, TrainResult& result) {
  const auto begin = std::chrono::steady_clock::now();
  double sched_s = 0, steps_s = 0;
  {
    caf::scoped_actor self{sys};
    self->monitor(actors.scheduler);
    for (const auto& w : actors.watched) self->monitor(w.first);
    self->send(actors.scheduler, StartTraining{setup.first_step, setup.last_step});
    if (actors.repl) {
      const caf::actor repl = actors.repl;
      caf::actor_system* s = &sys;
      for (const ReplFrontEnd& f : options.repl)
        f.start([s, repl](const std::string& line) { return ask_repl(*s, repl, line); });
    }
    bool done = false;
    while (!done)
      self->receive(
          [&](const StepReport& r) {
            result.losses.push_back(r.loss);
            result.samples += r.samples;
            sched_s += r.sched_s;
            steps_s += r.step_s;
            if (on_step)
              on_step(StepProgress{r.step, setup.first_step, setup.last_step, r.loss, r.samples, r.step_s,
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count()});
          },
          [&](const TrainingEnded& e) {
            result.steps_done = e.steps_done;
            result.checkpoint = e.checkpoint;
            result.interrupted = e.interrupted;
            if (!e.error.empty()) {
              result.exit_code = e.bad_input ? 2 : 1;
              result.error = e.error;
            }
            done = true;
          },
          [&](const caf::down_msg& down) {
            result.exit_code = 1;
            result.error = fmt::format("the scheduler stopped unexpectedly: {}", caf::to_string(down.reason));
            for (const auto& w : actors.watched)  // a worker process died or stopped answering
              if (down.source == w.first.address())
                result.error = fmt::format("{} was lost mid-run: {}", w.second, sys.render(down.reason));
            done = true;
          });
    if (actors.repl)
      for (const ReplFrontEnd& f : options.repl) f.stop();
    result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    result.sched_share = steps_s > 0 ? sched_s / steps_s : 0;
    if (!options.trace_path.empty()) {
      self->request(actors.tracer, caf::infinite, FlushTrace{options.trace_path})
          .receive(
              [&](const std::string& err) {
                if (!err.empty() && result.exit_code == 0) {
                  result.exit_code = 1;
                  result.error = err;
                }
              },
              [&](caf::error&) {});
    }
  }
  // A worker still waiting in a collective for a peer (the run ended on
  // another replica's error) is released; every actor, detached workers
  // included, gets an exit message.
  for (const auto& group : setup.dp_groups) group->abort("the run ended");
  for (const caf::actor& a : actors.all) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

}  // namespace maestro
