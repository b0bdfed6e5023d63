// maestro-run: parse the command line (runtime-config.md's synopsis), load the
// runtime config and the program, pick the command the flags select and run
// it. Exit status: 0 ok, 1 runtime failure, 2 invalid input (the .sect, the
// TOML or the command line). Commands write their output in one piece, so a
// failure never leaves partial output behind.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "cli/command.h"
#include "log/log.h"
#include "config/runtime_config.h"
#include "dsl/frontend.h"
#include "dsl/limits.h"

namespace maestro {

namespace {

constexpr const char* kUsage = "usage: maestro-run MODEL.sect [--config FILE.toml] [options]  (see --help)";

// A count flag: digits only, from 1 to `max` (a plain message, not CLI11's
// floating-point range).
CLI::Validator whole_number(int64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 19 &&
                            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || std::stoll(text) < 1 || std::stoll(text) > max)
          return fmt::format("must be a whole number from 1 to {}, not '{}'", max, text);
        return "";
      },
      fmt::format("1..{}", max));
}

// Parses argv into `cli`. Returns an exit status when the process should stop
// here (--help, --version, a bad command line), or -1 to go on.
int parse_command_line(int argc, char** argv, CliOptions& cli) {
  CLI::App app{"Train a compound model described in a .sect file.", "maestro-run"};
  app.footer("Exit status: 0 success, 1 runtime failure, 2 invalid input (the .sect, the TOML or the command line).");
  app.set_version_flag("--version", "maestro-run 0.1.0", "print the version and exit");
  app.add_option("model", cli.model_path, "MODEL.sect: the program to check, print, simulate or train");
  app.add_option("--config", cli.config_path, "runtime configuration TOML (runtime-config.md)");
  auto* check = app.add_flag("--check", cli.check, "parse and validate only; print a one-line summary");
  auto* print = app.add_option("--print", cli.print,
                               "print the section graph, the resource plan, the first iteration's schedule, "
                               "the whole program as JSON, or the graph as Graphviz DOT")
                    ->check(CLI::IsMember({"graph", "plan", "schedule", "json", "dot"}));
  auto* simulate = app.add_flag("--simulate", cli.simulate, "run the plan on the modelled cluster, no training");
  app.add_option("--baseline", cli.baseline,
                 "with --simulate: also simulate a baseline and report the ratio; all: the whole ladder")
      ->check(CLI::IsMember({"megatron", "sequential", "sequential-ideal", "megatron-ideal", "mimo", "all"}))
      ->needs(simulate);
  app.add_option("--schedule", cli.schedule, "how a real run executes a step")
      ->check(CLI::IsMember({"wavefront", "monolithic"}));
  int64_t steps = 0;
  auto* steps_opt = app.add_option("--steps", steps, "override train.steps (the learning-rate schedule's length)")
                        ->check(whole_number(limits::kSteps));
  int64_t stop_after = 0;
  auto* stop_opt = app.add_option("--stop-after", stop_after,
                                  "stop after K steps with a checkpoint; the schedule still runs over train.steps")
                       ->check(whole_number(limits::kSteps));
  app.add_option("--resume", cli.resume, "continue from a checkpoint folder");
  app.add_option("--trace", cli.trace, "write a Chrome trace of the run to FILE");
  auto* repl = app.add_flag("--repl", cli.repl, "open the debug REPL on this terminal while it runs (docs/repl.md)");
  app.add_flag("--json", cli.json, "print a machine-readable summary as the last line of stdout");
  app.add_flag("--quiet", cli.quiet, "no progress bar");
  std::string log_level_name = "warn";
  app.add_option("--log-level", log_level_name,
                 "what the run logs on stderr: error, warn (default), info (checkpoints, steering), debug (every "
                 "step), trace (every task); the REPL's loglevel changes it while the run trains")
      ->check(CLI::IsMember({"error", "warn", "info", "debug", "trace"}));
  std::string gpu_selfcheck = "on";
  app.add_option("--gpu-selfcheck", gpu_selfcheck,
                 "on: the first use of a CUDA device checks the fast kernels against the reference path; off skips it")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--gpu-attention", cli.gpu_attention,
                 "the attention kernels on cuda: auto (by sequence length), tiled (online softmax, CUDA cores), "
                 "tensorcore (bf16 GEMMs), flash (online softmax on the tensor cores, bf16), reference (fp32 cuBLAS, "
                 "what the self-check compares against)")
      ->check(CLI::IsMember({"auto", "tiled", "tensorcore", "flash", "reference"}));
  std::string gpu_handoffs = "device";
  app.add_option("--gpu-handoffs", gpu_handoffs,
                 "device: in a run in one process on cuda, tensors handed between sections stay in GPU memory "
                 "(device to device, peer to peer between GPUs); host: through pinned host memory")
      ->check(CLI::IsMember({"device", "host"}));
  auto* calibrate =
      app.add_option("--calibrate", cli.calibrate, "measure this machine and write a device profile to OUT.toml");
  auto* processes = app.add_option("--processes", cli.processes,
                                   "run over N processes: N-1 local workers spawned (or joining with --listen)")
                        ->check(whole_number(256));
  auto* listen = app.add_option("--listen", cli.listen,
                                "with --processes: wait at HOST:PORT for the workers (maestro-run --worker HOST:PORT) "
                                "instead of spawning them")
                     ->needs(processes);
  auto* worker = app.add_option("--worker", cli.worker, "join the coordinator at HOST:PORT as a worker process");
  auto* coordinator = app.add_option("--coordinator", cli.coordinator,
                                     "under mpirun/srun: rank 0 coordinates at HOST:PORT, the other ranks join it");
  worker->excludes(processes, listen, coordinator, check, print, simulate, calibrate, repl);
  coordinator->excludes(processes, listen);
  check->excludes(print, simulate, calibrate, stop_opt);
  stop_opt->excludes(print, simulate, calibrate);
  print->excludes(simulate, calibrate);
  simulate->excludes(calibrate);
  repl->excludes(check, print, simulate, calibrate);  // a REPL needs a training run
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "maestro-run: error: {}\n{}\n", e.what(), kUsage);
    return 2;
  }
  if (!cli.worker.empty()) return -1;  // a worker gets its model from the coordinator
  if (!cli.coordinator.empty()) {  // mpirun / srun: the rank decides the role
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = std::getenv("SLURM_PROCID");
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = std::getenv("SLURM_NTASKS");
    if (!rank || !size) {
      fmt::print(stderr, "maestro-run: error: --coordinator needs the launcher's rank and size in the environment "
                         "(OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE from mpirun, SLURM_PROCID/SLURM_NTASKS from srun)\n");
      return 2;
    }
    std::string r = rank, n = size;
    std::string why = whole_number(256)(n);
    if (!why.empty() || r.empty() || r.find_first_not_of("0123456789") != std::string::npos || r.size() > 3 ||
        std::stoll(r) >= std::stoll(n)) {
      fmt::print(stderr, "maestro-run: error: --coordinator: rank '{}' of size '{}' from the environment is not valid\n", r, n);
      return 2;
    }
    if (std::stoll(r) > 0) {
      cli.worker = cli.coordinator;
      cli.launcher_rank = int32_t(std::stoll(r));
      return -1;
    }
    cli.processes = std::stoll(n);
    cli.listen = cli.coordinator;
  }
  if (cli.model_path.empty() && cli.calibrate.empty()) {
    fmt::print(stderr, "maestro-run: error: a model file is required\n{}\n", kUsage);
    return 2;
  }
  cli.gpu_selfcheck = gpu_selfcheck == "on";
  cli.gpu_resident_handoffs = gpu_handoffs == "device";
  set_log_level(*parse_log_level(log_level_name));
  if (*steps_opt) cli.steps = steps;
  if (*stop_opt) cli.stop_after = stop_after;
  return -1;
}

std::string command_name(const CliOptions& cli) {
  if (cli.check) return "check";
  if (!cli.print.empty()) return "print-" + cli.print;
  if (cli.simulate) return "simulate";
  if (!cli.calibrate.empty()) return "calibrate";
  return "train";
}

int run(int argc, char** argv) {
  CliOptions cli;
  if (const int status = parse_command_line(argc, argv, cli); status >= 0) return status;
  if (!cli.worker.empty()) return run_worker(cli.worker, cli.launcher_rank);

  RuntimeConfig config;
  try {
    config = load_runtime_config(cli.config_path);
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }

  Program program;
  if (!cli.model_path.empty()) {
    Diagnostics diags;
    std::optional<Program> loaded = load_program(cli.model_path, diags);
    if (!loaded) {
      diags.render(std::cerr);
      if (diags.ok()) fmt::print(stderr, "{}: error: the program could not be loaded\n", cli.model_path);
      return 2;
    }
    program = std::move(*loaded);
  }
  // The TOML's switch wins over the .sect's adamw(shard: ...), for every command.
  if (config.runtime.shard_optimizer) program.train.optimizer.shard = *config.runtime.shard_optimizer;

  return find_command(command_name(cli))(program, config, cli);
}

}  // namespace

}  // namespace maestro

#if defined(MAESTRO_ASAN)  // CMakeLists.txt, MAESTRO_SANITIZE=asan (gcc or clang)
// Under ASan (CI's second stage), LeakSanitizer checks every maestro-run at
// exit. CAF 0.17's middleman leaves hidden helper actors (and the BASP
// broker they hold) alive past the actor system when a run spans processes,
// so a multi-process run sometimes ends with "indirect leaks" that are all
// allocations made inside CAF's libraries: those are suppressed here, in
// maestro-run only. The unit tests link no suppression, so leaks in our own
// actor code are still reported there (docs/runtime.md, "Checking with
// ASan").
extern "C" const char* __lsan_default_suppressions() { return "leak:libcaf_core.so\nleak:libcaf_io.so\n"; }
extern "C" const char* __lsan_default_options() { return "print_suppressions=0"; }  // a clean exit prints nothing
#endif
#if defined(MAESTRO_UBSAN_SUPPRESSIONS)
// UBSan's vptr check fires on CAF's sentinel-node casts (tests/support/ubsan.supp).
extern "C" const char* __ubsan_default_options() { return "suppressions=" MAESTRO_UBSAN_SUPPRESSIONS; }
#endif

int main(int argc, char** argv) {
  try {
    return maestro::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "maestro-run: error: {}\n", e.what());
    return 1;
  } catch (...) {
    fmt::print(stderr, "maestro-run: error: unknown failure\n");
    return 1;
  }
}
