// train(): set up, drive and tear down one training run (see trainer.h).
#include "actors/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "actors/actors.h"
#include "actors/checkpoint.h"
#include "actors/plan_adapter.h"
#include "actors/section_runner.h"
#include "actors/step_inputs.h"
#include "data/manifest.h"
#include "nn/section_model.h"
#include "transport/local_transport.h"

namespace maestro {

namespace {

TrainResult failure(int code, std::string message) {
  TrainResult r;
  r.exit_code = code;
  r.error = std::move(message);
  return r;
}

}  // namespace

TrainResult train(const Program& program, const TrainOptions& options,
                  const std::function<void(const StepProgress&)>& on_step) {
  const uint64_t seed = options.seed.value_or(program.train.seed);
  const int64_t last_step = std::min(options.stop_after.value_or(program.train.steps), program.train.steps);
  const int64_t devices = options.threads > 0 ? options.threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
  if (options.schedule != "wavefront" && options.schedule != "monolithic")
    return failure(2, fmt::format("unknown schedule '{}' (wavefront or monolithic)", options.schedule));
  if (last_step < 0) return failure(2, fmt::format("--stop-after must be >= 0, got {}", last_step));

  // --------------------------------------------------- the data, the plan
  std::unique_ptr<StepInputs> inputs;
  std::vector<SectionRun> runs;
  try {
    inputs = std::make_unique<StepInputs>(program, program.data.seed);
    runs = resolve_section_runs(program, devices, inputs->step(0)->batch);  // auto: sized on step 0, as --print plan
  } catch (const DataError& e) {
    return failure(2, e.what());
  } catch (const std::invalid_argument& e) {
    return failure(2, e.what());
  }

  // ------------------------------------------------------------ the resume
  int64_t first_step = 0;
  std::vector<double> past_losses;
  std::string resume_dir;
  if (!options.resume.empty()) {
    try {
      resume_dir = resolve_checkpoint_dir(options.resume);
      const CheckpointState st = read_checkpoint_state(resume_dir);
      if (st.global_batch != program.train.global_batch)
        return failure(2, fmt::format("--resume {}: the checkpoint has global_batch {}, the model {}", options.resume,
                                      st.global_batch, program.train.global_batch));
      // Every part this run's plan holds (a section, or each of its pipeline stages) must be in the checkpoint.
      for (size_t s = 0; s < program.sections.size(); ++s)
        for (int64_t k = 0; k < runs[s].pp && program.sections[s].mode == Mode::Train; ++k) {
          const std::string part = part_name(program.sections[s].name, int(k), int(runs[s].pp));
          if (std::find(st.sections.begin(), st.sections.end(), part) == st.sections.end())
            return failure(2, fmt::format("--resume {}: the checkpoint has no '{}' (it holds {}): section '{}' must be "
                                          "split into the same pipeline stages (pp) as when it was written",
                                          options.resume, part, fmt::join(st.sections, ", "), program.sections[s].name));
        }
      first_step = st.step;
      past_losses = st.losses;
    } catch (const CheckpointError& e) {
      return failure(2, fmt::format("--resume: {}", e.what()));
    }
  }

  // ---------------------------------------------------------------- models
  LocalTransport transport;
  // One runner per section × pipeline stage × dp replica.
  std::vector<std::vector<std::vector<std::shared_ptr<SectionRunner>>>> runners(program.sections.size());
  for (size_t s = 0; s < program.sections.size(); ++s)
    for (int64_t k = 0; k < runs[s].pp; ++k) {
      runners[s].emplace_back();
      for (int64_t r = 0; r < runs[s].dp; ++r) {
        try {
          auto runner = std::make_shared<SectionRunner>(program, int(s), int(k), int(runs[s].pp), seed, transport,
                                                        int(devices));
          if (!resume_dir.empty() && program.sections[s].mode == Mode::Train)
            runner->load(fmt::format("{}/{}.safetensors", resume_dir, runner->part_name()));
          runners[s][k].push_back(std::move(runner));
        } catch (const std::exception& e) {
          const std::string stage = runs[s].pp > 1 ? fmt::format(", stage {}", k) : "";
          return failure(1, fmt::format("section '{}'{}, replica {}: {}", program.sections[s].name, stage, r, e.what()));
        }
      }
    }

  // ---------------------------------------------------------------- actors
  TrainResult result;
  result.first_step = first_step;
  result.skipped_samples = inputs->skipped_samples();
  for (size_t s = 0; s < program.sections.size(); ++s)
    result.plan_lines.push_back(fmt::format("{}: dp {}, pp {}, micro_batch {}{}", program.sections[s].name, runs[s].dp,
                                            runs[s].pp, runs[s].micro_batch,
                                            program.sections[s].mode == Mode::Frozen ? " (frozen)" : ""));
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", size_t(devices));
  // CAF's default work-stealing workers spin-poll for messages, taking the
  // cores the compute workers need: the sharing policy's workers sleep on a
  // condition variable instead (docs/PERFORMANCE.md §4: 1.36× faster steps).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  std::vector<caf::actor> all;
  caf::actor tracer = spawn_tracer(sys, !options.trace_path.empty());
  all.push_back(tracer);
  SchedulerConfig sc;
  sc.program = &program;
  sc.replicas.resize(program.sections.size());
  for (size_t s = 0; s < program.sections.size(); ++s)
    for (size_t k = 0; k < runners[s].size(); ++k) {
      sc.replicas[s].emplace_back();
      for (size_t r = 0; r < runners[s][k].size(); ++r) {
        const std::shared_ptr<SectionRunner>& runner = runners[s][k][r];
        caf::actor worker = spawn_compute_worker(sys, runner, int(s), int(k), int(r), tracer);
        caf::actor replica =
            spawn_section_replica(sys, worker, fmt::format("{}/{} replica", runner->part_name(), r), tracer);
        sc.replicas[s][k].push_back(replica);
        all.push_back(worker);
        all.push_back(replica);
      }
    }
  runners.clear();  // the workers own them now
  const StepInputs* in = inputs.get();
  sc.loader = spawn_data_loader(sys, [in](int64_t step) { return in->step(step); }, last_step, tracer);
  all.push_back(sc.loader);
  const std::string ckpt_root = options.checkpoint_dir.empty() ? program.train.checkpoint_dir : options.checkpoint_dir;
  if (!ckpt_root.empty()) {
    CheckpointerConfig cc{ckpt_root, {}, {}, {}, seed, program.data.seed, program.train.global_batch, options.schedule};
    for (size_t s = 0; s < program.sections.size(); ++s)
      for (int64_t k = 0; k < runs[s].pp && program.sections[s].mode == Mode::Train; ++k) {
        cc.sections.push_back(int(s));
        cc.names.push_back(part_name(program.sections[s].name, int(k), int(runs[s].pp)));
        cc.replica0.push_back(sc.replicas[s][size_t(k)][0]);
      }
    sc.checkpointer = spawn_checkpointer(sys, std::move(cc), tracer);
    all.push_back(sc.checkpointer);
    // Without `every`, one checkpoint at the end (and on Ctrl-C).
    sc.checkpoint_every = program.train.checkpoint_every > 0 ? program.train.checkpoint_every : last_step;
  }
  std::shared_ptr<const StepPlanner> planner;
  try {
    planner = std::make_shared<const StepPlanner>(program, runs, options.schedule);
  } catch (const std::exception& e) {
    return failure(2, fmt::format("cannot plan the run: {}", e.what()));
  }
  sc.make_graph = [planner](const StepData& d) { return planner->step_graph(d); };
  sc.lr_at = [&program](int64_t step) { return lr_at(program.train, step); };
  sc.grad_clip = program.train.grad_clip;
  sc.tracer = tracer;
  sc.transport = &transport;
  sc.losses = past_losses;
  sc.global_batch = program.train.global_batch;
  sc.interrupt = options.interrupt;
  caf::actor scheduler = spawn_scheduler(sys, sc);
  all.push_back(scheduler);

  const auto begin = std::chrono::steady_clock::now();
  double sched_s = 0, steps_s = 0;
  {
    caf::scoped_actor self{sys};
    self->monitor(scheduler);  // a scheduler that dies unexpectedly ends the run, never hangs it
    self->send(scheduler, StartTraining{first_step, last_step});
    bool done = false;
    while (!done)
      self->receive(
          [&](const StepReport& r) {
            result.losses.push_back(r.loss);
            result.samples += r.samples;
            sched_s += r.sched_s;
            steps_s += r.step_s;
            if (on_step)
              on_step(StepProgress{r.step, first_step, last_step, r.loss, r.samples, r.step_s,
                                   std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count()});
          },
          [&](const TrainingEnded& e) {
            result.steps_done = e.steps_done;
            result.checkpoint = e.checkpoint;
            result.interrupted = e.interrupted;
            if (!e.error.empty()) {
              result.exit_code = 1;
              result.error = e.error;
            }
            done = true;
          },
          [&](const caf::down_msg& down) {
            result.exit_code = 1;
            result.error = fmt::format("the scheduler stopped unexpectedly: {}", caf::to_string(down.reason));
            done = true;
          });
    result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    result.sched_share = steps_s > 0 ? sched_s / steps_s : 0;
    if (!options.trace_path.empty()) {
      self->request(tracer, caf::infinite, FlushTrace{options.trace_path})
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
  // Shutdown: every actor, detached workers included, gets an exit message;
  // ~actor_system then waits for all of them.
  for (const caf::actor& a : all) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return result;
}

}  // namespace maestro
