// The baselines a wavefront plan is compared with, simulated on the same
// cost model (architecture.md, "Megatron baseline", "Sequential baseline"):
//  - megatron: one tp, pp, dp for the whole model, every section on every
//    device, one micro-batch size, samples in loader order, each micro-batch
//    through all its sections, 1F1B-style (at most pp in flight per lane);
//    tuned: the best feasible configuration of the tp × pp × micro_batch grid.
//  - sequential: the wavefront plan's per-section shapes, but the sections
//    one after another, each on all devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/batch.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace maestro {

struct MegatronConfig {
  int64_t tp = 1, pp = 1, dp = 1, micro_batch = 1;
  bool distributed_optimizer = false;  // --use-distributed-optimizer (ZeRO-1) for the train sections
  std::string str() const;  // "tp=2 pp=1 dp=4 micro_batch=2[ distributed_optimizer]"
};

// Every section on devices [0, tp·pp·dp) with the same degrees. Encoders and
// projectors are split over the pp stages like the LLM (Megatron puts them on
// stage 0, which only unbalances its pipeline: this is the kinder choice).
Plan megatron_plan(const SectionGraph& graph, const Cluster& cluster, const MegatronConfig& config);

// The monolithic schedule of schedule.h without its lane chaining across
// micro-batches, so a lane's pipeline overlaps consecutive micro-batches;
// the in-flight cap of pp makes it 1F1B-like.
Schedule megatron_schedule(const SectionGraph& graph, const Plan& plan, Batch batch, int64_t micro_batch);

// Why the configuration does not fit a device ("" when it does): parameter
// state of all sections plus pp in-flight micro-batches' activations.
std::string megatron_memory_problem(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                    const MegatronConfig& config, const Batch& batch);

struct BaselineResult {
  std::string name;            // "megatron" | "sequential"
  double iteration_s = 0;      // mean over the batches
  std::string config;          // megatron: MegatronConfig::str(); sequential: ""
  std::optional<MegatronConfig> megatron;
};

// Searches the planner's grid (planner.h): tp ∈ kDegreeChoices (within a
// node), pp ∈ kDegreeChoices, micro_batch ∈ kMicroBatchChoices, dp filling
// the devices, the distributed optimizer off and (dp > 1) on, on batches[0]; reports the fastest
// feasible one's mean over all batches. Throws PlanError when none fits.
BaselineResult tuned_megatron(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                              const std::vector<Batch>& batches);
// One configuration's mean simulated iteration over the batches.
double megatron_iteration_s(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                            const MegatronConfig& config, const std::vector<Batch>& batches);

// Sum over sections of section_step_s (planner.h), each section with its
// own best shape on the whole cluster (best_shape_alone, chosen on
// batches[0]), mean over the batches. Independent of the wavefront plan.
// Transfers between sections are not charged, nor the other sections'
// weights on the devices (kind to the baseline). overlap_grad_sync: each
// section's grad sync overlapped with its last backward, the rule the
// simulator applies to a plan with ScheduleLevers::overlap_grad_sync.
BaselineResult sequential_baseline(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                   const std::vector<Batch>& batches, bool overlap_grad_sync = false);

}  // namespace maestro
