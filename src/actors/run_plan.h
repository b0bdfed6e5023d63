// The plan of a real run on this machine: the CPU runtime's limits on a
// program (a tensor and pipeline split the model can take), each section's
// resolved dp, pp and micro_batch on the CPU slots, and each step's Schedule
// as the runtime executes it. The command calls the first two once
// (Program -> SectionGraph -> Plan); the scheduler asks StepSchedules for
// every step's Schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/batch.h"
#include "dsl/program.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace maestro {

// Whether section `s`'s replicas shard their optimizer state (ZeRO-1, when
// dp > 1): the program's adamw(shard: true) / [runtime] shard_optimizer for
// every section, or the plan's choice for this one (plan_run on a
// [cluster]: the planner's; plan_cpu_run chooses none).
bool run_shards_optimizer(const TrainSpec& train, const Plan& plan, int s);

// CPU slots of a run: `threads`, or every core when it is 0.
int64_t cpu_slots(int64_t threads);

// The program as the CPU runtime runs it: tp fixed at 1 where it is auto.
// Throws std::invalid_argument (exit 2) naming the section for what this
// runtime can't execute: a tp the model's heads / kv heads / ffn don't
// divide by, pp more than the model's layers or > 1 on an mlp, dp or
// micro_batch < 1.
Program cpu_runnable(const Program& program);

// The run's Plan on `slots` CPU slots: every `auto` (dp, pp, micro_batch)
// resolved by the planner (plan/planner.h) for the `cpu` device, sized on
// `sample` (step 0's batch); explicit values kept. Sections share the slots
// (co-located, an explicit tp·dp·pp above `slots` widens them), tp as written, and
// the in-flight cap is one micro-batch per pipeline stage. `graph` is built
// from cpu_runnable's program. Throws std::invalid_argument when the
// planner can't fit the run.
Plan plan_cpu_run(const SectionGraph& graph, int64_t slots, const Batch& sample);

// Each section runner of a run in one process on GPUs keeps its hand-offs
// in its GPU's memory up to this share of it (1/8; actors/section_runner.h,
// docs/gpu.md "Hand-offs"), as plan_gpu_run's simulations count them.
inline constexpr int64_t kResidentHandoffShare = 8;

// The GPUs of a run in one process on the CUDA backend, as the planner sees
// them: `gpus` devices of `spec` in one node (the device table's row for the
// GPU's name, plan/devices.h, with the GPU's own memory: train_command).
Cluster gpu_cluster(const DeviceSpec& spec, int64_t gpus);

// The run's Plan on those GPUs: every `auto` (dp, pp, micro_batch,
// recompute) and each section's GPUs chosen by the planner (plan/planner.h:
// a section on GPUs of its own or sharing them, each rank of a replica on its
// own GPU), sized on `sample`; explicit values kept; tp as written (1 when
// auto). `threads`: the planner's search threads (0 = every core). Throws
// std::invalid_argument (exit 2) naming the section whose tp·dp·pp asks for
// more GPUs than there are (NCCL holds one rank of a group per GPU), or
// when the planner can't fit the run in the GPUs' memory. Activations and
// hand-offs are costed at 4 bytes an element, as the engine stores them
// (RooflineCost's fp32_activations), not at a bf16 program's 2; hand-offs
// waiting for their consumer take their producer's GPU memory, up to
// 1/kResidentHandoffShare of it per replica stage
// (SimOptions::resident_handoff_budget).
Plan plan_gpu_run(const SectionGraph& graph, const Cluster& gpus, int64_t threads, const Batch& sample);

// The plan a training run executes. A config whose `[cluster]` says
// `device = "cpu"` describes the run's own machines (docs/runtime.md,
// "Placement"): the run is planned on that cluster by the planner itself
// (its devices CPU slots, its device groups kept: sections may share
// devices or not) and `cluster` is set — each node is a process, so
// `processes` must be 1 or the cluster's node count. Otherwise
// plan_cpu_run on `slots` and no cluster. Sized on `sample`. Throws
// std::invalid_argument (exit 2) for a bad [cluster], a node count that
// is not the processes', or a run the planner can't fit.
struct RunPlan {
  Plan plan;
  std::optional<Cluster> cluster;
};
RunPlan plan_run(const SectionGraph& graph, const RuntimeConfig& config, int64_t slots, int64_t processes,
                 const Batch& sample);

// Each step's Schedule (plan/schedule.h: the same object the simulator
// runs), wavefront or monolithic, over the run's plan and the `cpu`
// device's roofline cost model, with each replica's backwards chained in
// issue order (plan/backward_order.h: deterministic gradient sums).
// Thread-safe: const after construction. `graph` and `plan` must outlive it.
class StepSchedules {
 public:
  // Throws std::invalid_argument for a policy other than wavefront or monolithic.
  // `cluster`: the one the plan was made on (plan_run, plan_gpu_run);
  // default cpu_cluster(plan.device_count()). fp32_activations: costed as
  // plan_gpu_run costs (RooflineCost's fp32_activations).
  StepSchedules(const SectionGraph& graph, const Plan& plan, const std::string& policy,
                const Cluster* cluster = nullptr, bool fp32_activations = false);
  ~StepSchedules();
  Schedule of(const Batch& batch) const;

 private:
  const SectionGraph& graph_;
  const Plan& plan_;
  Cluster cluster_;
  std::unique_ptr<CostModel> cost_;
  bool monolithic_ = false;
  int64_t monolithic_micro_batch_ = 1;
};

}  // namespace maestro
