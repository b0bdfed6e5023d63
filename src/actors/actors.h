// Spawning the runtime's actors. Each actor lives in its own .cpp; this
// header is what the trainer (and the actor tests) see. Handles are dynamic
// caf::actor: the message set of each actor is listed next to it.
#pragma once

#include <atomic>
#include <caf/all.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "graph/section_graph.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace maestro {

class SectionRunner;

// The compute worker of one replica: a detached actor (its own thread) that
// owns the SectionRunner and runs RunTask, ReduceGrads, ApplyGrads,
// SaveSection one at a time, replying TaskDone, GradsReduced, Applied, Saved.
caf::actor spawn_compute_worker(caf::actor_system& sys, std::shared_ptr<SectionRunner> runner, int section,
                                int stage, int replica, caf::actor tracer);

// A section replica: the event-based front of its workers — one, or one per
// tensor-parallel rank, which run every message together; the scheduler
// and checkpointer talk to it. It forwards work to its workers in arrival
// order (so each worker's FIFO mailbox keeps the scheduler's order), hands
// the result back once every rank answered (rank 0's outputs, the first
// error, the ranks' gradient norm² shares summed), and records each transfer
// in the trace. `identity`: its section, stage, replica and device, as
// Describe reports them; `memory_bytes`: what its ranks' runners hold at
// spawn (each task's TaskDone updates it).
caf::actor spawn_section_replica(caf::actor_system& sys, std::vector<caf::actor> workers, std::string track,
                                 caf::actor tracer, ActorInfo identity = {}, int64_t memory_bytes = 0);

// Draws and materialises steps ahead of use: GetBatch{k} -> BatchReady.
// Steps are materialised (files decoded) on `threads` threads of its own, in
// step order, up to 2 steps past the one taken (data/prefetcher.h).
using StepDataSource = std::function<std::shared_ptr<const StepData>(int64_t step)>;
caf::actor spawn_data_loader(caf::actor_system& sys, StepDataSource source, int64_t last_step, caf::actor tracer,
                             int threads = 2);

// Writes checkpoints: WriteCheckpoint -> CheckpointWritten. Asks replica 0
// of every train section (of each pipeline stage) to save into a temporary
// folder, then commits it atomically (checkpoint.h). Detached (file I/O).
struct CheckpointerConfig {
  std::string root;
  std::vector<int> sections;            // sections saved (train ones), once per stage
  std::vector<std::string> names;       // their file names: "llm", or "llm.stage1" for a stage
  std::vector<caf::actor> replica0;     // their replica 0
  uint64_t seed = 0, data_seed = 0;
  int64_t global_batch = 0;
  std::string schedule;
  int64_t keep = 0;                     // step folders kept (CheckpointWriter); 0 = all
  std::vector<caf::actor> gatherers;    // replicas 1.. of groups with a sharded optimizer: sent SaveSection{""}
                                        // (they take part in gathering the state, write nothing)
};
caf::actor spawn_checkpointer(caf::actor_system& sys, CheckpointerConfig config, caf::actor tracer);

// Collects TraceEvents; FlushTrace{path} writes them (replies std::string:
// "" or the error). Without a path it only counts.
caf::actor spawn_tracer(caf::actor_system& sys, bool keep_events);

// The scheduler: StartTraining{first, last} from the driver; runs the steps
// and sends the driver a StepReport per step and TrainingEnded at the end.
struct SchedulerConfig {
  const SectionGraph* graph = nullptr;  // the sections and flows; outlives the actor
  const Plan* plan = nullptr;           // each section's pipeline stages; outlives the actor
  std::function<Schedule(const Batch&)> schedule_of;  // the step's Schedule, executed as it is
  std::function<double(int64_t step)> lr_at;
  double grad_clip = 0;                 // 0 = no clipping
  int64_t checkpoint_every = 0;         // 0 = never
  std::vector<std::vector<std::vector<caf::actor>>> replicas;  // [section][pp stage][dp replica]
  caf::actor loader, checkpointer, tracer;        // checkpointer may be null
  std::vector<double> losses;           // losses of the steps before first_step (resume)
  int64_t global_batch = 0;
  const std::atomic<bool>* interrupt = nullptr;  // set by SIGINT: checkpoint and stop
};
// Besides the run, the scheduler answers Describe (its step, pause state,
// the step's frontier per section in `detail`) and SteerRun from the repl.
caf::actor spawn_scheduler(caf::actor_system& sys, SchedulerConfig config);

}  // namespace maestro
