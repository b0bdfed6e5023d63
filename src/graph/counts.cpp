// FLOP, activation and memory counts of the built-in models (counts.h;
// formulas in docs/graph.md).
#include "graph/counts.h"

#include "graph/model_tensors.h"

namespace maestro {

int64_t precision_bytes(Precision p) { return p == Precision::BF16 ? 2 : 4; }

namespace {

// Images in a vit sequence of `tokens` emitted embeddings (rounded up; a
// pixel-shuffled vit emits tokens_per_image = patches / merge² per image).
int64_t vit_images(const VitSpec& v, int64_t tokens) {
  const int64_t n = v.tokens_per_image();
  return (tokens + n - 1) / n;
}

// Forward FLOPs of one sequence: the GEMMs with weights, and attention's
// QKᵀ and AV.
struct SequenceFlops {
  double weights = 0, attention = 0;
};
SequenceFlops sequence_forward_flops(const ModelSpec& model, int64_t s_tokens) {
  const double s = double(s_tokens);
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    const double h = double(t->hidden), kv = double(t->kv_heads * (t->hidden / t->heads));
    const double linear = 2.0 * (2 * h * h + 2 * h * kv + 3 * h * double(t->ffn));  // q,o + k,v + gate,up,down
    const double attention = (t->causal ? 2.0 : 4.0) * s * s * h;                     // QKᵀ + AV
    const double layers = double(t->layers), head = t->logits_read ? 2.0 * h * double(t->vocab) : 0.0;
    return {(layers * linear + head) * s, layers * attention};
  }
  if (auto* v = std::get_if<VitSpec>(&model.spec)) {
    const double h = double(v->hidden), n = double(v->patches_per_image());
    const double images = double(vit_images(*v, s_tokens)), pos = n + 1;  // + class token
    const double patch_embed = 2.0 * double(v->channels * v->patch * v->patch) * h * n;
    const double layer = 2.0 * (4 * h * h + 2 * h * double(v->ffn)) * pos;
    const double layers = double(v->layers);
    return {images * (patch_embed + layers * layer), images * layers * 4.0 * pos * pos * h};
  }
  if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) {
    const double h = double(a->hidden), layers = double(a->layers);
    const double frame_embed = 2.0 * double(a->mel_bins * a->frames_per_token) * h * s;
    const double layer = 2.0 * (4 * h * h + 2 * h * double(a->ffn)) * s;
    return {frame_embed + layers * layer, layers * 4.0 * s * s * h};
  }
  const auto& m = std::get<MlpSpec>(model.spec);
  double per_token = 0;
  for (int64_t i = 0; i < m.layers; ++i) {
    const int64_t in = i == 0 ? m.in : m.hidden, out = i == m.layers - 1 ? m.out : m.hidden;
    per_token += 2.0 * double(in) * double(out);
  }
  return {per_token * s, 0.0};
}

// Elements stored per token per layer, and per token outside the layers.
struct ActivationElements {
  int64_t per_layer = 0;
  int64_t outside = 0;
  int64_t layers = 0;
  int64_t heads = 0;        // attention probabilities: heads · s² per layer per sequence
  int64_t layer_input = 0;  // what recompute keeps per layer
};

ActivationElements activation_elements(const ModelSpec& model) {
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    const int64_t h = t->hidden, kv = t->kv_heads * (t->hidden / t->heads);
    // n1 in/out, q, k, v, attention out, n2 in/out, gate, up, silu(gate)·up
    const int64_t logits = t->logits_read ? t->vocab : 0;
    return {6 * h + 2 * kv + 3 * t->ffn, 2 * h + logits, t->layers, t->heads, h};  // + final norm in/out, logits
  }
  if (auto* v = std::get_if<VitSpec>(&model.spec)) {
    const int64_t h = v->hidden;
    // ln1 in/out, q, k, v, attention out, ln2 in/out, fc1 out, gelu out;
    // outside: patch pixels, pre/post LayerNorm inputs (+ the pixel-shuffled
    // copy of the output, h per position, when merge > 1)
    const int64_t shuffled = v->merge > 1 ? h : 0;
    return {8 * h + 2 * v->ffn, v->channels * v->patch * v->patch + 2 * h + shuffled, v->layers, v->heads, h};
  }
  if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) {
    const int64_t h = a->hidden;
    return {8 * h + 2 * a->ffn, a->mel_bins * a->frames_per_token + h, a->layers, a->heads, h};
  }
  const auto& m = std::get<MlpSpec>(model.spec);
  // input, then each hidden layer's pre- and post-activation
  return {0, m.in + 2 * m.hidden * (m.layers - 1), 0, 0, 0};
}

// The attention sequences behind `tokens` section tokens, as (count, length):
// one sequence of `tokens` positions, except a vit: one of n+1 per image.
std::pair<int64_t, int64_t> attention_sequences(const ModelSpec& model, int64_t tokens) {
  if (auto* v = std::get_if<VitSpec>(&model.spec)) return {vit_images(*v, tokens), v->patches_per_image() + 1};
  return {1, tokens};
}

}  // namespace

double forward_flops(const ModelSpec& model, const std::vector<int64_t>& seq_lens) {
  double total = 0;
  for (int64_t s : seq_lens) total += forward_flops(model, s);
  return total;
}

double forward_flops(const ModelSpec& model, int64_t tokens) {
  const SequenceFlops f = sequence_forward_flops(model, tokens);
  return f.weights + f.attention;
}

double attention_forward_flops(const ModelSpec& model, int64_t tokens) {
  return sequence_forward_flops(model, tokens).attention;
}

SectionFlops section_flops(const Section& section, const std::vector<int64_t>& seq_lens) {
  return section_flops(section, seq_lens, section.recompute);
}

SectionFlops section_flops(const Section& section, const std::vector<int64_t>& seq_lens, int64_t recomputed) {
  SectionFlops f;
  f.forward = forward_flops(section.model, seq_lens);
  if (section.mode == Mode::Train) {
    f.backward = 2 * f.forward;
    if (recomputed > 0) f.recompute = f.forward * double(recomputed) / double(section.model.layers());
  }
  return f;
}

int64_t activation_bytes_per_token(const ModelSpec& model, Precision precision, ActivationKind kind,
                                   int64_t recomputed) {
  const ActivationElements e = activation_elements(model);
  const int64_t k = kind == ActivationKind::Train ? std::min(recomputed, e.layers) : 0;
  int64_t elements = 0;
  switch (kind) {
    case ActivationKind::Train: elements = (e.layers - k) * e.per_layer + k * e.layer_input + e.outside; break;
    case ActivationKind::Forward: elements = e.per_layer + e.outside; break;
  }
  return elements * precision_bytes(precision);
}

int64_t activation_bytes(const ModelSpec& model, const std::vector<int64_t>& seq_lens, Precision precision,
                         ActivationKind kind, int64_t recomputed) {
  const ActivationElements e = activation_elements(model);
  const int64_t per_token = activation_bytes_per_token(model, precision, kind, recomputed);
  const int64_t prob_layers = kind == ActivationKind::Train   ? e.layers - std::min(recomputed, e.layers)
                              : kind == ActivationKind::Forward ? 1
                                                                : 0;
  int64_t total = 0;
  for (int64_t s : seq_lens) {
    const auto [sequences, length] = attention_sequences(model, s);
    const int64_t positions = sequences * length;
    total += per_token * positions;
    total += prob_layers * e.heads * sequences * length * length * precision_bytes(precision);
  }
  return total;
}

ActivationKind activation_kind(Mode mode) {
  return mode == Mode::Frozen ? ActivationKind::Forward : ActivationKind::Train;
}

SectionMemory memory_per_device(const Section& section, int64_t tp, int64_t pp,
                                const std::vector<int64_t>& micro_batch_seq_lens, Precision precision,
                                int64_t optimizer_shards) {
  const int64_t split = tp * pp;
  const int64_t params = parameter_count(section.model);
  SectionMemory m;
  m.weights = params * precision_bytes(precision) / split;
  if (section.mode == Mode::Train) {
    m.gradients = params * 4 / split;
    const int64_t master = precision == Precision::BF16 ? 4 : 0;
    m.optimizer = params * (master + 8) / split / std::max<int64_t>(1, optimizer_shards);
  }
  m.activations = activation_bytes(section.model, micro_batch_seq_lens, precision, activation_kind(section.mode),
                                   section.recompute) /
                  split;
  return m;
}

}  // namespace maestro
