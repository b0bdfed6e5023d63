// A run over several processes (docs/runtime.md, "Processes and hosts"):
// the coordinator (the `maestro-run MODEL.sect` process: scheduler, loader,
// checkpointer, tracer, and its share of the section replicas) publishes a
// door actor with CAF's middleman; each worker process (`maestro-run
// --worker HOST:PORT`) connects to it, says Hello (protocol version, build
// id), receives its Assignment — the model's source and the resolved run
// options, so it builds the same graph and plan itself, and which section
// replicas it hosts — spawns those replicas' actors and answers Joined with
// their handles, its UcxTransport's endpoint info, its dp rings' mailboxes
// and, on the CUDA backend, its ranks' GPUs and the NCCL unique ids of the
// dp groups whose rank 0 it holds. ConnectPeers hands every process
// everybody's info; then the scheduler drives remote replicas exactly as
// local ones. Shutdown ends a worker (exit 0); a lost coordinator ends it
// with exit 1.
//
// This file: the placement of replicas on processes and the protocol's
// messages (each with `inspect`, registered on both sides by
// add_process_message_types).
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/trainer.h"
#include "plan/plan.h"
#include "transport/ring_communicator.h"

namespace maestro {

// Checked twice: in the gate's preamble (gate.h) and in Hello.
// Bumped whenever a message of this file or of messages.h changes shape.
inline constexpr int32_t kProcessProtocolVersion = 9;

// This binary's build id: FNV-1a 64 of its executable file (/proc/self/exe),
// in hex — two processes of one run must run the same build. The
// environment's MAESTRO_BUILD_ID replaces it (to test the refusal, or to
// mix builds knowingly).
std::string build_id();

// Which process hosts each section replica: [section][dp replica] ->
// process (0 = the coordinator). With `devices_per_node` > 0 (a plan made
// on a cluster whose nodes are the processes, plan_run): the node
// of the replica's first device (first_device + replica·pp·tp) — on one
// process, 0. Otherwise round-robin over (section, replica) in section
// order, replica order: unit i goes to process i mod `processes`, so the
// replicas of a section spread over the processes (its gradients reduce
// across them). A replica's pipeline stages and tp ranks stay in one
// process. Throws std::invalid_argument when a node has no process.
std::vector<std::vector<int>> place_replicas(const Plan& plan, int processes, int64_t devices_per_node = 0);
// "vision/0, llm/1": the replicas a process hosts.
std::string hosted_by(const std::vector<std::vector<int>>& placement, const std::vector<std::string>& sections,
                      int process);
// What the run prints of a placement: a header saying how it was made (by
// `cluster`'s nodes, or round-robin without one), then a line per process
// with the replicas it hosts (and its host, where the cluster names them:
// the coordinator admits each worker to the process of its host).
std::vector<std::string> placement_lines(const std::vector<std::vector<int>>& placement,
                                         const std::vector<std::string>& sections, const Cluster* cluster);

// worker -> door: I want to join. `session` is the worker's actor, which
// the coordinator then talks to. `rank`: the launcher's rank of a worker
// started under mpirun/srun (--coordinator), which is then its process;
// 0 for a worker started by hand (it takes the first free process).
struct Hello {
  int32_t version = 0;
  std::string build;
  std::string host;
  int64_t pid = 0;
  caf::actor session;
  int32_t rank = 0;
};
// door -> worker: "" and the process index it got, or why it is refused.
struct Welcome {
  std::string error;
  int32_t process = 0;
};

// coordinator -> worker session.
struct Assignment {
  int32_t process = 0, processes = 1;
  RunSpec spec;
  std::vector<std::vector<int>> placement;  // place_replicas, as the coordinator computed it
  caf::actor tracer;
};
// A replica hosted by a worker, and a rank of a dp ring it holds.
struct HostedReplica {
  int32_t section = 0, stage = 0, replica = 0;
  caf::actor handle;
};
struct RingEntry {
  int32_t section = 0, stage = 0, tp_rank = 0, replica = 0;
  RingMailbox mailbox;
};
// A rank of a dp group spanning processes on the CUDA backend
// (RunSetup::NcclGroup): its GPU (host name and PCI bus id,
// cuda_pci_bus_id) and, from the process holding rank 0, the NCCL communicator's unique id.
struct NcclRankEntry {
  int32_t section = 0, stage = 0, tp_rank = 0, replica = 0;
  std::string gpu;
  std::vector<uint8_t> id;  // rank 0's entry only
};
// worker -> coordinator: the answer to Assignment.
struct Joined {
  std::string error;    // "" = ready; else why it cannot host its share (exit code in `bad_input`)
  bool bad_input = false;
  std::vector<HostedReplica> replicas;
  std::vector<uint8_t> endpoint;  // UcxTransport::endpoint_info()
  std::vector<RingEntry> rings;
  std::vector<NcclRankEntry> nccl_ranks;
  uint64_t transport_id = 0;      // its UcxTransport::id(): the owner in its tensor handles
  caf::actor tensor_server;       // puts its exported tensors into a consumer's pool (peer_tensors.h)
};
// coordinator -> every worker: the endpoints of all processes ([process];
// empty for none) and every ring rank's mailbox. Replies std::string ("" = connected).
struct ConnectPeers {
  std::vector<std::vector<uint8_t>> endpoints;
  std::vector<std::string> names;  // "worker 2 (pid 123 on host-b)"
  std::vector<RingEntry> rings;
  std::vector<NcclRankEntry> nccl_ranks;
  std::vector<uint64_t> transport_ids;   // [process]
  std::vector<caf::actor> tensor_servers;  // [process]
};
// coordinator -> worker, before Shutdown when the run ended well: flush the
// transfer engine's endpoints while every peer is still alive
// (UcxTransport::quiesce). Replies std::string ("" = done).
struct Quiesce {
  bool unused = false;
};
// coordinator -> worker: the run is over; stop and exit 0.
struct Shutdown {
  std::string reason;
};

MAESTRO_INSPECT(SectionPlan, x.first_device, x.devices, x.tp, x.pp, x.dp, x.micro_batch, x.shard_optimizer,
                x.recompute_level)
MAESTRO_INSPECT(ScheduleLevers, x.reorder, x.token_micro_batches, x.per_step_micro_batch, x.overlap_grad_sync,
                x.critical_path_first, x.host_groups, x.consumer_groups)
MAESTRO_INSPECT(Plan, x.sections, x.levers, x.in_flight_cap, x.cluster_devices)
MAESTRO_INSPECT(RunSpec, x.model_path, x.model_source, x.steps, x.shard, x.plan, x.schedule, x.stop_after, x.resume,
                x.seed, x.threads, x.quiet, x.backend, x.gpu_selfcheck, x.gpu_attention)
MAESTRO_INSPECT(Hello, x.version, x.build, x.host, x.pid, x.session, x.rank)
MAESTRO_INSPECT(Welcome, x.error, x.process)
MAESTRO_INSPECT(Assignment, x.process, x.processes, x.spec, x.placement, x.tracer)
MAESTRO_INSPECT(HostedReplica, x.section, x.stage, x.replica, x.handle)
MAESTRO_INSPECT(RingEntry, x.section, x.stage, x.tp_rank, x.replica, x.mailbox)
MAESTRO_INSPECT(NcclRankEntry, x.section, x.stage, x.tp_rank, x.replica, x.gpu, x.id)
MAESTRO_INSPECT(Joined, x.error, x.bad_input, x.replicas, x.endpoint, x.rings, x.nccl_ranks, x.transport_id,
                x.tensor_server)
MAESTRO_INSPECT(ConnectPeers, x.endpoints, x.names, x.rings, x.nccl_ranks, x.transport_ids, x.tensor_servers)
MAESTRO_INSPECT(Quiesce, x.unused)
MAESTRO_INSPECT(Shutdown, x.reason)

// The run's messages (add_message_types) and the ones above, plus the
// middleman and its heartbeat (every `heartbeat_ms`): what both ends set.
void configure_process_system(caf::actor_system_config& cfg, size_t heartbeat_ms = 500);

// "HOST:PORT" -> (host, port); throws std::invalid_argument naming the text.
std::pair<std::string, uint16_t> parse_address(const std::string& text);

// This host's name (gethostname).
std::string host_name();

// The set-up's side of joining (RunSetup, train_phases.h): its UCX
// endpoint info (empty without one), its ring ranks' mailboxes, its NCCL
// ranks' entries, and connecting all of them to the peers' (`process` =
// this one, skipped) — each GPU dp group over NCCL where its ranks are on
// distinct GPUs (all of this process's with every other process's at once,
// bounded by `nccl_timeout`), else over its staged ring — which also
// installs the process's PeerTensors with every peer's tensor server.
struct RunSetup;
std::vector<uint8_t> endpoint_bytes(const RunSetup& setup);
std::vector<RingEntry> ring_entries(const RunSetup& setup);
std::vector<NcclRankEntry> nccl_rank_entries(const RunSetup& setup);
void connect_peers(RunSetup& setup, const ConnectPeers& peers, int process,
                   std::chrono::milliseconds nccl_timeout = std::chrono::seconds(25));

class Gate;  // gate.h

// The coordinator's side (coordinator.cpp): publishes the door at
// options.listen and, with options.spawn, starts processes-1 local workers
// (this binary, `--worker 127.0.0.1:PORT`); join() waits (bounded) for them,
// hands out the assignments, collects their replicas and connects every
// process's transfer engine and rings. Throws TrainFailure.
class Coordinator {
 public:
  struct Worker {
    int process = 0;
    caf::actor session;
    std::string host;
    int64_t pid = 0;
    std::string name;  // "worker 1 (pid 123 on host-a; hosts llm/1, audio/0)"
  };
  Coordinator(caf::actor_system& sys, const ProcessOptions& options, std::vector<std::vector<int>> placement,
              std::vector<std::string> sections);
  ~Coordinator();  // kills spawned workers still running
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  uint16_t port() const { return port_; }
  void join(RunSetup& setup, caf::actor tracer);
  const std::vector<Worker>& workers() const { return workers_; }
  // Sends every worker Shutdown and waits for the spawned ones to exit: up
  // to 10 s, 2 s after a failed run (one may have stopped answering); then kills them.
  void shutdown(const std::string& reason, bool failed);

  struct Door;

 private:
  caf::actor_system& sys_;
  ProcessOptions options_;
  std::vector<std::vector<int>> placement_;
  std::vector<std::string> sections_;
  caf::actor door_, tensor_server_;
  std::unique_ptr<Gate> gate_;
  std::shared_ptr<Door> state_;
  std::shared_ptr<Transport> transport_;  // this process's UcxTransport (join), quiesced at shutdown
  uint16_t port_ = 0;
  std::vector<int> children_;  // pids of spawned workers
  std::vector<Worker> workers_;
};

// What the worker side of the protocol needs to build its share of the run
// from an Assignment: the graph, plan and train block the coordinator has
// (cli/worker_command.cpp builds them from the RunSpec); they outlive the call.
struct WorkerRun {
  const SectionGraph* graph = nullptr;
  const Plan* plan = nullptr;
  const TrainSpec* train = nullptr;
  TrainOptions options;
};
// Throws TrainFailure-like std::invalid_argument (bad input) or std::runtime_error.
using PrepareWorkerRun = std::function<WorkerRun(const RunSpec&)>;

// The worker's side: connects to the coordinator at `address` (retrying for
// up to `connect_timeout_s`), joins (as process `rank` when a launcher gave
// one, Hello), hosts its replicas until Shutdown.
// Returns the exit status: 0 after Shutdown, 1 when the coordinator is lost
// or a runtime fault, 2 when refused or the assignment is bad input.
int serve_worker(const std::string& address, const PrepareWorkerRun& prepare, int32_t rank = 0,
                 double connect_timeout_s = 30);

}  // namespace maestro
