// train(): the real run on this machine — the entry point the `train`
// command calls with what it made of the Program once: the SectionGraph,
// the run's Plan (run_plan.h), the step inputs (data block) and the train
// block. It sets up one SectionRunner per section × stage × replica, spawns
// the actors (scheduler, replicas and their compute workers, data loader,
// checkpointer, tracer), drives the steps (train_phases.h), and shuts every
// actor down before it returns, on success or not. It never plans.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/step_inputs.h"
#include "dsl/program.h"
#include "gpu/backend_factory.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/plan.h"

namespace maestro {

// A debug REPL front end (src/cli/repl_*): `start` gets, once the run's
// actors exist, a function that executes one command line and returns the
// answer (thread-safe, blocking: call it from the front end's own thread);
// `stop` is called when the run has ended, before its actors stop, and
// must return only once the front end no longer calls `ask`.
struct ReplFrontEnd {
  std::function<void(std::function<std::string(const std::string&)> ask)> start;
  std::function<void()> stop;
};

// What a worker process needs to build the coordinator's run itself
// (actors/processes.h): the model's source and the run options the
// coordinator resolved (its TOML and flags), so both build one graph and plan.
struct RunSpec {
  std::string model_path;    // the coordinator's path (imports and data files resolve from it)
  std::string model_source;  // the .sect text
  int64_t steps = -1;        // --steps, -1 = train.steps
  bool shard = false;        // the resolved adamw(shard: ...) / [runtime] shard_optimizer
  Plan plan;                 // the coordinator's plan: every process runs it (the workers do not plan)
  std::string schedule = "wavefront";
  int64_t stop_after = -1;   // -1 = none
  std::string resume;
  uint64_t seed = 0;         // the resolved seed
  int64_t threads = 0;       // [runtime] threads
  bool quiet = false;        // --quiet: a worker says nothing about its assignment
  std::string backend = "cpu";  // the coordinator's resolved backend (backend_kind_name): the workers run it too
  bool gpu_selfcheck = true;    // --gpu-selfcheck
  std::string gpu_attention = "auto";  // --gpu-attention (attention_path_name)
};

// A run over several processes (actors/processes.h); processes = 1 is one process.
struct ProcessOptions {
  int processes = 1;
  bool spawn = true;                 // spawn processes-1 local workers; else wait for them to join
  std::string listen = "127.0.0.1:0";  // where the coordinator publishes its door (port 0 = any)
  double join_timeout_s = 60;        // how long the coordinator waits for its workers
  RunSpec spec;                      // what the workers get
  // Process i's host ([cluster] hosts of a device = "cpu" cluster): the
  // coordinator must run on hosts[0] and admits a worker as the first free
  // process named for its host; empty = any worker, in arrival order.
  std::vector<std::string> hosts;
};

struct TrainOptions {
  std::string schedule = "wavefront";  // wavefront | monolithic
  std::optional<int64_t> stop_after;   // stop once this many steps are done (the schedule runs over train.steps)
  std::string resume;                  // checkpoint folder (a step folder or a root with `latest`)
  std::string trace_path;              // Chrome trace, "" = none
  std::string checkpoint_dir;          // "" = the program's train.checkpoint.dir
  int64_t checkpoint_keep = 0;         // step folders kept after each checkpoint; 0 = all
  std::optional<uint64_t> seed;        // overrides train.seed
  int64_t threads = 0;                 // CAF scheduler and CPU backend threads; 0 = all cores (cpu_slots)
  BackendKind backend = BackendKind::Cpu;  // every section replica's (gpu/backend_factory.h)
  // --gpu-handoffs=device: in a run in one process on cuda, hand-offs stay
  // in GPU memory (actors/section_runner.h, resident_handoffs).
  bool resident_handoffs = true;
  const std::atomic<bool>* interrupt = nullptr;  // SIGINT: checkpoint and stop
  std::function<void(const std::vector<std::string>&)> on_plan;  // the plan lines, before the first step
  std::vector<ReplFrontEnd> repl;      // none = no repl actor
  ProcessOptions processes;            // > 1: the coordinator of a multi-process run
  // Set on a worker process (and by the coordinator for itself): which
  // process hosts each replica ([section][dp replica]) and which one this
  // is; empty = every replica here.
  std::vector<std::vector<int>> placement;
  int process = 0;
  // The cluster the plan was made on when [cluster] says device = "cpu"
  // (plan_run, actors/run_plan.h): node i is process i, and each
  // replica runs in the process of its first device's node. None: the
  // plan's sections share this machine's slots, placed round-robin.
  std::optional<Cluster> cluster;
  // The GPUs a run in one process on cuda was planned on (plan_gpu_run,
  // actors/run_plan.h): each step's schedule is costed on them, and the
  // plan's device numbers are GPUs.
  std::optional<Cluster> gpus;
};

struct StepProgress {
  int64_t step = 0, first_step = 0, last_step = 0;
  double loss = 0;
  int64_t samples = 0;  // this step's
  double step_s = 0, elapsed_s = 0;
};

struct TrainResult {
  int exit_code = 0;                 // 0 ok, 1 runtime failure, 2 invalid input
  std::string error;                 // set when exit_code != 0
  int64_t first_step = 0, steps_done = 0;  // steps_done counts from step 0
  int64_t samples = 0;               // samples trained by this run
  double wall_s = 0;                 // the steps' wall time (setup excluded)
  std::vector<double> losses;        // this run's, per step
  std::string checkpoint;            // last checkpoint folder written, "" = none
  bool interrupted = false;
  double sched_share = 0;            // scheduler busy time / step time, over the run
  std::string transport = "local";   // "local", or "ucx (UCX_TLS=...)" across processes
  std::vector<std::string> plan_lines;  // "llm: dp 2, micro_batch 8" per section (+ placement across processes)
  std::vector<std::string> skipped_samples;  // manifest lines left out (on_bad_sample = "skip")
  // Per train section part ("llm", "llm.stage1"): the AdamW moments each
  // replica holds (replica 0's tp rank 0 with tp > 1; the last shard may be one float smaller),
  // and what it would hold unsharded — what ZeRO-1 saves is the difference.
  struct OptimizerMemory {
    std::string part;
    int64_t dp = 1;
    bool sharded = false;
    size_t bytes_per_replica = 0, unsharded_bytes = 0;
  };
  std::vector<OptimizerMemory> optimizer_memory;
  // Bytes all-reduced by the tensor-parallel groups (one rank's payload per
  // call, summed over every replica of every tp > 1 section) in this run.
  uint64_t tp_all_reduce_bytes = 0;
  // Across processes: flow tensors this process put one-sided into other
  // processes' receive pools (actors/peer_tensors.h), and their bytes.
  uint64_t tensor_puts = 0, tensor_bytes_put = 0;
};

// `graph` (and the Program it refers to), `plan` and `inputs` outlive the call.
TrainResult train(const SectionGraph& graph, const Plan& plan, const StepInputs& inputs, const TrainSpec& train,
                  const TrainOptions& options, const std::function<void(const StepProgress&)>& on_step = {});

}  // namespace maestro
