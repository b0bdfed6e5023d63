// The three phases of train() (trainer.h), one file each:
//  - set-up (run_setup.cpp): everything that can fail on bad input or a
//    missing file, before any actor exists — the options, the resume
//    checkpoint against the plan, one SectionRunner per section × pipeline
//    stage × dp replica (initialised, weights and resumed state loaded), the
//    step schedules;
//  - spawn (run_spawn.cpp): the actors of the run over those runners —
//    tracer, section replicas with their compute workers, data loader,
//    checkpointer, scheduler;
//  - drive (run_drive.cpp): the driver's side of the protocol — start, one
//    StepReport per step, TrainingEnded or the scheduler's death, the trace
//    flushed — then every actor stopped.
#pragma once

#include <caf/all.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/peer_tensors.h"
#include "actors/run_plan.h"
#include "actors/section_runner.h"
#include "actors/step_inputs.h"
#include "actors/trainer.h"
#include "transport/chosen_communicator.h"
#include "transport/counted_communicator.h"
#include "transport/local_transport.h"
#include "transport/ring_communicator.h"

namespace maestro {

// A run that can't start: its exit status (2 invalid input, 1 runtime fault) and message.
struct TrainFailure : std::runtime_error {
  TrainFailure(int code, const std::string& message) : std::runtime_error(message), exit_code(code) {}
  int exit_code;
};

struct RunSetup {
  uint64_t seed = 0;
  int64_t first_step = 0, last_step = 0;  // train steps [first_step, last_step)
  int64_t threads = 1;                    // CAF scheduler threads and each CPU backend's
  std::vector<double> past_losses;        // steps before first_step (resume)
  std::unique_ptr<LocalTransport> transport;  // the runners allocate from it: it outlives them
  std::shared_ptr<Transport> peer_transport;  // a UcxTransport across processes (below); outlives the rings
  std::shared_ptr<PeerTensors> peer_tensors;  // over peer_transport: flow tensors crossing processes (peer_tensors.h)
  // The data-parallel group of each section × stage × tp rank, and the
  // tensor-parallel group of each replica (rank 0's handles): the replicas
  // all-reduce their gradients, a replica's tp ranks their activations
  // through them; aborted at the end.
  std::vector<std::shared_ptr<Communicator>> dp_groups;
  // Rank 0 of each replica's tp group (tp > 1): its all-reduce bytes, summed
  // into TrainResult::tp_all_reduce_bytes.
  std::vector<std::shared_ptr<const CountedCommunicator>> tp_counters;
  // [section][pp stage][dp replica][tp rank]; handed to the compute workers at spawn.
  std::vector<std::vector<std::vector<std::vector<std::shared_ptr<SectionRunner>>>>> runners;
  std::shared_ptr<const StepSchedules> schedules;
  // Across processes (options.placement set): this process's transfer
  // engine and its ranks of the dp rings that span processes (each also in
  // dp_groups), connected once every process has joined; and the handles
  // of the replicas other processes host ([section][stage][replica], null
  // for this process's own).
  struct RingRank {
    int section = 0, stage = 0, tp_rank = 0, replica = 0;
    std::shared_ptr<RingCommunicator> ring;
  };
  std::vector<RingRank> rings;
  // On the CUDA backend with NCCL such a group may be one NCCL communicator
  // across the processes instead (gpu/backend_factory.h): this process's
  // ranks of it, NCCL's and the ring's, each behind the ChosenCommunicator
  // its runner holds; connect_peers takes NCCL when every rank of the group
  // is on a GPU of its own, else the ring. `id` is the NCCL communicator's
  // unique id where this process holds rank 0 (it travels in Joined), else
  // empty.
  struct NcclGroup {
    int section = 0, stage = 0, tp_rank = 0;
    std::string name;                 // "section 'llm' stage 0 dp group (tp rank 0)": what errors name
    std::vector<int> replicas;        // this process's ranks of the group
    std::vector<std::string> gpus;    // [i]: replicas[i]'s GPU, "host/PCI bus id" (cuda_pci_bus_id)
    std::vector<std::shared_ptr<Communicator>> ranks;               // [i]: NCCL's, unconnected
    std::vector<std::shared_ptr<ChosenCommunicator>> choices;       // [i]: {ranks[i], the staged ring}
    std::vector<uint8_t> id;
  };
  std::vector<NcclGroup> nccl_groups;
  std::vector<std::vector<std::vector<caf::actor>>> remote;
  caf::actor tracer;  // spawned before the workers join (they trace into it); null = spawn_run makes it
};

// Whether this process hosts replica `replica` of section `section`.
inline bool hosts(const TrainOptions& options, int section, int64_t replica) {
  return options.placement.empty() || options.placement[size_t(section)][size_t(replica)] == options.process;
}

// The replica actors (and their compute workers) over this process's
// runners, [section][stage][replica] (null where another process hosts
// it); every actor spawned is appended to `all`.
std::vector<std::vector<std::vector<caf::actor>>> spawn_replicas(caf::actor_system& sys, RunSetup& setup,
                                                                 const SectionGraph& graph, const TrainOptions& options,
                                                                 caf::actor tracer, std::vector<caf::actor>& all);

// Throws TrainFailure.
RunSetup set_up_run(const SectionGraph& graph, const Plan& plan, const TrainSpec& train, const TrainOptions& options);

struct RunActors {
  caf::actor scheduler, tracer;
  caf::actor repl;              // null unless options.repl has front ends
  std::vector<caf::actor> all;  // every actor spawned, the scheduler and tracer included
  // Across processes: each worker's session and its name; losing one ends the run (exit 1).
  std::vector<std::pair<caf::actor, std::string>> watched;
};

// Moves the runners into their compute workers. `graph`, `plan`, `inputs`,
// `train` and `setup` outlive the actors.
RunActors spawn_run(caf::actor_system& sys, RunSetup& setup, const SectionGraph& graph, const Plan& plan,
                    const StepInputs& inputs, const TrainSpec& train, const TrainOptions& options);

// Fills the result's losses, samples, steps, checkpoint, timing and error.
void drive_run(caf::actor_system& sys, const RunActors& actors, const RunSetup& setup, const TrainOptions& options,
               const std::function<void(const StepProgress&)>& on_step, TrainResult& result);

}  // namespace maestro
