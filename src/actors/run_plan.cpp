// The plan of a real run on this machine (see run_plan.h).
#include "actors/run_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "config/runtime_config.h"
#include "graph/model_tensors.h"
#include "graph/tensor_parallel.h"
#include "plan/backward_order.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"

namespace maestro {

namespace {

std::string where(const Section& s) { return fmt::format("{}:{}:{}", s.loc.file, s.loc.line, s.loc.col); }

Cluster cpu_cluster(int64_t devices) {
  RuntimeConfig config;
  config.cluster.device = "cpu";
  config.cluster.devices = devices;
  config.cluster.devices_per_node = devices;
  return make_cluster(config);
}

}  // namespace

RunPlan plan_run(const SectionGraph& graph, const RuntimeConfig& config, int64_t slots, int64_t processes,
                 const Batch& sample) {
  if (config.cluster.device != "cpu") return {plan_cpu_run(graph, slots, sample), std::nullopt};
  RunPlan out;
  try {
    out.cluster = make_cluster(config);
  } catch (const PlanError& e) {
    throw std::invalid_argument(e.what());
  }
  const Cluster& c = *out.cluster;
  if (processes > 1 && c.nodes() != processes)
    throw std::invalid_argument(fmt::format(
        "{}: [cluster] device = \"cpu\" has {} node{} and the run {} processes: each node is a process "
        "(--processes {} or 1)", config.file.empty() ? "the config" : config.file, c.nodes(),
        c.nodes() == 1 ? "" : "s", processes, c.nodes()));
  PlannerOptions options;
  options.threads = config.runtime.threads;
  try {
    out.plan = plan_program(graph, c, RooflineCost(graph, c), sample, options);
  } catch (const PlanError& e) {
    throw std::invalid_argument(fmt::format("cannot plan the run on [cluster] ({} CPU slots in {} node{}): {}", c.devices,
                                            c.nodes(), c.nodes() == 1 ? "" : "s", e.what()));
  }
  return out;
}

bool run_shards_optimizer(const TrainSpec& train, const Plan& plan, int s) {
  return train.optimizer.shard || plan.sections.at(size_t(s)).shard_optimizer;
}

int64_t cpu_slots(int64_t threads) {
  return threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
}

Program cpu_runnable(const Program& program) {
  Program fixed = program;
  for (Section& s : fixed.sections) {
    if (const std::string e = tp_divisibility_error(s.model, s.parallel.tp.value_or(1)); !e.empty())
      throw std::invalid_argument(fmt::format("{}: section '{}': tp = {}: {}", where(s), s.name, *s.parallel.tp, e));
    if (s.parallel.pp.value_or(1) > 1) {
      try {
        stage_layers(s.model, 0, *s.parallel.pp);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("{}: section '{}': pp = {}: {}", where(s), s.name, *s.parallel.pp,
                                                e.what()));
      }
    }
    if (s.parallel.dp && *s.parallel.dp < 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': dp must be >= 1", where(s), s.name));
    if (s.micro_batch && *s.micro_batch < 1)
      throw std::invalid_argument(fmt::format("{}: section '{}': micro_batch must be >= 1", where(s), s.name));
    s.parallel.tp = s.parallel.tp.value_or(1);  // auto: one rank (a CPU replica gains nothing from splitting)
  }
  return fixed;
}

Plan plan_cpu_run(const SectionGraph& graph, int64_t slots, const Batch& sample) {
  PlannerOptions options;
  options.threads = slots;  // the CPU's own, before an explicit degree asks for more ranks
  bool any_auto = false;
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const Section& sec = graph.section(int(s));
    any_auto = any_auto || !sec.parallel.dp || !sec.parallel.pp || !sec.micro_batch || sec.recompute_auto;
    // Sections share the CPU slots; an explicit tp·dp·pp may ask for more ranks than slots.
    slots = std::max(slots, sec.parallel.tp.value_or(1) * sec.parallel.dp.value_or(1) * sec.parallel.pp.value_or(1));
  }
  Plan resolved;
  if (any_auto) {
    const Cluster cluster = cpu_cluster(slots);
    try {
      resolved = plan_program(graph, cluster, RooflineCost(graph, cluster), sample, options);
    } catch (const PlanError& e) {
      throw std::invalid_argument(fmt::format("cannot plan the run on {} CPU slots: {}", slots, e.what()));
    }
  } else {
    resolved.sections.resize(graph.nodes.size());
  }
  // Explicit values as written (the planner keeps them too); every section
  // spans the same CPU slots (co-located); tp as written (1 when auto).
  Plan plan;
  int64_t max_pp = 1;
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const Section& sec = graph.section(int(s));
    const SectionPlan& r = resolved.sections[s];
    const int64_t dp = sec.parallel.dp.value_or(r.dp), pp = sec.parallel.pp.value_or(r.pp), tp = sec.parallel.tp.value_or(1);
    plan.sections.push_back(
        SectionPlan{0, tp * dp * pp, tp, pp, dp, sec.micro_batch.value_or(r.micro_batch), false, r.recompute_level});
    max_pp = std::max(max_pp, pp);
  }
  // The planner's cap on in-flight micro-batches (Frontier): one per stage.
  plan.in_flight_cap = in_flight_micro_batches(max_pp);
  return plan;
}

Cluster gpu_cluster(const DeviceSpec& spec, int64_t gpus) {
  Cluster c;
  c.device = spec;
  c.devices = gpus;
  c.devices_per_node = gpus;
  return c;
}

Plan plan_gpu_run(const SectionGraph& graph, const Cluster& gpus, int64_t threads, const Batch& sample) {
  const std::string where_planned =
      fmt::format("{} GPU{} ({})", gpus.devices, gpus.devices == 1 ? "" : "s", gpus.device.name);
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const Section& sec = graph.section(int(s));
    const int64_t ranks = sec.parallel.tp.value_or(1) * sec.parallel.dp.value_or(1) * sec.parallel.pp.value_or(1);
    if (ranks > gpus.devices)
      throw std::invalid_argument(fmt::format(
          "{}: section '{}': tp {} × dp {} × pp {} = {} ranks, and the run has {}: each rank of a cuda run needs a "
          "GPU of its own (dp and tp groups are NCCL communicators, one rank per GPU)", where(sec), sec.name,
          sec.parallel.tp.value_or(1), sec.parallel.dp.value_or(1), sec.parallel.pp.value_or(1), ranks, where_planned));
  }
  PlannerOptions options;
  options.threads = threads;
  options.resident_handoff_budget = gpus.device.memory_bytes / kResidentHandoffShare;
  try {
    return plan_program(graph, gpus, RooflineCost(graph, gpus, /*fp32_activations=*/true), sample, options);
  } catch (const PlanError& e) {
    throw std::invalid_argument(fmt::format("cannot plan the run on {}: {}", where_planned, e.what()));
  }
}

StepSchedules::StepSchedules(const SectionGraph& graph, const Plan& plan, const std::string& policy,
                             const Cluster* cluster, bool fp32_activations)
    : graph_(graph), plan_(plan), cluster_(cluster ? *cluster : cpu_cluster(plan.device_count())) {
  if (policy != "wavefront" && policy != "monolithic")
    throw std::invalid_argument(fmt::format("unknown schedule '{}' (wavefront or monolithic)", policy));
  monolithic_ = policy == "monolithic";
  cost_ = std::make_unique<RooflineCost>(graph_, cluster_, fp32_activations);
  // The monolithic baseline's one micro-batch size: the loss section's.
  if (!plan.sections.empty()) monolithic_micro_batch_ = plan.sections.back().micro_batch;
  for (size_t s = 0; s < graph.nodes.size(); ++s)
    if (graph.nodes[s].has_loss) monolithic_micro_batch_ = plan.sections[s].micro_batch;
}

StepSchedules::~StepSchedules() = default;

Schedule StepSchedules::of(const Batch& batch) const {
  Schedule schedule = monolithic_ ? monolithic_schedule(graph_, plan_, batch, monolithic_micro_batch_)
                                  : wavefront_schedule(graph_, plan_, *cost_, batch);
  chain_replica_backwards(schedule);
  return schedule;
}

}  // namespace maestro
