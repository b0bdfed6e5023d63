// Tensor parallelism (Megatron-LM) over the built-in models' tensors: which
// parameter is split how across `tp` ranks, each rank's shard shape, and the
// slicing between a whole Hugging Face tensor and a rank's shard. The single
// source of truth for the split: the engine allocates shards with it, loads
// and gathers whole tensors with it, the planner prints per-rank shapes.
//
//   transformer: q/k/v, gate/up are column-parallel (output rows split: the
//     attention heads, GQA kv heads and ffn columns), o/down row-parallel
//     (input columns split); embed_tokens and lm_head are vocabulary-
//     parallel (rows split, the vocabulary padded with zero rows to a
//     multiple of tp); norms replicated.
//   vit, audio_encoder: q/k/v and fc1 (weights and biases) column-parallel,
//     out_proj and fc2 weights row-parallel, their biases, the norms and the
//     embeddings replicated.
//   mlp: layers paired (0,1), (2,3), …: the first of a pair column-parallel
//     (weight and bias), the second row-parallel (weight; bias replicated);
//     an unpaired last layer replicated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/model_tensors.h"

namespace maestro {

enum class TpSplit {
  Replicated,  // every rank holds the whole tensor
  Rows,        // dim 0 split in tp contiguous blocks (padded with zero rows to a multiple of tp)
  Columns,     // dim 1 split in tp contiguous blocks
};

TpSplit tp_split(const ModelSpec& model, const std::string& tensor);

// The tensor's shard on each of tp ranks (the same shape on every rank).
TensorShape tp_shard_shape(const ModelSpec& model, const TensorShape& whole, int64_t tp);

// The transformer's vocabulary padded to a multiple of tp, and each rank's share.
inline int64_t tp_padded_vocab(int64_t vocab, int64_t tp) { return (vocab + tp - 1) / tp * tp; }

// shard[shard shape] = rank's slice of whole[whole shape] (zero past the end
// of a padded dimension), and back: whole's slice = shard (padding dropped).
void tp_slice(float* shard, const float* whole, const ModelSpec& model, const TensorShape& t, int64_t tp,
              int64_t rank);
void tp_unslice(float* whole, const float* shard, const ModelSpec& model, const TensorShape& t, int64_t tp,
                int64_t rank);

// Why the model cannot be split over tp ranks ("" when it can): the heads,
// GQA kv heads, ffn width (or the mlp's hidden width) must be multiples of
// tp. heads_only: the heads and kv heads only — the front end's check (the
// planner may still cost a tp the engine can't run; the runtime checks all).
// Inline: the front end's checker uses it without linking maestro_graph.
inline std::string tp_divisibility_error(const ModelSpec& model, int64_t tp, bool heads_only = false) {
  if (tp <= 1) return "";
  auto need = [&](const char* what, int64_t n) {
    return n % tp == 0 ? std::string() : fmt::format("'{}' ({}) must be a multiple of tp ({})", what, n, tp);
  };
  std::string e;
  if (const auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    for (auto [what, n] : {std::pair{"heads", t->heads}, {"kv_heads", t->kv_heads}, {"ffn", t->ffn}})
      if (e.empty() && !(heads_only && what[0] == 'f')) e = need(what, n);
  } else if (const auto* v = std::get_if<VitSpec>(&model.spec)) {
    e = need("heads", v->heads);
    if (e.empty() && !heads_only) e = need("ffn", v->ffn);
  } else if (const auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) {
    e = need("heads", a->heads);
    if (e.empty() && !heads_only) e = need("ffn", a->ffn);
  } else if (const auto* m = std::get_if<MlpSpec>(&model.spec)) {
    if (m->layers >= 2 && !heads_only) e = need("hidden", m->hidden);
  }
  return e;
}

}  // namespace maestro
