// Tensor names and shapes of the built-in models (see model_tensors.h and
// docs/graph.md for the naming of each model).
#include "graph/model_tensors.h"

#include <fmt/format.h>

#include <stdexcept>

namespace maestro {

int64_t TensorShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// transformer: Hugging Face LlamaForCausalLM.
void transformer_tensors(const TransformerSpec& t, std::vector<TensorShape>& out) {
  const int64_t head_dim = t.hidden / t.heads;
  const int64_t kv_width = t.kv_heads * head_dim;
  out.push_back({"model.embed_tokens.weight", {t.vocab, t.hidden}});
  for (int64_t i = 0; i < t.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "input_layernorm.weight", {t.hidden}});
    out.push_back({p + "self_attn.q_proj.weight", {t.hidden, t.hidden}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_width, t.hidden}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_width, t.hidden}});
    out.push_back({p + "self_attn.o_proj.weight", {t.hidden, t.hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {t.hidden}});
    out.push_back({p + "mlp.gate_proj.weight", {t.ffn, t.hidden}});
    out.push_back({p + "mlp.up_proj.weight", {t.ffn, t.hidden}});
    out.push_back({p + "mlp.down_proj.weight", {t.hidden, t.ffn}});
  }
  out.push_back({"model.norm.weight", {t.hidden}});
  out.push_back({"lm_head.weight", {t.vocab, t.hidden}});
}

// vit: Hugging Face CLIPVisionModel ("pre_layrnorm" is HF's spelling).
void vit_tensors(const VitSpec& v, std::vector<TensorShape>& out) {
  const int64_t h = v.hidden;
  out.push_back({"vision_model.embeddings.class_embedding", {h}});
  out.push_back({"vision_model.embeddings.patch_embedding.weight", {h, v.channels, v.patch, v.patch}});
  out.push_back({"vision_model.embeddings.position_embedding.weight", {v.patches_per_image() + 1, h}});
  out.push_back({"vision_model.pre_layrnorm.weight", {h}});
  out.push_back({"vision_model.pre_layrnorm.bias", {h}});
  for (int64_t i = 0; i < v.layers; ++i) {
    const std::string p = fmt::format("vision_model.encoder.layers.{}.", i);
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
      out.push_back({p + "self_attn." + proj + ".weight", {h, h}});
      out.push_back({p + "self_attn." + proj + ".bias", {h}});
    }
    out.push_back({p + "layer_norm1.weight", {h}});
    out.push_back({p + "layer_norm1.bias", {h}});
    out.push_back({p + "mlp.fc1.weight", {v.ffn, h}});
    out.push_back({p + "mlp.fc1.bias", {v.ffn}});
    out.push_back({p + "mlp.fc2.weight", {h, v.ffn}});
    out.push_back({p + "mlp.fc2.bias", {h}});
    out.push_back({p + "layer_norm2.weight", {h}});
    out.push_back({p + "layer_norm2.bias", {h}});
  }
  out.push_back({"vision_model.post_layernorm.weight", {h}});
  out.push_back({"vision_model.post_layernorm.bias", {h}});
}

// audio_encoder: Whisper's encoder layer names; the two convolutions of
// Whisper are replaced by one linear frame embedding over frames_per_token
// mel frames (input [mel_bins * frames_per_token], frame-major).
void audio_tensors(const AudioEncoderSpec& a, std::vector<TensorShape>& out) {
  const int64_t h = a.hidden;
  out.push_back({"encoder.embed_frames.weight", {h, a.mel_bins * a.frames_per_token}});
  out.push_back({"encoder.embed_frames.bias", {h}});
  for (int64_t i = 0; i < a.layers; ++i) {
    const std::string p = fmt::format("encoder.layers.{}.", i);
    out.push_back({p + "self_attn.k_proj.weight", {h, h}});  // no bias, as in Whisper
    out.push_back({p + "self_attn.v_proj.weight", {h, h}});
    out.push_back({p + "self_attn.v_proj.bias", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {h, h}});
    out.push_back({p + "self_attn.q_proj.bias", {h}});
    out.push_back({p + "self_attn.out_proj.weight", {h, h}});
    out.push_back({p + "self_attn.out_proj.bias", {h}});
    out.push_back({p + "self_attn_layer_norm.weight", {h}});
    out.push_back({p + "self_attn_layer_norm.bias", {h}});
    out.push_back({p + "fc1.weight", {a.ffn, h}});
    out.push_back({p + "fc1.bias", {a.ffn}});
    out.push_back({p + "fc2.weight", {h, a.ffn}});
    out.push_back({p + "fc2.bias", {h}});
    out.push_back({p + "final_layer_norm.weight", {h}});
    out.push_back({p + "final_layer_norm.bias", {h}});
  }
  out.push_back({"encoder.layer_norm.weight", {h}});
  out.push_back({"encoder.layer_norm.bias", {h}});
}

// mlp: layers.{i} maps in -> hidden -> ... -> hidden -> out.
void mlp_tensors(const MlpSpec& m, std::vector<TensorShape>& out) {
  for (int64_t i = 0; i < m.layers; ++i) {
    const int64_t in = i == 0 ? m.in : m.hidden;
    const int64_t o = i == m.layers - 1 ? m.out : m.hidden;
    out.push_back({fmt::format("layers.{}.weight", i), {o, in}});
    out.push_back({fmt::format("layers.{}.bias", i), {o}});
  }
}

}  // namespace

std::vector<TensorShape> model_tensors(const ModelSpec& model) {
  std::vector<TensorShape> out;
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) transformer_tensors(*t, out);
  else if (auto* v = std::get_if<VitSpec>(&model.spec)) vit_tensors(*v, out);
  else if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) audio_tensors(*a, out);
  else mlp_tensors(std::get<MlpSpec>(model.spec), out);
  return out;
}

namespace {

// Checked int64 arithmetic for parameter_count.
struct Count {
  int64_t v;
  friend Count operator+(Count a, Count b) {
    int64_t r;
    if (__builtin_add_overflow(a.v, b.v, &r)) throw std::overflow_error("the parameter count overflows 64 bits");
    return {r};
  }
  friend Count operator*(Count a, Count b) {
    int64_t r;
    if (__builtin_mul_overflow(a.v, b.v, &r)) throw std::overflow_error("the parameter count overflows 64 bits");
    return {r};
  }
};

}  // namespace

int64_t parameter_count(const ModelSpec& model) {
  // Each formula is the sum of the shapes model_tensors lists (tested equal).
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    const Count h{t->hidden}, kv{t->kv_heads * (t->hidden / t->heads)}, f{t->ffn}, vocab{t->vocab};
    const Count layer = h + h * h + kv * h + kv * h + h * h + h + f * h + f * h + h * f;
    return (vocab * h + Count{t->layers} * layer + h + vocab * h).v;
  }
  if (auto* v = std::get_if<VitSpec>(&model.spec)) {
    const Count h{v->hidden}, f{v->ffn};
    const Count embed = h + h * Count{v->channels} * Count{v->patch} * Count{v->patch} +
                        (Count{v->patches_per_image()} + Count{1}) * h + h + h;
    const Count layer = Count{4} * (h * h + h) + h + h + f * h + f + h * f + h + h + h;
    return (embed + Count{v->layers} * layer + h + h).v;
  }
  if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) {
    const Count h{a->hidden}, f{a->ffn};
    const Count layer = Count{4} * (h * h) + Count{3} * h + h + h + f * h + f + h * f + h + h + h;
    return (h * Count{a->mel_bins} * Count{a->frames_per_token} + h + Count{a->layers} * layer + h + h).v;
  }
  const auto& m = std::get<MlpSpec>(model.spec);
  if (m.layers == 1) return (Count{m.out} * Count{m.in} + Count{m.out}).v;
  const Count h{m.hidden};
  return (h * Count{m.in} + h + Count{m.layers - 2} * (h * h + h) + Count{m.out} * h + Count{m.out}).v;
}

int64_t layer_count(const ModelSpec& model) {
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) return t->layers;
  if (auto* v = std::get_if<VitSpec>(&model.spec)) return v->layers;
  if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) return a->layers;
  return 0;
}

LayerRange stage_layers(const ModelSpec& model, int64_t stage, int64_t stages) {
  const int64_t L = layer_count(model);
  if (stages < 1 || stage < 0 || stage >= stages)
    throw std::invalid_argument(fmt::format("pipeline stage {} of {} does not exist", stage, stages));
  if (stages == 1) return {0, L};
  if (std::holds_alternative<MlpSpec>(model.spec))
    throw std::invalid_argument(fmt::format("an mlp runs as one pipeline stage, not {}", stages));
  if (L < stages)
    throw std::invalid_argument(fmt::format("{} layers cannot be split into {} pipeline stages", L, stages));
  return {stage * L / stages, (stage + 1) * L / stages};
}

std::vector<TensorShape> stage_tensors(const ModelSpec& model, int64_t stage, int64_t stages) {
  const LayerRange range = stage_layers(model, stage, stages);
  std::vector<TensorShape> all = model_tensors(model);
  if (stages == 1) return all;
  std::vector<TensorShape> out;
  bool after_layers = false;  // past the layer stack: the epilogue
  for (TensorShape& t : all) {
    // Layer tensors are named "...layers.<i>.<rest>".
    const size_t at = t.name.find("layers.");
    int64_t layer = -1;
    if (at != std::string::npos) layer = std::stoll(t.name.substr(at + 7));
    const bool mine = layer >= 0 ? (layer >= range.first && layer < range.last)
                                 : (after_layers ? stage == stages - 1 : stage == 0);
    if (layer >= 0 && layer == layer_count(model) - 1) after_layers = true;
    if (mine) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace maestro
