// The baselines a wavefront plan is compared with, on the same cost model
// (architecture.md, "Megatron baseline", "Sequential baseline"; the ladder
// sequential → megatron → mimo → Maestro in docs/planner.md, "Baselines"):
//  - megatron: Megatron-LM as users run it (tuned_faithful_megatron below).
//  - mimo: Megatron's MIMO model, each module its own grid (tuned_mimo).
//  - megatron-ideal: one tp, pp, dp for the whole model, every section on every
//    device, one micro-batch size, samples in loader order, each micro-batch
//    through all its sections, 1F1B-style (at most pp in flight per lane);
//    tuned: the best feasible configuration of the tp × pp × micro_batch grid.
//  - sequential: each section alone on all devices with its own best shape,
//    one after another, as the step can run: every section's state resident
//    on the devices, a trained encoder's backward after its consumers'
//    (sequential_baseline below); sequential-ideal without those two.
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
  int64_t recompute_level = 0;  // recomputation for the `recompute = auto` sections (FaithfulMegatronConfig's)
  std::string str() const;  // "tp=2 pp=1 dp=4 micro_batch=2[ distributed_optimizer][ recompute[_half|_stage]]"
};

// " recompute_half", " recompute", " recompute_stage" or "" for a
// configuration's recompute_level.
inline std::string recompute_level_note(int64_t level) {
  return level == 0 ? "" : level == 1 ? " recompute_half" : level == 2 ? " recompute" : " recompute_stage";
}

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
  std::string name;            // "sequential" | "sequential-ideal" | "megatron" | "megatron-ideal" | "mimo"
  double iteration_s = 0;      // mean over the batches
  std::string config;          // megatron: MegatronConfig::str(); sequential: each section's shape (and choice)
  std::optional<MegatronConfig> megatron;
  std::string error;           // set (and no time) when no configuration of the baseline fits: why
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

// The sections one after another, each alone on the whole cluster with its
// own shape (planner.h shapes_alone), as a step can run them
// (docs/planner.md, "Baselines"): forward phases in topological order, the
// backward of a trained section after its consumers' backward. So on every
// device, for the whole step, sit every section's parameter state and the
// outputs each hands on (its share of the step's samples, held until the
// consumer's phase); a trained section with consumers (an encoder, a
// projector) either holds its activations for its share of the step from
// its forward to its backward, or runs forward twice — forward only, keeping
// its outputs, then forward again with its backward (the cost of one more
// forward). Each phase adds its own in-flight activations. The shapes and
// hold-or-twice are searched together (exhaustive with bounds, over each
// section's Pareto-best options) for the least sum of section times on
// batches[0] that fits a device; the result is the mean over the batches of
// Σ section_step_s (+ the extra forward). Transfers between sections are not
// charged. Throws PlanError when no combination fits. overlap_grad_sync:
// each section's grad sync overlapped with its last backward, the rule the
// simulator applies to a plan with ScheduleLevers::overlap_grad_sync.
BaselineResult sequential_baseline(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                   const std::vector<Batch>& batches, bool overlap_grad_sync = false);
// The same without those two rules ("sequential-ideal"): each section's best
// shape as if it had the devices' memory to itself and could run forward
// and backward before its consumers (best_shape_alone); the sum of
// section_step_s. Not a schedule that can run where the sections' states do
// not fit together; an optimistic reference.
BaselineResult sequential_ideal_baseline(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                         const std::vector<Batch>& batches, bool overlap_grad_sync = false);

// ---- Megatron-LM as users run it (megatron_baseline.cpp) ----
// One (tp, pp, dp, micro_batch) for the whole model. Transformer sections
// (the LLM; in KD the student and the teacher, in the student's layout,
// forward only) are split over the pp stages, first_stage_layers of the
// main decoder's L on stage 0 (--decoder-first-pipeline-num-layers), the
// rest evenly; every other section (encoders, projectors) runs whole on
// stage 0 at the same tp. Samples in loader order, rank r taking samples
// [r·mb, (r+1)·mb) of each mb·dp chunk (no balancing). The decoder sees
// each micro-batch padded to its longest sequence (pp = 1) or to
// decoder_seq_length = the decoder's max_seq (pp > 1); with packing, the
// samples are packed in loader order into bins of max_seq tokens, the
// micro-batch is micro_batch bins, each bin's tail padded.
struct FaithfulMegatronConfig {
  int64_t tp = 1, pp = 1, dp = 1, micro_batch = 1;
  int64_t first_stage_layers = 1;  // of the main decoder, on stage 0 (all of them when pp = 1)
  bool packing = false;
  bool distributed_optimizer = false;
  // Activation recomputation (--recompute-granularity full
  // --recompute-method block --recompute-num-layers: half of each stage's
  // layers, or all of them; --recompute-method uniform with a stage's layers
  // as one chunk: the stage whole), in SectionPlan's levels, one setting for the
  // model as Megatron's; it reaches the sections with `recompute = auto`
  // (`recompute = true | N` sections recompute either way). Searched when
  // some trained section has `recompute = auto`: the same freedom as the
  // planner.
  int64_t recompute_level = 0;
  std::string str() const;
};

// The share of section s's layers (and so its time, memory and gradients)
// on pipeline stage j of the sub-model `sections` (all the graph's for the
// megatron baseline): 1 on stage 0 and 0 elsewhere for a non-transformer
// (encoder, projector); a transformer — the main decoder and, in KD, the
// teacher alike — first_stage_layers / L on stage 0 (L: the main decoder's
// layers, the trained transformer with the most) and the rest evenly.
double megatron_stage_share(const SectionGraph& graph, const std::vector<int>& sections, int s, int64_t stage,
                            const FaithfulMegatronConfig& config);
// The padded decoder lengths of one micro-batch's active samples in section s
// (padding mode): each the longest in the micro-batch, or seq_length when pp > 1.
std::vector<int64_t> padded_lengths(const SectionGraph& graph, int s, const std::vector<const Sample*>& micro_batch,
                                    int64_t pp, int64_t seq_length);
// The batch's samples active in section s packed in loader order into bins
// of at most seq_length tokens (a new bin when the next sample does not fit).
std::vector<std::vector<const Sample*>> pack_loader_order(const SectionGraph& graph, int s, const Batch& batch,
                                                         int64_t seq_length);
// Non-interleaved 1F1B (Megatron's schedules.py) of one dp rank: fwd[i][j],
// bwd[i][j] the seconds of micro-batch i on stage j; the time the last stage
// finishes its last operation.
double one_f_one_b_s(const std::vector<std::vector<double>>& fwd, const std::vector<std::vector<double>>& bwd);

// One configuration's step on `batch`: the slowest dp rank's 1F1B pipeline,
// then the slowest stage's grad sync and optimizer step. *problem (when
// given) is set to why it does not fit a device ("" when it does): per
// stage, its parameter state plus pp - j in-flight micro-batches.
double faithful_megatron_iteration_s(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                     const FaithfulMegatronConfig& config, const Batch& batch,
                                     std::string* problem = nullptr);
// Searches tp ∈ kDegreeChoices within a node, pp ∈ kDegreeChoices, dp
// filling the cluster, micro_batch ∈ kMicroBatchChoices, first-stage layers
// (the even split, ¾, ½, ¼ of it), padding vs packing, the distributed
// optimizer off/on, on batches[0]; the best feasible one's mean over the
// batches. Throws PlanError when none fits.
BaselineResult tuned_faithful_megatron(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                                       const std::vector<Batch>& batches);

// ---- Megatron MIMO (megatron_baseline.cpp) ----
// Modules: the trained sections with a loss (the language model) form one;
// every other section is its own. Each module is tuned alone on its devices
// like the megatron baseline (its own tp, pp, dp, one static micro_batch,
// loader order). Colocated: all modules on all devices, one after another.
// Non-colocated: the other modules on the first a devices (a = a node, 2, 4,
// ... nodes), the language module on the rest, micro-batches streamed: the
// step is the slower group's time plus the faster one's per micro-batch of
// the language module. Both layouts tried; the faster is reported. Modules
// on the same devices are tuned together: their parameter states stay there
// all step (shared_devices_fit.h).
BaselineResult tuned_mimo(const SectionGraph& graph, const Cluster& cluster, const CostModel& cost,
                          const std::vector<Batch>& batches);

}  // namespace maestro
