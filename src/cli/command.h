// The commands of maestro-run. main.cpp parses the command line into
// CliOptions, loads the Program and RuntimeConfig, and runs the command the
// flags select. Each command lives in its own file in src/cli/ and registers
// itself by name (static registration: these files are compiled into the
// executable, never into a library, so the registration is never dropped).
//
// Command names: "check", "print-graph", "print-json", "print-dot",
// "print-plan", "print-schedule", "simulate", "calibrate", "train".
#pragma once

#include <optional>
#include <string>

#include "config/runtime_config.h"
#include "dsl/program.h"

namespace maestro {

struct CliOptions {
  std::string model_path;          // MODEL.sect
  std::string config_path;         // --config
  bool check = false;              // --check
  std::string print;               // --print graph|plan|schedule|json|dot
  bool simulate = false;           // --simulate
  std::string baseline;            // --baseline megatron|sequential|megatron-ideal|mimo|all
  std::string schedule = "wavefront";  // --schedule wavefront|monolithic
  std::optional<int64_t> steps;    // --steps (overrides train.steps, the schedule's length)
  std::optional<int64_t> stop_after;  // --stop-after (train: stop there with a checkpoint)
  std::string resume;              // --resume DIR
  std::string trace;               // --trace FILE (overrides [trace] path)
  bool json = false;               // --json
  bool quiet = false;              // --quiet
  bool repl = false;               // --repl: the debug REPL on this terminal (cli/repl_terminal.h)
  std::string calibrate;           // --calibrate OUT.toml
  bool gpu_selfcheck = true;       // --gpu-selfcheck=on|off (gpu/backend_factory.h)
  std::string gpu_attention = "auto";  // --gpu-attention=auto|tiled|tensorcore|reference (gpu/launch_plan.h)
  bool gpu_resident_handoffs = true;  // --gpu-handoffs=device|host (actors/section_runner.h)
  int64_t processes = 1;           // --processes N (docs/runtime.md, "Processes and hosts")
  std::string listen;              // --listen HOST:PORT: the coordinator waits there for workers started by hand
  std::string worker;              // --worker HOST:PORT: join that coordinator
  std::string coordinator;         // --coordinator HOST:PORT: under mpirun/srun, rank 0 listens there
  int32_t launcher_rank = 0;       // under --coordinator: this worker's rank (OMPI_COMM_WORLD_RANK/SLURM_PROCID)
};

// `maestro-run --worker HOST:PORT` (worker_command.cpp): the exit status.
// `rank` > 0: the launcher's rank, which is the process it joins as.
int run_worker(const std::string& address, int32_t rank = 0);

// Returns the process exit status: 0 ok, 1 runtime failure, 2 invalid input.
using CommandFn = int (*)(const Program&, const RuntimeConfig&, const CliOptions&);

struct CommandRegistration {
  CommandRegistration(const char* name, CommandFn fn);
};

// Prints one error in the one format of maestro-run (docs/cli.md): a message
// that starts with a place, "FILE:LINE:COL: what" (or is already "FILE: error:
// what"), as "FILE:LINE:COL: error: what"; any other as "maestro-run: error:
// what".
void print_error(const std::string& message);

// The command of that name; every command file is compiled into maestro-run,
// so a missing one is a bug (std::logic_error).
CommandFn find_command(const std::string& name);

}  // namespace maestro
