// FLOP, activation and memory counts of the built-in models, from their
// definitions (sect-language.md) — what the planner and the simulator cost
// a section with. Formulas, and the published figures they were checked
// against, are in docs/graph.md.
//
// Token units: a "sequence length" is counted in the section's own tokens
// (architecture.md, "Definitions"): transformer and audio_encoder positions,
// mlp rows, and for a vit the embeddings it emits, images × (image/patch)²
// (the class token each image carries inside the vit is added here).
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/program.h"

namespace maestro {

// Bytes of one element in the working precision: bf16 2, fp32 4.
int64_t precision_bytes(Precision precision);

// Forward FLOPs of one micro-batch made of sequences of these lengths (one
// entry per sample; a vit entry covers that sample's images). Counts 2·in·out
// per linear per token, patch/frame embeddings, the LM head on every position
// (where its logits are read: TransformerSpec::logits_read),
// and attention's QKᵀ and AV: 4·s²·hidden per layer per sequence
// (bidirectional), half that when causal. Norms, activations and softmax are
// not counted.
double forward_flops(const ModelSpec& model, const std::vector<int64_t>& seq_lens);
// The same for one sequence of `tokens`.
double forward_flops(const ModelSpec& model, int64_t tokens);
// Attention's share of forward_flops(model, tokens): QKᵀ and AV, the only
// GEMMs without weights, whose size is the sequence's alone (the roofline
// costs them apart from the weight GEMMs; plan/roofline_cost.cpp).
double attention_forward_flops(const ModelSpec& model, int64_t tokens);

// A section's FLOPs for one micro-batch in one training step.
struct SectionFlops {
  double forward = 0;    // forward_flops
  double backward = 0;   // 2 × forward for train sections, 0 for frozen
  double recompute = 0;  // the recomputed layers' forward again (train only): forward × k/L
  double total() const { return forward + backward + recompute; }
};
SectionFlops section_flops(const Section& section, const std::vector<int64_t>& seq_lens);
// The same with `recomputed` of the model's layers recomputed (a plan's choice).
SectionFlops section_flops(const Section& section, const std::vector<int64_t>& seq_lens, int64_t recomputed);

// What a section keeps alive between its forward and backward.
enum class ActivationKind {
  Train,    // every tensor backward needs per layer; only the input of a recomputed layer
  Forward,  // frozen: the working set of one layer plus the output
};

// Activation bytes, excluding attention probabilities, per token; with
// `recomputed` of the model's layers (Train only) keeping their input alone.
int64_t activation_bytes_per_token(const ModelSpec& model, Precision precision, ActivationKind kind,
                                   int64_t recomputed = 0);
// Activation bytes of a micro-batch: per-token bytes × tokens plus the stored
// attention probabilities (heads · s² per layer not recomputed per sequence;
// Train only, one layer's worth for Forward).
int64_t activation_bytes(const ModelSpec& model, const std::vector<int64_t>& seq_lens, Precision precision,
                         ActivationKind kind, int64_t recomputed = 0);
ActivationKind activation_kind(Mode mode);

// Bytes of one parameter's state per device, before dividing by tp·pp:
// train bf16 = 2 (weights) + 4 (grad) + 4 (master) + 4 + 4 (Adam m, v) = 18;
// train fp32 = 4 + 4 + 4 + 4 = 16 (the weights are the master copy);
// frozen = 2 (bf16) or 4 (fp32).
struct SectionMemory {
  int64_t weights = 0;      // weights in the working precision (bf16 2 B, fp32 4 B)
  int64_t gradients = 0;    // fp32 gradients (train)
  int64_t optimizer = 0;    // fp32 master copy (bf16 only) + Adam m, v (train)
  int64_t activations = 0;  // one micro-batch
  int64_t total() const { return weights + gradients + optimizer + activations; }
};

// Memory of one device of a section split tp·pp ways, running a micro-batch
// of these sequence lengths: parameter state / (tp·pp) plus the micro-batch's
// activations / (tp·pp). optimizer_shards > 1 (ZeRO-1 over that many dp
// replicas): the optimizer state (master copy, Adam m, v) is further split
// that many ways; weights and gradients stay whole (bf16 train: 6 + 12/dp
// bytes per parameter, Megatron's distributed optimizer).
SectionMemory memory_per_device(const Section& section, int64_t tp, int64_t pp,
                                const std::vector<int64_t>& micro_batch_seq_lens, Precision precision,
                                int64_t optimizer_shards = 1);

}  // namespace maestro
