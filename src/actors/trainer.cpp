// train(): one training run — set up, spawn, drive (train_phases.h) — with
// every actor stopped before it returns (see trainer.h).
#include "actors/trainer.h"

#include <fmt/format.h>

#include <caf/all.hpp>

#include "actors/actors.h"
#include "actors/messages.h"
#include "actors/processes.h"
#include "actors/train_phases.h"
#include "plan/cost_model.h"
#include "transport/counted_communicator.h"

namespace maestro {

namespace {

TrainResult failure(int code, std::string message) {
  TrainResult r;
  r.exit_code = code;
  r.error = std::move(message);
  return r;
}

}  // namespace

TrainResult train(const SectionGraph& graph, const Plan& plan, const StepInputs& inputs, const TrainSpec& train,
                  const TrainOptions& given, const std::function<void(const StepProgress&)>& on_step) {
  TrainOptions options = given;
  const int processes = options.processes.processes;
  std::vector<std::string> names;
  for (const SectionNode& n : graph.nodes) names.push_back(n.name);
  if (processes > 1) {
    try {
      options.placement = place_replicas(plan, processes, options.cluster ? options.cluster->devices_per_node : 0);
    } catch (const std::invalid_argument& e) {
      return failure(2, e.what());
    }
    options.process = 0;
    if (options.cluster) options.processes.hosts = options.cluster->hosts;
  }
  RunSetup setup;
  try {
    setup = set_up_run(graph, plan, train, options);
  } catch (const TrainFailure& f) {
    return failure(f.exit_code, f.what());
  }
  TrainResult result;
  result.first_step = setup.first_step;
  result.skipped_samples = inputs.skipped_samples();
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const SectionPlan& sp = plan.sections[s];
    const int64_t last = sp.first_device + sp.devices - 1;
    std::string where;  // the devices of a plan made on a cluster: [cluster]'s CPU slots, or this machine's GPUs
    if (options.cluster) where = fmt::format(", CPU slots {}-{} of [cluster]", sp.first_device, last);
    if (options.gpus)
      where = sp.devices == 1 ? fmt::format(", GPU {}", sp.first_device) : fmt::format(", GPUs {}-{}", sp.first_device, last);
    result.plan_lines.push_back(fmt::format("{}: {}dp {}, pp {}, micro_batch {}{}{}{}", graph.nodes[s].name,
                                            sp.tp > 1 ? fmt::format("tp {}, ", sp.tp) : "", sp.dp, sp.pp,
                                            sp.micro_batch, where,
                                            graph.section(int(s)).mode == Mode::Frozen ? " (frozen)" : "",
                                            recompute_note(graph.section(int(s)), sp)));
  }
  if (options.gpus)
    result.plan_lines.push_back(fmt::format("planned on {} GPU{} as the device table's {} ({:.1f} GB each)",
                                            options.gpus->devices, options.gpus->devices == 1 ? "" : "s",
                                            options.gpus->device.name, double(options.gpus->device.memory_bytes) / 1e9));
  for (const auto& stages : setup.runners)
    for (const auto& group : stages)  // [dp replica][tp rank]: replica 0's tp rank 0 speaks for the group
      if (!group.empty() && !group[0].empty() && group[0][0]->optimizer_state_bytes() > 0) {
        const SectionRunner& r = *group[0][0];
        TrainResult::OptimizerMemory m{r.part_name(), int64_t(group.size()), r.optimizer_sharded(),
                                       r.optimizer_state_bytes(), r.unsharded_optimizer_state_bytes()};
        result.optimizer_memory.push_back(m);
        if (m.sharded)
          result.plan_lines.push_back(fmt::format("{}: sharded optimizer over dp {}: {:.2f} MiB of AdamW state per replica "
                                                  "(unsharded {:.2f} MiB)", m.part, m.dp, m.bytes_per_replica / 1048576.0,
                                                  m.unsharded_bytes / 1048576.0));
      }
  if (processes > 1) {
    for (const std::string& line : placement_lines(options.placement, names, options.cluster ? &*options.cluster : nullptr))
      result.plan_lines.push_back(line);
    const char* tls = std::getenv("UCX_TLS");
    result.transport = fmt::format("ucx (UCX_TLS={})", tls && *tls ? tls : "UCX's choice");
  }
  if (options.on_plan) options.on_plan(result.plan_lines);
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", size_t(setup.threads));
  // CAF's default work-stealing workers spin-poll for messages, taking the
  // cores the compute workers need: the sharing policy's workers sleep on a
  // condition variable instead (docs/PERFORMANCE.md §4: 1.36× faster steps).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  if (processes > 1)
    configure_process_system(cfg);
  else
    add_message_types(cfg);
  caf::actor_system sys{cfg};
  std::unique_ptr<Coordinator> coordinator;
  if (processes > 1) {
    try {
      setup.tracer = spawn_tracer(sys, !options.trace_path.empty());
      coordinator = std::make_unique<Coordinator>(sys, options.processes, options.placement, names);
      coordinator->join(setup, setup.tracer);
    } catch (const TrainFailure& f) {
      for (const auto& group : setup.dp_groups) group->abort("the run did not start");
      caf::anon_send_exit(setup.tracer, caf::exit_reason::user_shutdown);
      if (coordinator) coordinator->shutdown(f.what(), true);
      return failure(f.exit_code, f.what());
    }
  }
  RunActors actors = spawn_run(sys, setup, graph, plan, inputs, train, options);
  if (coordinator)
    for (const Coordinator::Worker& w : coordinator->workers()) actors.watched.emplace_back(w.session, w.name);
  drive_run(sys, actors, setup, options, on_step, result);
  if (setup.peer_tensors) {
    result.tensor_puts = setup.peer_tensors->puts();
    result.tensor_bytes_put = setup.peer_tensors->bytes_put();
  }
  if (coordinator) coordinator->shutdown(result.error.empty() ? "the run ended" : result.error, result.exit_code != 0);
  for (const auto& c : setup.tp_counters) result.tp_all_reduce_bytes += c->all_reduce_bytes();
  return result;  // ~actor_system waits for every actor
}

}  // namespace maestro
