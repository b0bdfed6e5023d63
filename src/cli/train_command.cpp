// The `train` command: a real run of the program on this machine through the
// actor runtime (actors/trainer.h). It shows progress (a bar on a terminal,
// plain lines otherwise, nothing with --quiet), prints a human summary, and
// with --json the training summary of runtime-config.md as the last stdout
// line. The Program is turned into what the runtime runs here, once: the
// CPU runtime's program (tp = 1), its SectionGraph, the step inputs and the
// run's Plan (actors/run_plan.h). It holds the checkpoint folder's lock for
// the run; SIGINT, SIGTERM and SIGHUP ask the run to checkpoint and stop
// (docs/cli.md, "Signals").
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <csignal>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "actors/checkpoint.h"
#include "actors/run_plan.h"
#include "actors/step_inputs.h"
#include "actors/trainer.h"
#include "cli/command.h"
#include "cli/repl_service.h"
#include "cli/repl_terminal.h"
#include "data/manifest.h"
#include "gpu/device_query.h"
#include "gpu/nccl_layout.h"
#include "log/log.h"

namespace maestro {

namespace {

// SIGINT, SIGTERM, SIGHUP: the first asks the run to checkpoint and stop
// (exit 128 + that signal); a second one of any kind ends the process at
// once (exit 128 + it), leaving the last committed checkpoint intact.
std::atomic<bool> g_interrupt{false};
volatile std::sig_atomic_t g_signal = 0;
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) ::_exit(128 + sig);
  g_signal = sig;
  g_interrupt.store(true);
}

void set_stop_handlers(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : kStopSignals) ::sigaction(sig, &sa, nullptr);
}

// The GPUs a run in one process on cuda is planned on: every GPU here, as
// the device table's row for device 0's name with device 0's memory (a
// machine's GPUs are taken to be alike). None for a GPU the table does not
// know (said in a log line): the run is then planned on one slot.
std::optional<Cluster> run_gpus() {
  const int count = cuda_device_count().value_or(0);
  const std::optional<CudaDeviceInfo> info = count > 0 ? cuda_device_info(0) : std::nullopt;
  if (!info) return std::nullopt;
  const DeviceSpec* row = builtin_device_for_gpu(info->name);
  if (!row) {
    log(LogLevel::Warn, "the GPU '{}' is not in the planner's device table (h100, h200, a100): the run is planned on "
        "one slot, as on a CPU, so every auto dp is 1 and every section shares GPU 0", info->name);
    return std::nullopt;
  }
  DeviceSpec spec = *row;
  spec.memory_bytes = info->memory_bytes;
  return gpu_cluster(spec, count);
}

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
    std::fprintf(stderr, "maestro-run: error: --stop-after %lld: no checkpoint folder to stop into: set [checkpoint] dir in the "
                 "config or train.checkpoint in the model\n", (long long)*cli.stop_after);
    return 2;
  }
  BackendChoice backend;
  const AttentionPath attention = *parse_attention_path(cli.gpu_attention);  // checked by the CLI
  set_gpu_settings({cli.gpu_selfcheck, program.train.precision == Precision::BF16, false, attention});
  try {
    backend = choose_backend(config.runtime.backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "maestro-run: error: %s%s\n", config.file.empty() ? "" : (config.file + ": ").c_str(), e.what());
    return 2;
  }
  if (cli.processes <= 1 && config.transport.kind != "auto" && config.transport.kind != "local") {
    std::fprintf(stderr, "maestro-run: error: transport.kind = \"%s\": a single-process CPU run uses the local transport only\n",
                 config.transport.kind.c_str());
    return 2;
  }
  if (cli.processes > 1 && config.transport.kind == "local") {
    std::fprintf(stderr, "maestro-run: error: --processes %lld: transport.kind = \"local\" cannot reach other processes "
                 "(use \"auto\" or \"ucx\")\n", (long long)cli.processes);
    return 2;
  }
  set_stop_handlers(on_stop_signal);  // from here on, a signal stops the run cleanly
  // One run per checkpoint folder; what dead runs left there is cleaned.
  std::optional<CheckpointDirLock> lock;
  if (!checkpoint_dir.empty()) {
    try {
      lock.emplace(checkpoint_dir);
    } catch (const CheckpointBusy& e) {
      std::fprintf(stderr, "maestro-run: error: %s\n", e.what());
      return 2;
    } catch (const CheckpointError& e) {
      std::fprintf(stderr, "maestro-run: error: %s\n", e.what());
      return 1;
    }
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
  opt.resident_handoffs = cli.gpu_resident_handoffs;
  opt.checkpoint_keep = config.checkpoint.keep;
  opt.interrupt = &g_interrupt;
  if (cli.processes > 1) {  // the coordinator of a run over processes (actors/processes.h)
    opt.processes.processes = int(cli.processes);
    opt.processes.spawn = cli.listen.empty();
    if (!cli.listen.empty()) opt.processes.listen = cli.listen;
    RunSpec& spec = opt.processes.spec;
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(cli.model_path, ec);
    spec.model_path = ec ? cli.model_path : abs.string();
    std::ifstream in(cli.model_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    spec.model_source = text.str();
    spec.steps = cli.steps.value_or(-1);
    spec.shard = program.train.optimizer.shard;
    spec.schedule = cli.schedule;
    spec.stop_after = cli.stop_after.value_or(-1);
    spec.resume = cli.resume;
    spec.seed = config.runtime.seed.value_or(program.train.seed);
    spec.backend = backend_kind_name(backend.kind);  // the coordinator's choice is every worker's
    spec.gpu_selfcheck = cli.gpu_selfcheck;
    spec.gpu_attention = cli.gpu_attention;
    spec.threads = config.runtime.threads;
    spec.quiet = cli.quiet;
  }

  Program runnable;
  SectionGraph graph;
  std::unique_ptr<StepInputs> inputs;
  Plan plan;
  try {
    runnable = cpu_runnable(program);
    graph = build_graph(runnable);
    inputs = std::make_unique<StepInputs>(graph, runnable.data, runnable.train.global_batch);
    if (backend.kind == BackendKind::Cuda && config.cluster.device == "cpu")
      throw std::invalid_argument(fmt::format("{}: [cluster] device = \"cpu\" plans a CPU run; the backend is cuda",
                                              config.file));
    // In one process on cuda the planner places the sections on this
    // machine's GPUs; over processes (or on a GPU it has no figures for)
    // every section replica is one GPU stream of one slot, so `auto`
    // resolves to dp = 1 (see below).
    if (backend.kind == BackendKind::Cuda && cli.processes == 1) opt.gpus = run_gpus();
    if (opt.gpus) {
      plan = plan_gpu_run(graph, *opt.gpus, config.runtime.threads, inputs->step(0)->batch);  // sized on step 0
    } else {
      const int64_t slots = backend.kind == BackendKind::Cuda ? 1 : cpu_slots(opt.threads);
      RunPlan run = plan_run(graph, config, slots, cli.processes, inputs->step(0)->batch);  // sized on step 0
      plan = run.plan;
      opt.cluster = run.cluster;
    }
    opt.processes.spec.plan = plan;  // the workers run the same plan
    if (backend.kind == BackendKind::Cuda) {  // dp, tp > 1 talk over NCCL, one GPU per rank of a group
      std::vector<std::string> names;
      for (const auto& node : graph.nodes) names.push_back(node.name);
      // Over processes, each process checks the dp groups it holds whole
      // (actors/run_setup.cpp); the rest reduce over the transfer engine.
      const std::string refusal = cli.processes > 1
                                      ? nccl_tp_refusal(plan, names)
                                      : nccl_refusal(plan, names, cuda_device_count().value_or(0), nccl_built());
      if (!refusal.empty()) throw std::invalid_argument(refusal);
      // Before any backend is made: a split section's kernels join the self-check.
      const bool split = std::any_of(plan.sections.begin(), plan.sections.end(), [](const SectionPlan& s) { return s.tp > 1; });
      set_gpu_settings({cli.gpu_selfcheck, program.train.precision == Precision::BF16, split, attention});
      if (const std::string refusal = gpu_attention_refusal(attention, program); !refusal.empty())
        throw std::invalid_argument(refusal);
    }
  } catch (const DataError& e) {
    print_error(e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    print_error(e.what());
    return 2;
  }

  opt.on_plan = [&](const std::vector<std::string>& lines) {  // before training starts
    if (cli.quiet) return;
    for (const std::string& line : lines) std::printf("plan  %s\n", line.c_str());
    std::fflush(stdout);
  };
  const bool tty = isatty(fileno(stdout)) != 0;
  std::optional<ReplService> service;
  if (!config.repl.listen.empty()) {
    try {
      service.emplace(config.repl.listen, config.repl.token_file, checkpoint_dir);
    } catch (const ReplServiceError& e) {
      std::fprintf(stderr, "maestro-run: error: %s\n", e.what());
      return e.exit_code;
    }
    opt.repl.push_back(service->front_end());
    if (!cli.quiet) std::printf("repl  listening on %s, token in %s\n", config.repl.listen.c_str(), service->token_file().c_str());
  }
  std::optional<TerminalRepl> repl;
  if (cli.repl) {
    std::vector<std::string> names;
    for (const SectionNode& n : graph.nodes) names.push_back(n.name);
    repl.emplace(std::move(names), &g_interrupt);
    opt.repl.push_back(repl->front_end());
  }
  const TrainResult r = train(graph, plan, *inputs, runnable.train, opt, [&](const StepProgress& p) {
    if (cli.quiet) return;
    if (repl)
      repl->progress(fmt::format("step {}/{} loss {:.4f}", p.step + 1, p.last_step, p.loss));
    else
      show_progress(p, tty);
  });
  set_stop_handlers(SIG_DFL);
  if (r.exit_code != 0) {
    print_error(r.error);
    return r.exit_code;
  }
  const double first = r.losses.empty() ? 0 : r.losses.front(), last = r.losses.empty() ? 0 : r.losses.back();
  const double rate = r.wall_s > 0 ? double(r.samples) / r.wall_s : 0;
  if (!cli.quiet) {
    if (!r.skipped_samples.empty())
      std::printf("data  skipped %zu bad manifest line(s), the first: %s\n", r.skipped_samples.size(),
                  r.skipped_samples.front().c_str());
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
                        {"skipped_samples", r.skipped_samples.size()},
                        {"tp_all_reduce_bytes", r.tp_all_reduce_bytes},
                        {"tensor_puts", r.tensor_puts},
                        {"tensor_bytes_put", r.tensor_bytes_put},
                        {"losses", r.losses}};
    for (const TrainResult::OptimizerMemory& m : r.optimizer_memory)
      j["optimizer_state"][m.part] = {{"dp", m.dp}, {"sharded", m.sharded}, {"bytes_per_replica", m.bytes_per_replica},
                                      {"unsharded_bytes", m.unsharded_bytes}};
    std::printf("%s\n", j.dump().c_str());
  }
  return g_signal != 0 ? 128 + int(g_signal) : 0;
}

static CommandRegistration reg("train", &train_command);

}  // namespace

}  // namespace maestro
