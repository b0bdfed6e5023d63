// Parameter, FLOP and memory counts (graph/model_tensors.h, graph/counts.h)
// against published parameter totals and hand computations on tiny models.
#define BOOST_TEST_MODULE graph
#include <boost/test/unit_test.hpp>

#include "graph/counts.h"
#include "graph/model_tensors.h"

using namespace maestro;

namespace {

ModelSpec transformer(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab) {
  TransformerSpec t;
  t.layers = layers, t.hidden = hidden, t.heads = heads, t.kv_heads = kv_heads, t.ffn = ffn, t.vocab = vocab;
  return {"transformer", t};
}

ModelSpec vit(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn, int64_t patch, int64_t image) {
  VitSpec v;
  v.layers = layers, v.hidden = hidden, v.heads = heads, v.ffn = ffn, v.patch = patch, v.image = image;
  return {"vit", v};
}

// transformer(layers:1, hidden:8, heads:2, kv_heads:1, ffn:16, vocab:10): head_dim 4, k/v width 4.
ModelSpec tiny_transformer() { return transformer(1, 8, 2, 1, 16, 10); }

const TensorShape& tensor(const std::vector<TensorShape>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return t;
  BOOST_FAIL("no tensor " + name);
  return ts.front();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parameters)

BOOST_AUTO_TEST_CASE(llama2_7b_has_6738415616) {
  BOOST_TEST(parameter_count(transformer(32, 4096, 32, 32, 11008, 32000)) == 6'738'415'616);
}

BOOST_AUTO_TEST_CASE(clip_vit_l14_336_has_303507456) {
  BOOST_TEST(parameter_count(vit(24, 1024, 16, 4096, 14, 336)) == 303'507'456);
}

BOOST_AUTO_TEST_CASE(tiny_transformer_tensors) {
  const auto ts = model_tensors(tiny_transformer());
  BOOST_TEST(ts.size() == 1u + 9u + 2u);
  BOOST_TEST(ts.front().name == "model.embed_tokens.weight");
  BOOST_TEST(ts.back().name == "lm_head.weight");
  BOOST_TEST(tensor(ts, "model.embed_tokens.weight").shape == (std::vector<int64_t>{10, 8}));
  BOOST_TEST(tensor(ts, "model.layers.0.self_attn.q_proj.weight").shape == (std::vector<int64_t>{8, 8}));
  BOOST_TEST(tensor(ts, "model.layers.0.self_attn.k_proj.weight").shape == (std::vector<int64_t>{4, 8}));
  BOOST_TEST(tensor(ts, "model.layers.0.self_attn.v_proj.weight").shape == (std::vector<int64_t>{4, 8}));
  BOOST_TEST(tensor(ts, "model.layers.0.mlp.down_proj.weight").shape == (std::vector<int64_t>{8, 16}));
  BOOST_TEST(tensor(ts, "model.layers.0.mlp.gate_proj.weight").shape == (std::vector<int64_t>{16, 8}));
  BOOST_TEST(tensor(ts, "model.norm.weight").shape == (std::vector<int64_t>{8}));
  // 80 embed + (8 + 64 + 32 + 32 + 64 + 8 + 3·128) layer + 8 norm + 80 head
  BOOST_TEST(parameter_count(tiny_transformer()) == 760);
}

BOOST_AUTO_TEST_CASE(tiny_vit_tensors) {
  const ModelSpec m = vit(1, 4, 2, 8, 2, 4);  // 4 patches per image
  const auto ts = model_tensors(m);
  BOOST_TEST(tensor(ts, "vision_model.embeddings.patch_embedding.weight").shape == (std::vector<int64_t>{4, 3, 2, 2}));
  BOOST_TEST(tensor(ts, "vision_model.embeddings.position_embedding.weight").shape == (std::vector<int64_t>{5, 4}));
  BOOST_TEST(tensor(ts, "vision_model.embeddings.class_embedding").shape == (std::vector<int64_t>{4}));
  BOOST_TEST(tensor(ts, "vision_model.pre_layrnorm.bias").shape == (std::vector<int64_t>{4}));
  BOOST_TEST(tensor(ts, "vision_model.encoder.layers.0.mlp.fc1.weight").shape == (std::vector<int64_t>{8, 4}));
  BOOST_TEST(tensor(ts, "vision_model.encoder.layers.0.self_attn.out_proj.bias").shape == (std::vector<int64_t>{4}));
  BOOST_TEST(tensor(ts, "vision_model.post_layernorm.weight").shape == (std::vector<int64_t>{4}));
  // 4 + 48 + 20 + 8 + (4·20 + 8 + 40 + 36 + 8) + 8
  BOOST_TEST(parameter_count(m) == 260);
}

BOOST_AUTO_TEST_CASE(tiny_audio_and_mlp_tensors) {
  AudioEncoderSpec a;
  a.layers = 1, a.hidden = 4, a.heads = 2, a.ffn = 8, a.mel_bins = 3, a.frames_per_token = 2;
  const auto ts = model_tensors({"audio_encoder", a});
  BOOST_TEST(tensor(ts, "encoder.embed_frames.weight").shape == (std::vector<int64_t>{4, 6}));
  for (const auto& t : ts) BOOST_TEST(t.name != "encoder.layers.0.self_attn.k_proj.bias");
  // frame embedding 24 + 4; layer: 4·16 matrices, 3·4 biases (no k bias), 2·8 norms, fc1 40, fc2 36; final norm 8
  BOOST_TEST(parameter_count({"audio_encoder", a}) == 204);

  MlpSpec m;
  m.in = 3, m.out = 5, m.hidden = 7, m.layers = 3;
  const auto ms = model_tensors({"mlp", m});
  BOOST_TEST(ms.size() == 6u);
  BOOST_TEST(tensor(ms, "layers.0.weight").shape == (std::vector<int64_t>{7, 3}));
  BOOST_TEST(tensor(ms, "layers.1.weight").shape == (std::vector<int64_t>{7, 7}));
  BOOST_TEST(tensor(ms, "layers.2.weight").shape == (std::vector<int64_t>{5, 7}));
  BOOST_TEST(tensor(ms, "layers.2.bias").shape == (std::vector<int64_t>{5}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(flops)

BOOST_AUTO_TEST_CASE(tiny_transformer_by_hand) {
  // per token: 2·(q 64 + o 64 + k 32 + v 32 + gate/up/down 3·128) = 1152; 3 tokens = 3456;
  // causal attention 2·s²·h = 144; LM head 2·8·10·3 = 480.
  BOOST_TEST(forward_flops(tiny_transformer(), 3) == 4080.0);
  BOOST_TEST(forward_flops(tiny_transformer(), std::vector<int64_t>{3, 3}) == 8160.0);
  TransformerSpec bidirectional = std::get<TransformerSpec>(tiny_transformer().spec);
  bidirectional.causal = false;
  BOOST_TEST(forward_flops({"t", bidirectional}, 3) == 4080.0 + 144.0);
  BOOST_TEST(attention_forward_flops(tiny_transformer(), 3) == 144.0);
  BOOST_TEST(attention_forward_flops({"t", bidirectional}, 3) == 288.0);
}

// A transformer whose logits nobody reads (a text encoder; the checker sets
// logits_read) runs no LM head: 480 FLOPs fewer on 3 tokens, and per token
// vocab 10 fewer activation elements (fp32: 40 bytes).
BOOST_AUTO_TEST_CASE(a_text_encoder_counts_no_head) {
  ModelSpec encoder = tiny_transformer();
  std::get<TransformerSpec>(encoder.spec).logits_read = false;
  BOOST_TEST(forward_flops(encoder, 3) == 4080.0 - 480.0);
  BOOST_TEST(attention_forward_flops(encoder, 3) == 144.0);
  for (ActivationKind kind : {ActivationKind::Train, ActivationKind::Forward})
    BOOST_TEST(activation_bytes_per_token(tiny_transformer(), Precision::FP32, kind) -
                   activation_bytes_per_token(encoder, Precision::FP32, kind) ==
               40);
  BOOST_TEST(parameter_count(encoder) == parameter_count(tiny_transformer()));  // the head is still held
}

BOOST_AUTO_TEST_CASE(tiny_vit_by_hand) {
  // one image = 4 emitted tokens, 5 positions with the class token:
  // patch embedding 2·12·4·4 = 384; layer 2·(4·16 + 2·32)·5 = 1280; attention 4·25·4 = 400.
  const ModelSpec m = vit(1, 4, 2, 8, 2, 4);
  BOOST_TEST(forward_flops(m, 4) == 2064.0);
  BOOST_TEST(forward_flops(m, 8) == 2 * 2064.0);  // two images
  BOOST_TEST(attention_forward_flops(m, 8) == 2 * 400.0);
}

BOOST_AUTO_TEST_CASE(pixel_shuffled_vit_by_hand) {
  // image 8, patch 2: a 4×4 grid, 17 positions; pixel_shuffle 0.5 emits
  // (4/2)² = 4 tokens of 4·4 = 16 channels per image, the same FLOPs as the
  // unshuffled encoder on the same images (a permutation costs none):
  // patch embedding 2·12·4·16 = 1536; layer 2·(4·16 + 2·32)·17 = 4352;
  // attention 4·17²·4 = 4624.
  ModelSpec m = vit(1, 4, 2, 8, 2, 8);
  const ModelSpec plain = m;
  std::get<VitSpec>(m.spec).merge = 2;
  BOOST_TEST(std::get<VitSpec>(m.spec).tokens_per_image() == 4);
  BOOST_TEST(m.output_width() == 16);
  BOOST_TEST(forward_flops(m, 4) == 1536.0 + 4352.0 + 4624.0);
  BOOST_TEST(attention_forward_flops(m, 4) == 4624.0);
  BOOST_TEST(forward_flops(m, 8) == forward_flops(plain, 32));  // two images
  BOOST_TEST(parameter_count(m) == parameter_count(plain));
  // activations per position: one more h (the shuffled copy), 17 positions per image
  const int64_t extra = activation_bytes(m, {4}, Precision::FP32, ActivationKind::Train) -
                        activation_bytes(plain, {16}, Precision::FP32, ActivationKind::Train);
  BOOST_TEST(extra == 17 * 4 * 4);
}

BOOST_AUTO_TEST_CASE(linear_flops_are_twice_the_matmul_parameters) {
  // Llama-2-7B, one token: 2 × (params − embedding − norms), plus 2·h per layer of attention.
  const ModelSpec m = transformer(32, 4096, 32, 32, 11008, 32000);
  const double matmul_params = 6'738'415'616.0 - 32000.0 * 4096 - (2 * 32 + 1) * 4096.0;
  BOOST_TEST(forward_flops(m, 1) == 2 * matmul_params + 32 * 2 * 4096.0);
}

BOOST_AUTO_TEST_CASE(section_backward_and_recompute) {
  Section s;
  s.model = tiny_transformer();
  const SectionFlops train = section_flops(s, {3});
  BOOST_TEST(train.backward == 2 * train.forward);
  BOOST_TEST(train.recompute == 0.0);
  s.recompute = s.model.layers();  // all: one more forward
  BOOST_TEST(section_flops(s, {3}).total() == 4 * 4080.0);
  BOOST_TEST(section_flops(s, {3}, 0).total() == 3 * 4080.0);  // the plan's count instead of the program's
  s.mode = Mode::Frozen;
  BOOST_TEST(section_flops(s, {3}).total() == 4080.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(memory)

BOOST_AUTO_TEST_CASE(one_plan_by_hand) {
  Section s;
  s.model = tiny_transformer();  // 760 parameters
  // bf16 train: 2 B weights, 4 B grads, 4 + 8 B master + Adam.
  // activations: per layer 6·8 + 2·4 + 3·16 = 104, outside 2·8 + 10 = 26 → 130 elements · 2 B · 3 tokens = 780,
  // attention probabilities 1 layer · 2 heads · 3² · 2 B = 36.
  SectionMemory m = memory_per_device(s, 1, 1, {3}, Precision::BF16);
  BOOST_TEST(m.weights == 1520);
  BOOST_TEST(m.gradients == 3040);
  BOOST_TEST(m.optimizer == 9120);
  BOOST_TEST(m.activations == 816);
  BOOST_TEST(m.weights + m.gradients + m.optimizer == 18 * 760);
  m = memory_per_device(s, 2, 1, {3}, Precision::BF16);
  BOOST_TEST(m.total() == (1520 + 3040 + 9120 + 816) / 2);
  // ZeRO-1 over 4 replicas: master copy and Adam moments a quarter each
  // (12 B / 4 per parameter), weights and gradients whole: 6 + 3 = 9 B.
  m = memory_per_device(s, 1, 1, {3}, Precision::BF16, 4);
  BOOST_TEST(m.weights == 1520);
  BOOST_TEST(m.gradients == 3040);
  BOOST_TEST(m.optimizer == 9120 / 4);
  BOOST_TEST(m.weights + m.gradients + m.optimizer == 9 * 760);
  // fp32 train: 16 B per parameter
  m = memory_per_device(s, 1, 1, {3}, Precision::FP32);
  BOOST_TEST(memory_per_device(s, 1, 1, {3}, Precision::FP32, 2).optimizer == 8 * 760 / 2);
  BOOST_TEST(m.weights + m.gradients + m.optimizer == 16 * 760);
  // frozen: weights only; activations of one layer plus the output, probabilities of one layer
  s.mode = Mode::Frozen;
  m = memory_per_device(s, 1, 1, {3}, Precision::BF16);
  BOOST_TEST(m.gradients == 0);
  BOOST_TEST(m.optimizer == 0);
  BOOST_TEST(m.weights == 1520);
  BOOST_TEST(m.activations == 780 + 36);
  // recompute keeps only layer inputs: (8 + 26) elements · 2 B · 3 tokens
  s.mode = Mode::Train;
  s.recompute = s.model.layers();
  BOOST_TEST(memory_per_device(s, 1, 1, {3}, Precision::BF16).activations == 34 * 2 * 3);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(parameter_count_in_closed_form)

// The closed form equals the sum over the enumerated tensors, model by model.
BOOST_AUTO_TEST_CASE(equals_the_enumeration) {
  auto enumerated = [](const ModelSpec& m) {
    int64_t n = 0;
    for (const auto& t : model_tensors(m)) n += t.numel();
    return n;
  };
  std::vector<ModelSpec> models = {transformer(3, 8, 2, 1, 16, 10), transformer(2, 12, 3, 3, 20, 7),
                                   vit(2, 4, 2, 8, 2, 4), vit(1, 6, 3, 5, 3, 9)};
  AudioEncoderSpec a;
  a.layers = 2, a.hidden = 4, a.heads = 2, a.ffn = 8, a.mel_bins = 3, a.frames_per_token = 2;
  models.push_back({"audio_encoder", a});
  for (int64_t layers : {1, 2, 4}) {
    MlpSpec m;
    m.in = 3, m.out = 5, m.hidden = 7, m.layers = layers;
    models.push_back({"mlp", m});
  }
  for (const ModelSpec& m : models) BOOST_TEST(parameter_count(m) == enumerated(m), m.name);
}

// layers: 1e12 is counted at once (no per-layer name; 592 per layer: 16
// norm, 128 q/o, 64 k/v, 384 mlp), and a count past 64
// bits is an error, not a wrapped number.
BOOST_AUTO_TEST_CASE(huge_models_count_fast_or_overflow) {
  BOOST_TEST(parameter_count(transformer(1'000'000'000'000, 8, 2, 1, 16, 10)) == 10 * 8 * 2 + 8 + 1'000'000'000'000 * 592);
  BOOST_CHECK_THROW(parameter_count(transformer(1, 1'099'511'627'776, 1, 1, 16, 10)), std::overflow_error);
}

// Recomputing k of L layers: those keep their input (h elements per token)
// and no attention probabilities, the others everything; backward runs
// their forward again (k/L of one).
BOOST_AUTO_TEST_CASE(partial_recompute_by_hand) {
  Section s;
  s.model = transformer(2, 8, 2, 1, 16, 10);  // per layer 104, input 8, outside 26 elements per token
  auto acts = [&](int64_t k) { return activation_bytes(s.model, {3}, Precision::BF16, ActivationKind::Train, k); };
  BOOST_TEST(acts(0) == (2 * 104 + 26) * 2 * 3 + 2 * 2 * 9 * 2);
  BOOST_TEST(acts(1) == (104 + 8 + 26) * 2 * 3 + 1 * 2 * 9 * 2);
  BOOST_TEST(acts(2) == (2 * 8 + 26) * 2 * 3);
  BOOST_TEST(acts(5) == acts(2));  // more than the model's layers: all
  const SectionFlops f = section_flops(s, {3}, 1);
  BOOST_TEST(f.recompute == f.forward / 2);
  // Spread evenly: 1 of 2 is the second layer, 2 of 4 every other one.
  BOOST_TEST(!recomputes_layer(0, 2, 1));
  BOOST_TEST(recomputes_layer(1, 2, 1));
  int64_t count = 0;
  for (int64_t l = 0; l < 48; ++l) count += recomputes_layer(l, 48, 18);
  BOOST_TEST(count == 18);
  for (int64_t l = 0; l < 4; ++l) BOOST_TEST(recomputes_layer(l, 4, 2) == (l % 2 == 1));
}

BOOST_AUTO_TEST_SUITE_END()
