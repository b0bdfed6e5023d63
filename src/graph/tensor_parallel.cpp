// Which tensor is split how under tensor parallelism, and the slicing (see
// tensor_parallel.h).
#include "graph/tensor_parallel.h"

#include <algorithm>
#include <cstring>

namespace maestro {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TpSplit tp_split(const ModelSpec& model, const std::string& n) {
  if (std::holds_alternative<TransformerSpec>(model.spec)) {
    if (n == "model.embed_tokens.weight" || n == "lm_head.weight") return TpSplit::Rows;
    for (const char* col : {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."})
      if (contains(n, col)) return TpSplit::Rows;
    if (contains(n, "o_proj.") || contains(n, "down_proj.")) return TpSplit::Columns;
    return TpSplit::Replicated;
  }
  if (const auto* m = std::get_if<MlpSpec>(&model.spec)) {
    // "layers.<i>.weight" / "layers.<i>.bias"
    const int64_t i = std::stoll(n.substr(7, n.find('.', 7) - 7));
    const bool weight = ends_with(n, ".weight");
    if (i % 2 == 0) return i + 1 < m->layers ? TpSplit::Rows : TpSplit::Replicated;
    return weight ? TpSplit::Columns : TpSplit::Replicated;
  }
  // vit, audio_encoder: encoder layers.
  if (!contains(n, "layers.")) return TpSplit::Replicated;
  for (const char* col : {"q_proj.", "k_proj.", "v_proj.", "fc1."})
    if (contains(n, col)) return TpSplit::Rows;
  if ((contains(n, "out_proj.") || contains(n, "fc2.")) && ends_with(n, ".weight")) return TpSplit::Columns;
  return TpSplit::Replicated;
}

TensorShape tp_shard_shape(const ModelSpec& model, const TensorShape& whole, int64_t tp) {
  TensorShape s = whole;
  switch (tp_split(model, whole.name)) {
    case TpSplit::Replicated: break;
    case TpSplit::Rows: s.shape[0] = tp_padded_vocab(whole.shape[0], tp) / tp; break;  // exact unless vocabulary
    case TpSplit::Columns: s.shape[1] = whole.shape[1] / tp; break;
  }
  return s;
}

namespace {

// Copies between a whole tensor and a rank's shard; to_shard picks the direction.
void copy_slice(float* shard, float* whole, const ModelSpec& model, const TensorShape& t, int64_t tp, int64_t rank,
                bool to_shard) {
  const TensorShape s = tp_shard_shape(model, t, tp);
  const int64_t n = s.numel();
  auto move = [&](float* sh, float* wh, int64_t count) {
    if (count <= 0) return;
    if (to_shard) std::memcpy(sh, wh, size_t(count) * sizeof(float));
    else std::memcpy(wh, sh, size_t(count) * sizeof(float));
  };
  switch (tp_split(model, t.name)) {
    case TpSplit::Replicated: move(shard, whole, n); break;
    case TpSplit::Rows: {
      const int64_t row = n / s.shape[0], first = rank * s.shape[0];
      const int64_t rows = std::clamp<int64_t>(t.shape[0] - first, 0, s.shape[0]);
      if (to_shard) std::fill(shard, shard + n, 0.0f);
      move(shard, whole + first * row, rows * row);
      break;
    }
    case TpSplit::Columns: {
      const int64_t rows = t.shape[0], cols = t.shape[1], mine = s.shape[1];
      for (int64_t r = 0; r < rows; ++r) move(shard + r * mine, whole + r * cols + rank * mine, mine);
      break;
    }
  }
}

}  // namespace

void tp_slice(float* shard, const float* whole, const ModelSpec& model, const TensorShape& t, int64_t tp,
              int64_t rank) {
  copy_slice(shard, const_cast<float*>(whole), model, t, tp, rank, true);
}

void tp_unslice(float* whole, const float* shard, const ModelSpec& model, const TensorShape& t, int64_t tp,
                int64_t rank) {
  copy_slice(const_cast<float*>(shard), whole, model, t, tp, rank, false);
}

}  // namespace maestro
