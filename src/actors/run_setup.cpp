// Set-up of a run (train_phases.h): the options, the resume checkpoint, the
// section runners and the step schedules, before any actor exists.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>

#include "actors/checkpoint.h"
#include "actors/processes.h"  // host_name
#include "actors/train_phases.h"
#include "gpu/device_query.h"
#include "gpu/nccl_layout.h"
#include "gpu/staged_communicator.h"
#include "rdma/ucx_transport.h"
#include "transport/chosen_communicator.h"
#include "transport/counted_communicator.h"
#include "log/log.h"

namespace maestro {

namespace {

struct Resume {
  std::string dir;  // "" = a fresh run
  int64_t first_step = 0;
  std::vector<double> losses;
};

// The checkpoint to resume from, checked against this run: the same global
// batch, and every part the plan holds (a section, or each of its pipeline
// stages) saved in it.
Resume read_resume(const SectionGraph& graph, const Plan& plan, const TrainSpec& train, const std::string& from) {
  Resume out;
  if (from.empty()) return out;
  try {
    out.dir = resolve_checkpoint_dir(from);
    const CheckpointState st = read_checkpoint_state(out.dir);
    check_resumable(st, train.steps, graph.program->data.seed, train.global_batch);
    for (size_t s = 0; s < graph.nodes.size(); ++s)
      for (int64_t k = 0; k < plan.sections[s].pp && graph.section(int(s)).mode == Mode::Train; ++k) {
        const std::string part = part_name(graph.nodes[s].name, int(k), int(plan.sections[s].pp));
        if (std::find(st.sections.begin(), st.sections.end(), part) == st.sections.end())
          throw TrainFailure(2, fmt::format("--resume {}: the checkpoint has no '{}' (it holds {}): section '{}' must "
                                            "be split into the same pipeline stages (pp) as when it was written",
                                            from, part, fmt::join(st.sections, ", "), graph.nodes[s].name));
      }
    out.first_step = st.step;
    out.losses = st.losses;
  } catch (const CheckpointError& e) {
    throw TrainFailure(2, fmt::format("--resume: {}", e.what()));
  }
  return out;
}

}  // namespace

RunSetup set_up_run(const SectionGraph& graph, const Plan& plan, const TrainSpec& train, const TrainOptions& options) {
  RunSetup setup;
  setup.seed = options.seed.value_or(train.seed);
  setup.last_step = std::min(options.stop_after.value_or(train.steps), train.steps);
  setup.threads = cpu_slots(options.threads);
  if (setup.last_step < 0) throw TrainFailure(2, fmt::format("--stop-after must be >= 0, got {}", setup.last_step));
  try {
    const Cluster* planned_on = options.cluster ? &*options.cluster : options.gpus ? &*options.gpus : nullptr;
    setup.schedules = std::make_shared<const StepSchedules>(graph, plan, options.schedule, planned_on,
                                                           /*fp32_activations=*/options.gpus.has_value());
  } catch (const std::invalid_argument& e) {
    throw TrainFailure(2, e.what());
  }
  const Resume resume = read_resume(graph, plan, train, options.resume);
  setup.first_step = resume.first_step;
  setup.past_losses = resume.losses;
  if (!resume.dir.empty()) log(LogLevel::Info, "resuming from {} at step {}", resume.dir, resume.first_step);

  // One runner per section × pipeline stage × dp replica × tp rank, each
  // with its own backend (the factory's); the tp ranks of a replica form one
  // collective group (Megatron's activation all-reduces), and rank t of
  // every dp replica of a section's stage another (the gradient all-reduce).
  // Each section's runners (its pp stages × dp replicas) share the run's
  // threads: a runner's pool gets threads / (pp·dp) of them, at least one.
  // A run's thread count then grows linearly with `runtime.threads` (about
  // sections × threads), and a section whose replica runs alone still has
  // every core (splitting the threads over all runners of every section cost
  // 25 % per step on tiny_mllm at dp 1: docs/PERFORMANCE.md §4).
  setup.transport = std::make_unique<LocalTransport>();
  // On a GPU the runners copy each output into this transport's memory (the
  // tensors they hand on) and upload their inputs from it or from the peer
  // transport's (tensors from other processes), and a ring between
  // processes stages gradients through host memory: all pinned, so those
  // copies are DMA.
  HostPinning pinning;
  if (options.backend == BackendKind::Cuda) {
    auto warned = std::make_shared<std::atomic<bool>>(false);
    pinning = {[warned](void* base, size_t bytes) {
                 if (cuda_pin_host(base, bytes)) return true;
                 if (!warned->exchange(true))
                   log(LogLevel::Warn,
                       "could not pin {} bytes of host memory for the GPU's copies (cudaHostRegister; the "
                       "locked-memory limit?): it stays pageable",
                       bytes);
                 return false;
               },
               cuda_unpin_host};
    setup.transport->pin_host_memory(pinning);
  }
  const Program& program = *graph.program;  // the sections' models and losses, as the engine reads them
  if (!options.placement.empty()) {  // across processes: the UCX engine carries the rings spanning them
    try {
      auto ucx = std::make_shared<UcxTransport>();
      if (pinning.pin) ucx->pin_host_memory(pinning);
      setup.peer_tensors = std::make_shared<PeerTensors>(ucx);
      setup.peer_transport = std::move(ucx);
    } catch (const std::exception& e) {
      throw TrainFailure(1, fmt::format("the UCX transport cannot start: {}", e.what()));
    }
  }
  setup.runners.resize(graph.nodes.size());
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const int64_t pp = plan.sections[s].pp, tp = plan.sections[s].tp, dp = plan.sections[s].dp;
    // Across processes, a group whose replicas live in several processes is a
    // ring over the UCX engine (this process holds its local ranks) — on the
    // CUDA backend with NCCL, one NCCL communicator across them where its
    // ranks are on distinct GPUs (connect_peers chooses); a group held whole
    // by this process stays in-process; another's is none of ours.
    bool spans = false, any_here = false;
    for (int64_t r = 0; r < dp; ++r) {
      any_here = any_here || hosts(options, int(s), r);
      if (!options.placement.empty() && options.placement[s][size_t(r)] != options.placement[s][0]) spans = true;
    }
    const bool nccl_spans = spans && options.backend == BackendKind::Cuda && nccl_built();
    const int pool_threads = int(std::max<int64_t>(1, setup.threads / (pp * plan.sections[s].dp * tp)));
    for (int64_t k = 0; k < pp; ++k) {
      setup.runners[s].emplace_back();
      // [tp rank][dp replica]: each tp rank's dp group — in-process on the CPU,
      // NCCL over the plan's devices on cuda (backend_factory.h).
      std::vector<std::vector<std::shared_ptr<Communicator>>> dp_group;
      std::vector<size_t> nccl_group_of(static_cast<size_t>(tp));  // [tp rank] -> setup.nccl_groups (nccl_spans)
      for (int64_t t = 0; t < tp && any_here; ++t) {
        if (spans) {
          dp_group.emplace_back(size_t(dp));
          for (int64_t r = 0; r < dp; ++r)
            if (hosts(options, int(s), r)) {
              auto ring = std::make_shared<RingCommunicator>(*setup.peer_transport, int(r), int(dp));
              setup.rings.push_back({int(s), int(k), int(t), int(r), ring});
              setup.dp_groups.push_back(ring);
              dp_group.back()[size_t(r)] = std::move(ring);
            }
          if (nccl_spans) {  // NCCL's ranks beside the ring's: connect_peers chooses
            const int gpus = cuda_device_count().value_or(0);
            RunSetup::NcclGroup group;
            group.section = int(s), group.stage = int(k), group.tp_rank = int(t);
            group.name = fmt::format("section '{}' stage {} dp group (tp rank {})", graph.nodes[s].name, k, t);
            std::vector<int> devices;
            for (int64_t r = 0; r < dp; ++r)
              if (hosts(options, int(s), r)) {
                const int device = physical_device(section_device(plan.sections[s], k, r, t), gpus);
                group.replicas.push_back(int(r));
                group.gpus.push_back(fmt::format("{}/{}", host_name(),
                                                 cuda_pci_bus_id(device).value_or(fmt::format("device {}", device))));
                devices.push_back(device);
              }
            try {
              group.ranks = make_peer_dp_ranks(int(dp), group.replicas, devices);
              if (hosts(options, int(s), 0)) group.id = nccl_unique_id();
            } catch (const std::exception& e) {
              throw TrainFailure(1, fmt::format("{}: {}", group.name, e.what()));
            }
            group.choices.resize(group.replicas.size());
            setup.dp_groups.push_back(group.ranks[0]);
            setup.nccl_groups.push_back(std::move(group));
            nccl_group_of[size_t(t)] = setup.nccl_groups.size() - 1;
          }
          continue;
        }
        if (options.backend == BackendKind::Cuda && !options.placement.empty()) {  // train_command checked one process's
          const std::string refusal = nccl_group_refusal(plan, int(s), k, graph.nodes[s].name,
                                                         cuda_device_count().value_or(0), nccl_built());
          if (!refusal.empty()) throw TrainFailure(2, refusal);
        }
        try {
          dp_group.push_back(make_dp_group(options.backend, plan, int(s), k, t));
        } catch (const std::exception& e) {
          throw TrainFailure(1, fmt::format("section '{}', stage {}: dp group: {}", graph.nodes[s].name, k, e.what()));
        }
        setup.dp_groups.push_back(dp_group.back()[0]);
      }
      for (int64_t r = 0; r < plan.sections[s].dp; ++r) {
        if (!hosts(options, int(s), r)) {  // another process's: an empty slot
          setup.runners[s][size_t(k)].emplace_back();
          continue;
        }
        // In process on the CPU, NCCL over the replica's GPUs on cuda (backend_factory.h).
        std::vector<std::shared_ptr<Communicator>> tp_group;
        try {
          tp_group = make_tp_group(options.backend, plan, int(s), k, r);
        } catch (const std::exception& e) {
          throw TrainFailure(1, fmt::format("section '{}', stage {}, replica {}: tp group: {}", graph.nodes[s].name, k,
                                            r, e.what()));
        }
        const std::vector<std::shared_ptr<Communicator>> tp_ranks = tp_group;  // unwrapped
        setup.dp_groups.push_back(tp_group[0]);
        if (tp > 1) {  // rank 0 counts the replica's all-reduce volume
          auto counted = std::make_shared<CountedCommunicator>(tp_group[0]);
          setup.tp_counters.push_back(counted);
          tp_group[0] = std::move(counted);
        }
        setup.runners[s][size_t(k)].emplace_back();
        try {
          for (int64_t t = 0; t < tp; ++t) {
            std::unique_ptr<Backend> backend =
                make_backend(options.backend, pool_threads, replica_device(options.backend, plan, int(s), k, r, t));
            order_collectives_after(*tp_ranks[size_t(t)], *backend);
            // A ring between processes reaches host memory only: a GPU rank's
            // gradients are staged through it (gpu/staged_communicator.h).
            std::shared_ptr<Communicator> dp_rank = dp_group[size_t(t)][size_t(r)];
            // An NCCL rank waits for this backend's stream only, not the whole GPU's.
            order_collectives_after(*dp_rank, *backend);
            if (spans && options.backend == BackendKind::Cuda)
              dp_rank = std::make_shared<StagedCommunicator>(std::move(dp_rank), *backend, pinning);
            if (nccl_spans) {  // NCCL (candidate 0) or that staged ring (1), chosen in connect_peers
              RunSetup::NcclGroup& g = setup.nccl_groups[nccl_group_of[size_t(t)]];
              const size_t i = size_t(std::find(g.replicas.begin(), g.replicas.end(), int(r)) - g.replicas.begin());
              order_collectives_after(*g.ranks.at(i), *backend);
              auto choice = std::make_shared<ChosenCommunicator>(
                  std::vector<std::shared_ptr<Communicator>>{g.ranks.at(i), std::move(dp_rank)});
              g.choices[i] = choice;
              dp_rank = std::move(choice);
            }
            auto runner = std::make_shared<SectionRunner>(
                program, int(s), int(k), int(pp), setup.seed, *setup.transport, std::move(backend), std::move(dp_rank),
                tp > 1 ? tp_group[size_t(t)] : nullptr, run_shards_optimizer(program.train, plan, int(s)),
                recomputed_layers(graph.section(int(s)), plan.sections[s]),
                recomputes_stage(graph.section(int(s)), plan.sections[s]),
                options.resident_handoffs && options.backend == BackendKind::Cuda && options.placement.empty());
            setup.runners[s][size_t(k)][size_t(r)].push_back(std::move(runner));
          }
          // Every rank reads its slice of the whole tensors (load is local: no collective).
          if (!resume.dir.empty() && graph.section(int(s)).mode == Mode::Train)
            for (auto& runner : setup.runners[s][size_t(k)][size_t(r)])
              runner->load(fmt::format("{}/{}.safetensors", resume.dir, runner->part_name()));
        } catch (const std::exception& e) {
          const std::string stage = pp > 1 ? fmt::format(", stage {}", k) : "";
          const std::string named = fmt::format("section '{}': ", graph.nodes[s].name);
          std::string what = e.what();
          if (what.starts_with(named)) what.erase(0, named.size());  // named once
          throw TrainFailure(1, fmt::format("section '{}'{}, replica {}: {}", graph.nodes[s].name, stage, r, what));
        }
      }
    }
  }
  return setup;
}

}  // namespace maestro
