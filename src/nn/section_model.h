// SectionModel: one section replica's model on a Backend — the runtime's
// only door into the engine. It owns the parameters, their gradients and the
// AdamW moments (one flat allocation each, laid out in the order of
// graph/model_tensors.h), runs the forward of a packed micro-batch of
// samples, the section's loss, and the hand-written backward. Several
// micro-batches may be in flight at once: each forward returns its own
// ForwardContext, which holds that micro-batch's activations (taken from a
// grow-only pool owned by the model, given back when the context dies).
//
// Threading: one caller at a time per SectionModel (the replica's compute
// worker). A context must not outlive the model that made it.
//
// Memory: everything here is fp32 in the Backend's memory (host memory for
// the CPU backend, device memory for a GPU one) — but for a backend with
// bf16 GEMMs (Backend::wants_bf16_operands) the model also keeps every
// parameter rounded to bf16, which the linear ops read instead of rounding
// the weight on each call, refreshed before the first forward or backward
// after any write of the parameters (or written by the AdamW step itself,
// in the same pass, when it updates every parameter); inputs are copied in from
// the host at forward, outputs and input gradients are views into the
// context (backend memory: read them with Backend::copy_to_host), valid
// until the context dies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dsl/program.h"
#include "graph/model_tensors.h"
#include "nn/backend.h"

namespace maestro {

class Communicator;  // transport/collectives.h
struct Tensor;        // nn/tensor.h

// Tensor parallelism (Megatron-LM; graph/tensor_parallel.h says which tensor
// is split how): this model is rank `rank` of `size` ranks that run every
// forward, loss and backward together, each holding its shard of the split
// tensors and a copy of the replicated ones, talking through `comm` (used by
// one thread at a time: the rank's compute worker). size 1: the whole model.
// A transformer's vocabulary is padded with zero rows to a multiple of size;
// rank r holds vocabulary rows [r·Vs, (r+1)·Vs), Vs = padded / size, and its
// logits (ForwardOutput::logits) are those columns [n_text, Vs] only —
// full logits are never gathered: the losses reduce row statistics instead.
struct TensorParallel {
  int64_t rank = 0, size = 1;
  Communicator* comm = nullptr;
};

// What the model reads of one sample (spans owned by the caller, read only
// during forward()).
struct SampleInput {
  // transformer: the sample's text token ids, all of them; text is cut from
  // the end to fit max_seq after the spliced blocks.            [text_tokens]
  std::span<const int32_t> tokens;
  // transformer: upstream embedding blocks spliced before the text, in flow
  // declaration order (each modality's items in sample order).  each [n_k, hidden]
  std::vector<std::span<const float>> spliced;
  // vit: pixels [images, channels, image, image];
  // audio_encoder: log-mel frames [frames, mel_bins] (frames past the last
  //   multiple of frames_per_token are dropped);
  // mlp: embeddings [n, in].
  std::span<const float> values;
};

// A block of rows in a context's buffer.                         [rows, cols]
struct RowsView {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0;
  std::span<const float> values() const { return {data, size_t(rows * cols)}; }
};

// One micro-batch's saved activations (defined in section_model.cpp).
struct ForwardContext;

// Pipeline stages: what stage k hands stage k+1 with the hidden states of a
// micro-batch — its layout (packed sequences, per-sample sizes, targets),
// computed once by stage 0 from the samples. Immutable, shared; opaque
// outside nn/ (defined in model_impl.h).
struct StageGeometry;

// The input of a stage after the first.
struct StageInput {
  std::span<const float> hidden;                    // [N, hidden] the previous stage's output
  std::shared_ptr<const StageGeometry> geometry;    // from that stage's ForwardOutput
};

struct ForwardOutput {
  std::shared_ptr<ForwardContext> context;  // hold until backward()
  // Last stage: per sample, what the section emits on an activations flow:
  // vit [images*(image/patch)^2, hidden] (class tokens dropped),
  // audio_encoder [frames/frames_per_token, hidden], mlp [n, out],
  // transformer [n_text, hidden] the final-normed hidden states of its text
  // positions. Other stages: none.
  std::vector<RowsView> outputs;
  // Last stage of a transformer: per sample, the logits of its text
  // positions [n_text, vocab] (a tp rank's columns [n_text, Vs]), what a
  // logits flow carries. Otherwise none.
  std::vector<RowsView> logits;
  // Stages before the last: the micro-batch's hidden states [N, hidden] and
  // their layout, the next stage's StageInput.
  RowsView hidden;
  std::shared_ptr<const StageGeometry> geometry;
};

class SectionModel {
 public:
  // Random initialisation from `seed` (nn/init.h: every element is a pure
  // function of seed, "<section>.<tensor name>" and its index, so two
  // sections differ and every machine agrees), then the section's `weights`
  // file when it names one. Throws std::runtime_error naming the section and
  // the file on a missing or mismatched weights file.
  //
  // Pipeline stage `stage` of `stages` (graph/model_tensors.h: its layers,
  // plus the embeddings on stage 0 and the final norm and head on the last)
  // holds only that stage's tensors; one stage (the default) is the whole
  // model. Throws std::invalid_argument for a split the model can't take.
  //
  // Tensor-parallel rank `tp` (see TensorParallel) holds its shard of each
  // tensor (tensors() are the shard shapes, initialised and loaded as the
  // whole tensor's slice); throws std::invalid_argument when the model does
  // not split over tp.size ranks (heads, kv_heads, ffn not multiples).
  SectionModel(const Section& section, Backend& backend, uint64_t seed, int64_t stage = 0, int64_t stages = 1,
               TensorParallel tp = {});
  ~SectionModel();
  SectionModel(const SectionModel&) = delete;
  SectionModel& operator=(const SectionModel&) = delete;

  const Section& section() const { return section_; }
  // This rank's shards of stage_tensors(section.model, stage, stages), in that order.
  const std::vector<TensorShape>& tensors() const { return tensors_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // tensors()[i]'s first float in params() / grads() (model order at tp = 1; see grads())
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t stage() const { return stage_; }
  int64_t stages() const { return stages_; }
  int64_t parameter_count() const { return n_params_; }
  // Floats held by the activation pool (in use or free): grows to the
  // largest set of micro-batches in flight, then stays.
  size_t activation_pool_floats() const;
  // ---- compute ------------------------------------------------------------
  // The float inputs forward, loss_terms and backward take (spliced blocks,
  // pixels, mel frames, embeddings, a stage's hidden states or gradient,
  // teacher logits, output gradients) are uploaded with
  // Backend::copy_from_host_held: spans in pinned memory (a transport's on
  // a GPU run) the caller keeps unchanged until the backend passes a
  // fence() taken after the call (at once on the CPU; on a GPU once its
  // stream has done that work). Other memory, and token ids, are read
  // before the call returns.
  // Forward of a packed micro-batch (samples[i] is the micro-batch's i-th
  // sample). Throws std::invalid_argument naming the section on inputs of
  // the wrong size (a token outside the vocabulary, spliced blocks longer
  // than max_seq, pixels not a whole number of images, ...).
  // A stage after the first takes `stage_input` (the previous stage's
  // hidden states and geometry) instead of the samples' inputs: `samples`
  // is then ignored.
  ForwardOutput forward(const std::vector<SampleInput>& samples, const StageInput* stage_input = nullptr);

  // The micro-batch's share of the step's loss for a section with a `loss`:
  // Σ_terms weight · (Σ over its target positions of the term) / n_global,
  // where a target position is a text position whose next position is text
  // (the next token is the target) and n_global is the global batch's count
  // of them. teacher_logits[i] is sample i's teacher output [n_text, vocab]
  // (needed only with a kl term; empty vector otherwise; the same vocabulary,
  // which the front end checks on a logits flow; a teacher that kept more
  // text rows has its first n_text rows used). Seeds the
  // context's backward with d(loss)/d(logits).
  //
  // loss_terms is the step's path: it queues the work and writes each
  // term's raw sum (Σ over target positions) into raw[k], k in
  // section().loss order — fp64 accumulators from
  // Backend::allocate_scalars, read back later, once per step; loss_value
  // turns the read values into the share. loss() does both at once (it
  // waits for the backend: tests and tools).
  void loss_terms(ForwardContext& ctx, const std::vector<std::span<const float>>& teacher_logits, int64_t n_global,
                  double* raw);
  static double loss_value(const Section& section, std::span<const double> raw, int64_t n_global);
  double loss(ForwardContext& ctx, const std::vector<std::span<const float>>& teacher_logits, int64_t n_global);

  // Backward of a forward done earlier. output_grads[i] is the gradient of
  // sample i's output (same shape as outputs[i]; an empty span, or an empty
  // vector, means none — a loss section needs none). Accumulates (+=) into
  // the parameter gradients (train mode) and returns, per sample, the
  // gradients of its spliced blocks (transformer, one per block) or of its
  // input (mlp, one); nothing for raw inputs (vit, audio_encoder). Views
  // into ctx, valid while ctx lives. Call at most once per context.
  // A stage before the last takes `stage_grad`, the gradient of its hidden
  // output [N, hidden], instead of output_grads; a stage after the first
  // returns nothing and leaves the gradient of its hidden input in
  // stage_input_grad(ctx).
  std::vector<std::vector<RowsView>> backward(ForwardContext& ctx,
                                              const std::vector<std::span<const float>>& output_grads,
                                              std::span<const float> stage_grad = {});
  // After backward() on a stage after the first: d(hidden input)   [N, hidden]
  static RowsView stage_input_grad(const ForwardContext& ctx);

  // ---- gradients and optimizer (train mode; frozen: no such memory) --------
  // Starts a step's gradients at zero — lazily: each is overwritten by its
  // first write in the backward, or zeroed then or when first read here
  // (grads(), grad_sq_norm(), adamw_step()); the same values as zeroing.
  void zero_grads();
  // *out = Σ g² over every parameter (a scalar accumulator; 0 when frozen).
  // Tensor parallel: this rank's share — its shards, plus the replicated
  // tensors on rank 0 only — so the sum of the ranks' shares is the model's.
  void grad_sq_norm(double* out);
  double grad_sq_norm();  // the whole model's (shares summed over the ranks), waited for (tests and tools)
  // The flat gradient buffer, [parameter_count()] in model_tensors order
  // (tensor parallel: the split tensors first, then the replicated ones),
  // for the data-parallel all-reduce; null in frozen mode. Complete (see
  // zero_grads) until the next backward or zero_grads().
  float* grads() {
    if (grads_) settle_grads();
    return grads_;
  }
  size_t grad_count() const { return grads_ ? size_t(n_params_) : 0; }
  // [parameter_count()]. The caller may write through it: the bf16 copy is
  // refreshed before the next forward or backward.
  float* params() {
    params16_stale_ = true;
    return params_;
  }
  size_t bf16_copy_bytes() const { return params16_ ? params16_bytes_ : 0; }  // the parameters' bf16 copy
  // One torch.optim.AdamW step over every parameter at learning rate lr;
  // the step number t (bias correction) is counted here, starting at 1, and
  // saved with checkpoints. Global-norm clipping is the runtime's, across
  // all sections: norm = sqrt(Σ_sections grad_sq_norm()), and the step takes
  // the gradient times grad_scale = min(1, clip / (norm + 1e-6)), in the
  // same pass over the parameters (the gradients are not written).
  void adamw_step(const OptimizerSpec& opt, double lr, float grad_scale = 1.0f);
  int64_t adamw_steps() const { return adam_t_; }

  // ---- ZeRO-1: a sharded optimizer (docs/runtime.md, "Sharded optimizer") --
  // out[n] = every replica's in[count] at its offset: the data-parallel
  // group's all_gather (transport/collectives.h), `in` may be out + offset.
  using AllGather = std::function<void(float* out, const float* in, size_t n)>;
  // From now on this replica keeps the AdamW moments of the flat buffer's
  // [offset, offset + count) only (its shard; the rest is freed) and:
  // grad_sq_norm() acts on that range of the gradients (which
  // the caller has reduced there); adamw_step() updates that range of the
  // parameters, then all_gathers the parameters; load() reads that slice of
  // the moments; save() all_gathers the moments and writes them whole (so
  // every replica of the group saves together, all but one with path "").
  // Call once, after construction (or a load) and before any step.
  void shard_optimizer(int64_t offset, int64_t count, AllGather all_gather);
  bool optimizer_sharded() const { return bool(all_gather_); }
  size_t optimizer_state_bytes() const { return grads_ ? size_t(2 * opt_count_) * sizeof(float) : 0; }

  // ---- files ----------------------------------------------------------------
  // Files hold whole tensors: tensor-parallel ranks read their slice, and
  // save() is collective — every rank calls it, rank 0 writes the gathered
  // tensors (the others write nothing).
  // Writes every parameter as "<prefix>.<name>" (F32), plus, in train mode,
  // the AdamW moments as "<prefix>.<name>:exp_avg" / ":exp_avg_sq" and the
  // step number in the metadata ("adamw_step"). Atomic (temp file + rename).
  // Sharded: a collective (see shard_optimizer); path "" writes nothing.
  void save(const std::string& path, const std::string& prefix) const;
  // Reads a file written by save() with the same prefix (moments and step
  // too in train mode). Throws std::runtime_error naming file and tensor.
  void load(const std::string& path, const std::string& prefix);
  // Reads a `weights =` file: parameters under their own names, no prefix,
  // F32 or BF16; other tensors in the file are ignored.
  void load_weights(const std::string& path);

  struct Impl;  // the model's layers (section_model.cpp)

 private:
  void read_parameters(const std::string& path, const std::string& prefix, bool with_optimizer);
  // Tensor i of `buffer` (params or a moment) whole on the host: gathered over the tp ranks (collective).
  Tensor whole_tensor(const float* buffer, size_t i) const;
  void release_buffers();
  void refresh_params16();  // the bf16 copy from params_, when stale
  void settle_grads();      // zeroes the gradients the backward has not written since zero_grads()

  Section section_;
  Backend& backend_;
  int64_t stage_ = 0, stages_ = 1;
  TensorParallel tp_;
  std::vector<TensorShape> tensors_;  // this rank's shards
  std::vector<TensorShape> whole_;    // the whole tensors (as in files)
  std::vector<int64_t> offsets_;  // offsets_[i]: tensor i's first float in the flat buffers
  int64_t n_params_ = 0;
  int64_t n_split_ = 0;  // the first n_split_ floats are split tensors, the rest replicated (tp > 1)
  float* params_ = nullptr;  // [n_params_]
  float* grads_ = nullptr;   // [n_params_]  train only
  // Train only: per tensor, whether its gradient is unwritten since
  // zero_grads() (model_impl.h's Param); the tensors in offset order.
  std::vector<uint8_t> grad_unwritten_;
  std::vector<size_t> grad_order_;
  // Backend::wants_bf16_operands: every tensor i rounded to bf16 at byte
  // offset offsets16_[i] (256-byte aligned, as the GEMMs' own scratch), or null.
  std::byte* params16_ = nullptr;  // [params16_bytes_]
  std::vector<size_t> offsets16_;
  size_t params16_bytes_ = 0;
  bool params16_stale_ = true;
  bool params16_dense_ = false;  // offsets16_[i] == 2·offsets_[i] for every i: one convert, or AdamW, writes it
  float* adam_m_ = nullptr;  // [opt_count_]  train only: moments of params [opt_offset_, +opt_count_)
  float* adam_v_ = nullptr;  // [opt_count_]  train only
  int64_t opt_offset_ = 0, opt_count_ = 0;  // the whole buffer unless sharded
  AllGather all_gather_;     // set when sharded
  double* scalars_ = nullptr;  // [max(1, loss terms)] for loss() and grad_sq_norm()
  int64_t adam_t_ = 0;
  std::unique_ptr<Impl> impl_;
};

// Learning rate at step `step` (0-based) of a run of spec.steps steps:
// constant, or cosine(warmup): lr·step/warmup for step < warmup, then
// lr·0.5·(1 + cos(π·(step - warmup)/(steps - warmup))) — Hugging Face's
// get_cosine_schedule_with_warmup.
double lr_at(const TrainSpec& spec, int64_t step);

}  // namespace maestro
