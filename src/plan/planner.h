// The planner: resolves every `auto` in the program's sections — tp, pp, dp,
// micro_batch, and so each section's device count — for a cluster, keeping
// explicit values. It balances the sections' estimated times per step under
// the device budget and checks that every device fits in memory (parameter
// state plus the in-flight micro-batches' activations). docs/planner.md
// describes the search.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/batch.h"
#include "graph/section_graph.h"
#include "graph/tensor_parallel.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/plan.h"

namespace maestro {

// The choices the planner searches for an `auto` degree or micro-batch
// size; the tuned Megatron baseline searches the same (baselines.h).
inline constexpr int64_t kDegreeChoices[] = {1, 2, 4, 8};
inline constexpr int64_t kMicroBatchChoices[] = {1, 2, 4, 8, 16, 32};

// Whether `model` splits over `tp` ranks (heads, kv heads, ffn multiples of
// tp: tp_divisibility_error). Every search — the planner's and each
// baseline's — tries only such a tp: the engine cannot run another, and
// neither can Megatron-LM (its `divide()` asserts the same).
inline bool splits_over_tp(const ModelSpec& model, int64_t tp) { return tp_divisibility_error(model, tp).empty(); }

// Micro-batches whose activations stage 0 of a replica keeps alive at once
// under 1F1B: pp (Plan::in_flight_cap is the largest pp of the plan).
inline int64_t in_flight_micro_batches(int64_t pp) { return pp; }

// The active samples of section s in `batch`, packed in loader order into
// micro-batches of `micro_batch` (pointers into the batch).
std::vector<std::vector<const Sample*>> loader_order_micro_batches(const SectionGraph& graph, int s,
                                                                    const Batch& batch, int64_t micro_batch);

// Estimated seconds of one step of section s under plan p on `batch`: its
// micro-batches' forward + backward balanced over p.dp replicas (never less
// than the largest micro-batch), a pipeline fill of pp-1 micro-batches, then
// grad sync (with overlap_grad_sync only what is left after the largest
// micro-batch's backward, ScheduleLevers::overlap_grad_sync) and optimizer.
double section_step_s(const SectionGraph& graph, const CostModel& cost, int s, const SectionPlan& p,
                      const Batch& batch, bool overlap_grad_sync = false);

// Section s's best shape with the whole cluster to itself: the fastest
// section_step_s over the planner's choices that fits the device (its dp
// at most the cluster's devices / (tp·pp)). The sequential baseline's plan.
SectionPlan best_shape_alone(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost, int s,
                             const Batch& batch);

// Every shape best_shape_alone chooses from, fastest first, with its memory
// per device: parameter state, and the in-flight micro-batches' activations
// (each alone fits the device). The sequential baseline's search.
struct ShapeOption {
  SectionPlan plan;
  int64_t state_bytes = 0;       // CostModel::weights_bytes_per_device
  int64_t activation_bytes = 0;  // in_flight_micro_batches(pp) × its largest micro-batch's
  double step_s = 0;             // section_step_s
};
std::vector<ShapeOption> shapes_alone(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost, int s,
                                      const Batch& batch);

// What the planner may do; the switches exist for ablations
// (bench/plan_ablation). `levers` is copied into the plan.
struct PlannerOptions {
  bool disjoint_placement = true;  // also try sections on separate device groups
  bool raise_in_flight_cap = true; // in-flight cap up to what memory allows, not just the largest pp
  ScheduleLevers levers;
  // The best plan sharing the devices is swept section by section again
  // until no section's shape changes (docs/planner.md, "Search").
  bool sweep_best_again = true;
  // Later steps' batches on which the chosen plan's peak memory must fit
  // too (the search ranks on step 0's alone): where it does not, its
  // in-flight cap is lowered to the largest that fits on every batch. A
  // step's largest samples and their mix move the peak (omni_whisper_7b on
  // 64 H100: 78.0 GB on step 0, 84.6 GB on step 1 at the same cap). The
  // search's finalists are then ranked by their mean step over all the
  // batches. Not where the search is bounded (more than 4,096 samples ×
  // sections). maestro-run passes steps 1-3 (docs/planner.md).
  std::vector<Batch> later_batches;
  // Called after each simulation the search runs (a remembered result
  // reruns nothing and is not counted) with how many it has run so far in
  // this planning: maestro-run's status line while a large cluster plans
  // (docs/cli.md). Planning is the same with or without it.
  std::function<void(int64_t simulations)> on_simulation;
  // Threads that simulate the search's next candidates ahead of it, in
  // parallel (0 = every core; maestro-run passes `[runtime] threads`). The
  // search still takes its candidates in the same order, so the plan is the
  // same for any number of threads (docs/planner.md, "Threads").
  int64_t threads = 0;
  // SimOptions::resident_handoff_budget of every simulation (a run in one
  // process on GPUs: actors/run_plan.h); 0 = hand-offs take no device memory.
  int64_t resident_handoff_budget = 0;
};

// Throws PlanError naming the section, the device kind and what ran out
// when an explicit choice — or every choice — does not fit; `batch` is the
// sample the planner sizes work and activations with (step 0's).
Plan plan_program(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost, const Batch& batch,
                  const PlannerOptions& options = {});

}  // namespace maestro
