// RooflineCost: the CostModel of a real cluster. Compute time is a section's
// FLOPs (graph/counts.h, actual token counts, attention's s² per sequence)
// over the device's peak × a GEMM efficiency that falls for small GEMMs —
// the weight GEMMs' at the micro-batch's size, attention's so that a
// micro-batch is never faster than a part of it (roofline_cost.cpp);
// communication is ring collectives and point-to-point sends over the
// cluster's links. The efficiency curve is calibrated so that Llama-2-7B
// training on 8×H100 lands in Megatron-LM's published MFU range
// (docs/planner.md, "Calibration"; tests/plan/cost_test.cpp checks it).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/counts.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"

namespace maestro {

// Ring all-reduce of `bytes` over n participants: 2(n-1)/n · bytes / bandwidth.
double ring_all_reduce_s(double bytes, int64_t n, double bytes_per_s);
// Ring reduce-scatter or all-gather (each half of the all-reduce):
// (n-1)/n · bytes / bandwidth, `bytes` the whole (unsharded) buffer.
double ring_reduce_scatter_s(double bytes, int64_t n, double bytes_per_s);

class RooflineCost : public CostModel {
 public:
  // The graph must outlive the cost model. GEMM efficiency: the device's.
  // fp32_activations: activations, hand-offs and tp all-reduces are counted
  // at 4 bytes an element whatever the working precision — how Maestro's
  // engine stores them (nn/: every activation fp32; the plan of a run on
  // GPUs, actors/run_plan.h). Default: at the working precision's width, as
  // an engine with bf16 activations (Megatron-LM) keeps them.
  RooflineCost(const SectionGraph& graph, const Cluster& cluster, bool fp32_activations = false);

  double forward_s(int section, const std::vector<const Sample*>& samples, const SectionPlan& plan) const override;
  double backward_s(int section, const std::vector<const Sample*>& samples, const SectionPlan& plan) const override;
  double transfer_s(const Flow& flow, const std::vector<const Sample*>& samples, const SectionPlan& from,
                    const SectionPlan& to) const override;
  int64_t transfer_bytes(const Flow& flow, const std::vector<const Sample*>& samples) const override;
  int64_t stage_handoff_bytes(int section, const std::vector<const Sample*>& samples,
                              const SectionPlan& plan) const override;
  double grad_sync_s(int section, const SectionPlan& plan) const override;
  double optimizer_s(int section, const SectionPlan& plan) const override;
  int64_t weights_bytes_per_device(int section, const SectionPlan& plan) const override;
  int64_t activation_bytes(int section, const std::vector<const Sample*>& samples,
                           const SectionPlan& plan) const override;
  int64_t kept_activation_bytes(int section, const std::vector<const Sample*>& samples,
                                const SectionPlan& plan) const override;
  // The samples' token counts and the stage's forward worked out once for all four.
  MicroBatchCosts micro_batch_costs(int section, const std::vector<const Sample*>& samples,
                                    const SectionPlan& plan) const override;
  // At the cost model's peak: the device's FLOP rate × the efficiency
  // curve's maximum (architecture.md, "Lower bound").
  double peak_device_s(int section, const Sample& sample) const override;

  // The sequence lengths of the samples in the section (graph.tokens), and
  // the efficiency a micro-batch of `tokens` reaches with this tp.
  std::vector<int64_t> seq_lens(int section, const std::vector<const Sample*>& samples) const;
  double efficiency(int section, int64_t tokens, int64_t tp) const;
  double peak_flops() const;  // of the working precision
  // The bytes one tensor-parallel rank all-reduces to run these samples
  // forward (and backward, in train mode) at plan.tp, as the engine does it
  // (Megatron, nn/): per layer two [tokens, hidden] all-reduces each way; a
  // transformer also its vocabulary-parallel embedding (forward) and head
  // input gradient (backward) [text, hidden], and its loss's row statistics
  // (2 floats per text row for cross-entropy, 3 for kl); a vit's sequences
  // carry a class token each; an mlp all-reduces each row-parallel layer's
  // output forward and each column-parallel layer's input gradient backward.
  // A recomputed layer stack runs its forward's all-reduces again in backward.
  // 0 at tp = 1. At the working precision's element size.
  int64_t tp_all_reduce_bytes(int section, const std::vector<const Sample*>& samples, const SectionPlan& plan) const;
  const Cluster& cluster() const { return cluster_; }

 private:
  // Compute of one stage's forward plus its tensor-parallel all-reduces.
  double stage_forward_s(int section, const std::vector<int64_t>& lens, const SectionPlan& plan) const;
  // One stage's hand-off of its output to the next stage (pp > 1): its
  // bytes, whole (0 when pp = 1), and its time, split over the tp links.
  int64_t stage_bytes(int section, int64_t tokens, const SectionPlan& plan) const;
  double stage_send_s(int section, int64_t tokens, const SectionPlan& plan) const;
  // backward_s from the stage's forward and hand-off (train sections).
  double stage_backward_s(int section, double forward, double send, const SectionPlan& plan) const;
  // activation_bytes and kept_activation_bytes from the sequence lengths
  // (`all`: activation_bytes of the same lengths).
  int64_t activation_bytes_of(int section, const std::vector<int64_t>& lens, const SectionPlan& plan) const;
  int64_t kept_activation_bytes_of(int section, const std::vector<int64_t>& lens, int64_t all,
                                   const SectionPlan& plan) const;
  Precision activation_precision() const;  // fp32 with fp32_activations, else the working precision
  int64_t element_bytes() const;             // of an activation
  // memory_per_device's parameter state for the plan (ZeRO-1 shards when
  // plan.shard_optimizer and dp > 1).
  SectionMemory parameter_state(int section, const SectionPlan& plan) const;

  const SectionGraph& graph_;
  Cluster cluster_;
  bool fp32_activations_ = false;
};

}  // namespace maestro
