// The engine's internals shared by the four built-in models: the per-
// micro-batch ForwardContext (buffers from the activation pool, freed back
// to it when the context dies), a model's parameter lookup by Hugging Face
// name, and the interface each model implements. Not for use outside nn/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/activation_pool.h"
#include "nn/backend.h"
#include "nn/section_model.h"
#include "transport/collectives.h"

namespace maestro {

// Model-specific saved activations of one micro-batch.
struct Activations {
  virtual ~Activations() = default;
};

// Model-specific layout of a micro-batch that later pipeline stages reuse.
struct StageGeometry {
  virtual ~StageGeometry() = default;
};

struct ForwardContext {
  ForwardContext(Backend& backend, ActivationPool& pool) : backend(backend), pool(pool) {}
  ~ForwardContext() {
    for (float* p : buffers) pool.give_back(p);
  }
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  // A pooled buffer of n floats held until the context dies.
  float* take(size_t n) {
    float* p = pool.take(n);
    buffers.push_back(p);
    return p;
  }
  // A pooled buffer for n bf16 values when the backend wants bf16 copies of
  // linear operands (Backend::wants_bf16_operands), else null.
  void* take_bf16(size_t n) { return backend.wants_bf16_operands() ? static_cast<void*>(take((n + 1) / 2)) : nullptr; }
  // A buffer of n floats for an activation that ops read only as an
  // Operand (linear ops; rope, swiglu and the attention, nn/backend.h) —
  // null where the backend's bf16 copies suffice
  // (Backend::bf16_operands_suffice): then it is kept in bf16 alone, in its
  // copy from take_bf16 or, where it has none, take_bf16_alone's buffer.
  float* take_operand(size_t n) { return backend.bf16_operands_suffice() ? nullptr : take(n); }
  // The bf16 buffer of an activation that take_operand keeps in bf16 alone
  // and that has no bf16 copy otherwise (no GEMM reads it: gate, up) —
  // null unless the copies suffice.
  void* take_bf16_alone(size_t n) { return backend.bf16_operands_suffice() ? take_bf16(n) : nullptr; }
  float* take_zeroed(size_t n) {
    float* p = take(n);
    backend.zero(p, n);
    return p;
  }

  Backend& backend;
  ActivationPool& pool;
  std::vector<float*> buffers;
  std::unique_ptr<Activations> acts;
  bool backward_done = false;
  bool logits_wanted = true;  // TransformerSpec::logits_read: a transformer's forward computes its logits

  // A transformer's forward sets its logits and next-token targets; loss()
  // reads them and sets dlogits, which backward() adds to the logits' gradient.
  const float* logits = nullptr;      // [n_text_total, vocab]
  std::vector<int32_t> targets;       // [n_text_total]; -1 where the next position is not text
  std::vector<int64_t> text_offsets;  // [samples + 1] first logits row of each sample
  int64_t vocab = 0;                  // the logits' width: the whole vocabulary, or a tp rank's shard Vs
  int64_t vocab_first = 0;            // tp: the shard's first vocabulary column
  int64_t vocab_valid = 0;            // tp: its columns that are vocabulary (the rest is padding)
  float* dlogits = nullptr;           // [n_text_total, vocab]

  // A stage after the first: backward's gradient of its hidden input.
  RowsView stage_dinput;
};

// Packed sequences of a micro-batch (backend.h): sequence s is rows
// [cu_seqlens[s], cu_seqlens[s+1]); pos[n] is row n's position in its sequence.
struct Packing {
  std::vector<int32_t> cu_seqlens;  // [n_seq + 1]
  std::vector<int32_t> pos;         // [N]
  int64_t n_seq() const { return int64_t(cu_seqlens.size()) - 1; }
  int64_t tokens() const { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  void add_sequence(int64_t len) {
    if (cu_seqlens.empty()) cu_seqlens.push_back(0);
    for (int64_t i = 0; i < len; ++i) pos.push_back(int32_t(i));
    cu_seqlens.push_back(cu_seqlens.back() + int32_t(len));
  }
};

// x[n], just written, as a linear op's input for all its uses: rounded
// once into x16 when there is one (ForwardContext::take_bf16).
inline Operand rounded_once(Backend& b, const float* x, void* x16, size_t n) {
  if (x16) b.convert(x16, DType::BF16, x, DType::F32, n);
  return {x, x16};
}

// An activation from take_operand as it is stored, to write or to read:
// its fp32 values where it has them (its bf16 copy, if any, is written by
// the op that reads it next), else its bf16 alone.
inline Out stored_out(float* f32, void* b16) { return f32 ? Out(f32) : Out(nullptr, b16); }
inline Operand stored(const float* f32, const void* b16) { return f32 ? Operand(f32) : Operand(nullptr, b16); }

// A parameter, its bf16 copy (null unless the backend wants one:
// Backend::wants_bf16_operands) and its gradient (none in frozen mode).
// SectionModel::zero_grads() does not zero the gradients: it marks them
// unwritten, and a model takes each gradient in one of two ways — an op
// that writes the whole tensor (a linear op's dw) takes grad_write(), which
// it overwrites while unwritten (a GEMM with beta = 0) and adds to after;
// any other op takes grad_add(), zeroed first while unwritten. So the
// first micro-batch of a step neither zeroes nor reads the weight
// gradients of its linear layers (docs/engine.md).
struct Param {
  const float* w = nullptr;
  const void* w16 = nullptr;
  float* g_ = nullptr;            // [n_]; null in frozen mode
  size_t n_ = 0;
  uint8_t* unwritten_ = nullptr;  // the gradient's "not written this step" flag (SectionModel's)
  Backend* backend_ = nullptr;

  Operand linear() const { return {w, w16}; }  // as a linear op's weight
  bool trained() const { return g_ != nullptr; }
  Grad grad_write() const {
    if (!g_ || !*unwritten_) return Grad(g_);
    *unwritten_ = 0;
    return Grad::overwrite(g_);
  }
  float* grad_add() const {
    if (g_ && *unwritten_) {
      backend_->zero(g_, n_);
      *unwritten_ = 0;
    }
    return g_;
  }
};

// name -> Param, over the model's flat buffers.
using ParamLookup = std::function<Param(const std::string& name)>;

// Which part of the model an instance runs (graph/model_tensors.h).
// With tensor parallelism, also which rank's shard (section_model.h).
struct StagePart {
  bool first = true, last = true;  // holds the embeddings / the final norm and head
  int64_t layer_begin = 0, layer_end = 0;  // its layers [begin, end)
  TensorParallel tp;
};

class ModelImpl {
 public:
  virtual ~ModelImpl() = default;
  // stage_input: null on the first stage (see SectionModel::forward).
  virtual ForwardOutput forward(std::shared_ptr<ForwardContext> ctx, const std::vector<SampleInput>& samples,
                                const StageInput* stage_input) = 0;
  // Accumulates parameter gradients; returns per-sample input gradients
  // (see SectionModel::backward).
  virtual std::vector<std::vector<RowsView>> backward(ForwardContext& ctx,
                                                      const std::vector<std::span<const float>>& output_grads,
                                                      std::span<const float> stage_grad) = 0;
};

std::unique_ptr<ModelImpl> make_transformer(const Section& s, Backend& b, const ParamLookup& params, StagePart part);
std::unique_ptr<ModelImpl> make_vit(const Section& s, Backend& b, const ParamLookup& params, StagePart part);
std::unique_ptr<ModelImpl> make_audio_encoder(const Section& s, Backend& b, const ParamLookup& params, StagePart part);
std::unique_ptr<ModelImpl> make_mlp(const Section& s, Backend& b, const ParamLookup& params, StagePart part);

[[noreturn]] void input_error(const Section& s, const std::string& what);  // std::invalid_argument naming the section

// The teacher's logits of ctx's kept text rows, packed like the student's
// logits [Nt, ctx.vocab]: columns [ctx.vocab_first, + ctx.vocab_valid) of each
// sample's whole-vocabulary rows teacher_logits[i] [rows >= n_text, vocab]
// (a tp rank's shard; all of them at tp = 1), padding columns zero. Checks
// the count and sizes (std::invalid_argument naming the section).
float* pack_teacher_logits(const Section& s, Backend& b, ForwardContext& ctx,
                           const std::vector<std::span<const float>>& teacher_logits, int64_t vocab);

// dst[rows, cols] = a stage's output gradient, checked for its size.
void copy_stage_grad(const Section& s, Backend& b, float* dst, std::span<const float> grad, int64_t rows, int64_t cols);

// A later stage's input, checked: geometry of the model's own type G (which
// has the micro-batch's Packing `pk`), hidden of [pk.tokens(), width].
template <class G>
std::shared_ptr<const G> stage_geometry(const Section& s, const StageInput* in, int64_t width) {
  auto g = in ? std::dynamic_pointer_cast<const G>(in->geometry) : nullptr;
  if (!g) input_error(s, "a pipeline stage after the first needs the previous stage's hidden states and geometry");
  if (int64_t(in->hidden.size()) != g->pk.tokens() * width)
    input_error(s, "the previous stage's hidden states have the wrong size");
  return g;
}

}  // namespace maestro
