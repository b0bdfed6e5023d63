// The `train` command: a real run of the program on this machine through the
// actor runtime (actors/trainer.h). It shows progress (a bar on a terminal,
// plain lines otherwise, nothing with --quiet), prints a human summary, and
// with --json the training summary of runtime-config.md as the last stdout
// line. Ctrl-C asks the run to checkpoint and stop. The Program is turned
// into what the runtime runs here, once: the CPU runtime's program (tp = 1),
// its SectionGraph, the step inputs and the run's Plan (actors/run_plan.h).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "actors/run_plan.h"
#include "actors/step_inputs.h"
#include "actors/trainer.h"
#include "cli/command.h"
#include "data/manifest.h"

namespace maestro {

namespace {

std::atomic<bool> g_interrupt{false};

extern "C" void on_sigint(int) { g_interrupt.store(true); }

std::string clock_text(double s) {
  const int64_t t = int64_t(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02d}", t / 60, t % 60);
}

void show_progress(const StepProgress& p, bool tty) {
  const int64_t done = p.step + 1 - p.first_step, total = p.last_step - p.first_step;
  const double rate = p.step_s > 0 ? double(p.samples) / p.step_s : 0;
  const double eta = done > 0 ? p.elapsed_s / double(done) * double(total - done) : 0;
  if (tty) {
    const int width = 24, filled = total > 0 ? int(width * done / total) : width;
    std::fprintf(stdout, "\r[%s%s] step %lld/%lld  loss %.4f  %.1f samples/s  ETA %s\033[K",
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
                 (long long)(p.step + 1), (long long)p.last_step, p.loss, rate, clock_text(eta).c_str());
    if (p.step + 1 == p.last_step) std::fputc('\n', stdout);
  } else {
    std::fprintf(stdout, "step %lld/%lld loss %.6f samples/s %.1f eta %s\n", (long long)(p.step + 1),
                 (long long)p.last_step, p.loss, rate, clock_text(eta).c_str());
  }
  std::fflush(stdout);
}

int train_command(const Program& model, const RuntimeConfig& config, const CliOptions& cli) {
  Program program = model;
  if (cli.steps) program.train.steps = *cli.steps;  // --steps: the schedule's length too
  const std::string& checkpoint_dir =
      config.checkpoint.dir.empty() ? program.train.checkpoint_dir : config.checkpoint.dir;
  if (cli.stop_after && checkpoint_dir.empty()) {
    std::fprintf(stderr, "error: --stop-after %lld: no checkpoint folder to stop into: set [checkpoint] dir in the "
                 "config or train.checkpoint in the model\n", (long long)*cli.stop_after);
    return 2;
  }
  BackendChoice backend;
  try {
    backend = choose_backend(config.runtime.backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", config.file.empty() ? "" : (config.file + ": ").c_str(), e.what());
    return 2;
  }
  if (config.transport.kind != "auto" && config.transport.kind != "local") {
    std::fprintf(stderr, "error: transport.kind = \"%s\": a single-process CPU run uses the local transport only\n",
                 config.transport.kind.c_str());
    return 2;
  }
  TrainOptions opt;
  opt.schedule = cli.schedule;
  opt.stop_after = cli.stop_after;
  opt.resume = cli.resume;
  opt.trace_path = cli.trace.empty() ? config.trace.path : cli.trace;
  opt.checkpoint_dir = checkpoint_dir;
  opt.seed = config.runtime.seed;
  opt.threads = config.runtime.threads;
  opt.backend = backend.kind;
  opt.interrupt = &g_interrupt;

  Program runnable;
  SectionGraph graph;
  std::unique_ptr<StepInputs> inputs;
  Plan plan;
  try {
    runnable = cpu_runnable(program);
    graph = build_graph(runnable);
    inputs = std::make_unique<StepInputs>(graph, runnable.data, runnable.train.global_batch);
    plan = plan_cpu_run(graph, cpu_slots(opt.threads), inputs->step(0)->batch);  // sized on step 0, as --print plan
  } catch (const DataError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }

  std::signal(SIGINT, on_sigint);

  const bool tty = isatty(fileno(stdout)) != 0;
  const TrainResult r = train(graph, plan, *inputs, runnable.train, opt, [&](const StepProgress& p) {
    if (!cli.quiet) show_progress(p, tty);
  });
  std::signal(SIGINT, SIG_DFL);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "error: %s\n", r.error.c_str());
    return r.exit_code;
  }
  const double first = r.losses.empty() ? 0 : r.losses.front(), last = r.losses.empty() ? 0 : r.losses.back();
  const double rate = r.wall_s > 0 ? double(r.samples) / r.wall_s : 0;
  if (!cli.quiet) {
    for (const std::string& line : r.plan_lines) std::printf("plan  %s\n", line.c_str());
    std::printf("%s %lld steps (%lld samples) in %.2f s: %.1f samples/s, loss %.4f -> %.4f%s\n",
                r.interrupted ? "interrupted after" : "trained", (long long)r.losses.size(), (long long)r.samples,
                r.wall_s, rate, first, last, r.checkpoint.empty() ? "" : fmt::format(", checkpoint {}", r.checkpoint).c_str());
  }
  if (cli.json) {
    nlohmann::json j = {{"mode", "train"},
                        {"steps", r.losses.size()},
                        {"samples", r.samples},
                        {"wall_s", r.wall_s},
                        {"samples_per_s", rate},
                        {"first_loss", first},
                        {"final_loss", last},
                        {"backend", backend_kind_name(backend.kind)},
                        {"transport", r.transport},
                        {"schedule", cli.schedule},
                        {"sched_share", r.sched_share},
                        {"checkpoint", r.checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.checkpoint)},
                        {"interrupted", r.interrupted},
                        {"losses", r.losses}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

static CommandRegistration reg("train", &train_command);

}  // namespace

}  // namespace maestro
