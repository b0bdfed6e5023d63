// Backend: the ops the models are written against, once, so that a CUDA
// backend can plug in beside the CPU one (cpu/cpu_backend.h). The runtime
// picks one with make_backend (gpu/backend_factory.h) and hands it to each
// section replica.
//
// Memory: every buffer lives in the backend's memory (host for the CPU
// backend, device memory for a GPU one) and has a storage dtype chosen at
// allocate(): F32, or BF16 for storage that ops read and write through
// convert() (compute is fp32). Host data enters and leaves only through
// copy_from_host / copy_to_host; copy() moves data inside the backend.
//
// Ops are queued work: none returns a host value. Scalar results (a loss, a
// squared norm) are written into fp64 accumulators from allocate_scalars(),
// which the runner reads with one copy_to_host per step, so a GPU backend
// never waits for the device in the middle of a step.
//
// Every compute op works on fp32 row-major buffers; every buffer's shape is
// in the comment. Forward ops write (=) their outputs; backward ops
// ACCUMULATE (+=) into every gradient they produce, llm.c style, so a
// caller zeroes a gradient buffer once and several uses sum into it —
// except where an op takes a Grad (below) and the caller passes
// Grad::overwrite for the use that writes a buffer first. A gradient
// pointer may be null when that gradient is not wanted (frozen weights,
// raw inputs).
//
// Packed variable-length sequences: N tokens of n_seq sequences laid end to
// end, sequence s occupying rows [cu_seqlens[s], cu_seqlens[s+1]) — no
// padding. Attention never crosses a sequence boundary. Index arrays
// (tokens, positions, targets, cu_seqlens) are host memory the caller keeps
// alive until the op returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nn/dtype.h"

namespace maestro {

// A linear op's input or weight: fp32, and, when the caller keeps one, its
// rounding to bf16 (round to nearest even, nn/dtype.h; same shape, dense) —
// exactly what a backend with bf16 GEMMs would round f32 to, so passing it
// changes no result, only saves the rounding. The caller guarantees it is
// current (SectionModel refreshes the parameters' copy after every write of
// them; the op that writes an activation writes its copy in the same pass,
// Out, or a layer rounds it once for all its uses); a backend that does not
// want copies (wants_bf16_operands) never reads them.
//
// f32 may be null, the bf16 values given alone, only to a backend whose
// copies suffice (bf16_operands_suffice): an activation the engine keeps
// in bf16 alone. An element-wise op that takes an Operand (rope's x,
// swiglu's gate and up) reads its fp32 values when given, else its bf16
// values widened (exact) — so a given f32 decides the result, as on the CPU.
struct Operand {
  Operand(const float* f32_, const void* bf16_ = nullptr) : f32(f32_), bf16(bf16_) {}  // NOLINT: implicit
  const float* f32;
  const void* bf16;
};

// An activation an op writes (=): fp32, and/or its rounding to bf16 (round
// to nearest even, as Operand::bf16) written in the same pass — the copy a
// linear op reads next, so no rounding pass follows the op. Either may be
// null, not both: the engine asks for bf16 only from a backend that
// wants_bf16_operands, and for bf16 alone (f32 null) only from one whose
// copies suffice (bf16_operands_suffice), where nothing reads the fp32
// values (decoder_block.h). The CPU backend writes what it is asked. A
// linear op's output is an Out too: a GEMM that writes bf16 alone rounds
// its fp32 sums once, on the way out (cuBLASLt's D in bf16).
struct Out {
  Out(float* f32_) : f32(f32_) {}  // NOLINT: implicit; fp32 only
  Out(float* f32_, void* bf16_) : f32(f32_), bf16(bf16_) {}
  float* f32;
  void* bf16 = nullptr;
};

// A gradient output an op either adds to (the default, from a plain
// pointer) or overwrites (=): then the op never reads the buffer, which
// spares the caller a zeroing pass and the op a read of those zeros (on a
// GPU the GEMM runs with beta = 0). The decoder's backward writes most of
// its scratch gradients this way (decoder_block.cpp).
struct Grad {
  Grad(float* p_) : p(p_) {}  // NOLINT: implicit; accumulates
  static Grad overwrite(float* p) {
    Grad g(p);
    g.add = false;
    return g;
  }
  float* p;
  bool add = true;
};

// The gradient an activation op (swiglu, gelu) hands to a linear op's
// backward: a Grad, and — when it is overwritten — optionally its rounding
// to bf16 written in the same pass, the next linear_backward's dout
// Operand::bf16 (as Out does for activations). p may then be null: the
// gradient is wanted in bf16 only.
struct GradOut : Grad {
  GradOut(float* p_) : Grad(p_) {}  // NOLINT: implicit; accumulates
  GradOut(Grad g) : Grad(g) {}      // NOLINT: implicit
  static GradOut overwrite(float* p, void* p16) {
    GradOut g(Grad::overwrite(p));
    g.bf16 = p16;
    return g;
  }
  bool wanted() const { return p || bf16; }
  void* bf16 = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- memory -----------------------------------------------------------
  Device device() const { return device_; }
  // The memory of the device this backend's buffers live on, in bytes (the
  // CUDA backend: its GPU's); 0 for host memory.
  virtual size_t device_memory_bytes() const { return 0; }
  // n elements of `dtype`, zero-filled, 64-byte aligned; freed by release().
  virtual void* allocate(size_t n, DType dtype) = 0;
  float* allocate(size_t floats) { return static_cast<float*>(allocate(floats, DType::F32)); }
  // n fp64 accumulators for scalar results (losses, norms), zero-filled.
  virtual double* allocate_scalars(size_t n) = 0;
  virtual void release(void* p) = 0;
  // Host <-> backend copies of `bytes` bytes. copy_to_host returns once the
  // work queued before it is done and the bytes are in host memory: the
  // backend's only synchronisation point.
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // An upload whose source the caller keeps: where host_src lies in memory
  // pinned for the GPU (transport/pinned_ranges.h: the transports' regions
  // on a GPU run), its bytes stay valid and unchanged until passed(f) holds
  // for an f = fence() taken after this call. So a GPU backend may leave
  // the copy queued, reading pinned memory later by DMA, with no staging and
  // no wait (the CUDA backend does; other memory it copies as
  // copy_from_host, before returning). The engine uploads the caller's
  // input spans this way (section_model.h); the runner holds its tasks'
  // tensors until then (actors/section_runner.h).
  virtual void copy_from_host_held(void* dst, const void* host_src, size_t bytes) {
    copy_from_host(dst, host_src, bytes);
  }
  // A held upload's source may also be another backend's memory on a GPU
  // of this process (a resident hand-off, actors/section_runner.h: after
  // wait_for its marker): then the copy is device to device, or between
  // GPUs (cudaMemcpyPeerAsync), left queued under the same promise.
  //
  // `rows` rows of `row_bytes` each, from host_src every src_pitch bytes to
  // dst every dst_pitch bytes, held as above (a column slice: the teacher
  // logits of one tp rank's vocabulary slice, section_model.cpp). The CUDA
  // backend makes it one strided DMA from pinned memory; by default, a
  // held copy per row.
  virtual void copy_rows_from_host_held(void* dst, size_t dst_pitch, const void* host_src, size_t src_pitch,
                                        size_t row_bytes, size_t rows) {
    for (size_t r = 0; r < rows; ++r)
      copy_from_host_held(static_cast<std::byte*>(dst) + r * dst_pitch,
                          static_cast<const std::byte*>(host_src) + r * src_pitch, row_bytes);
  }
  // A marker of the work queued so far that another backend can order its
  // own work after (wait_for): the CUDA backend records an event; null
  // where queued work is done when the call returns (the CPU's). Held by
  // a hand-off in device memory until its last reader lets go.
  virtual std::shared_ptr<void> ready_marker() { return nullptr; }
  // Work queued here from now on runs after the marked work (the CUDA
  // backend: cudaStreamWaitEvent, no host wait). Null: nothing to wait for.
  virtual void wait_for(const std::shared_ptr<void>& marker) { (void)marker; }
  // A mark after the work queued so far, and whether all of that work is
  // done — asked without waiting (the CUDA backend records an event and
  // queries it). A backend whose copies are done when they return (the
  // CPU's) has passed every fence.
  virtual uint64_t fence() { return 0; }
  virtual bool passed(uint64_t /*fence*/) { return true; }
  // dst[n] (dst_dtype) = src[n] (src_dtype): F32 -> BF16 rounds to nearest
  // even (nn/dtype.h), BF16 -> F32 is exact, equal dtypes copy.
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, size_t n) = 0;

  virtual void zero(float* p, size_t n) = 0;
  virtual void zero_scalars(double* p, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;  // dst = src, both backend memory
  // `rows` rows of `width` floats, from src every src_stride floats to dst
  // every dst_stride floats, both backend memory (a column block of a
  // matrix: the tp ranks' logits laid side by side). By default a copy()
  // per row; the CUDA backend makes it one cudaMemcpy2DAsync.
  virtual void copy_rows(float* dst, size_t dst_stride, const float* src, size_t src_stride, size_t width,
                         size_t rows) {
    for (size_t r = 0; r < rows; ++r) copy(dst + r * dst_stride, src + r * src_stride, width);
  }
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;  // out = a + b
  virtual void accumulate(float* dst, const float* src, size_t n) = 0;     // dst += src
  virtual void scale(float* p, float s, size_t n) = 0;                    // p *= s
  // *out = Σ p² accumulated in fp64, in a fixed order (out: a scalar accumulator)
  virtual void sq_norm(double* out, const float* p, size_t n) = 0;

  // ---- embedding --------------------------------------------------------
  // out[N,C] = table[tokens[i]]            tokens[N] in [0,V), table[V,C]
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N, int64_t C) = 0;
  // dtable[V,C] += dout rows scattered by tokens
  virtual void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t C) = 0;

  // ---- linear: out = inp · wᵀ + bias ------------------------------------
  // Whether the linear ops read the bf16 copies of their operands
  // (Operand::bf16) when the caller passes them, instead of rounding the
  // fp32 values on every call: a backend with bf16 GEMMs. The engine then
  // keeps copies of the weights (section_model.h) and of the decoder
  // layers' linear inputs (decoder_block.h).
  virtual bool wants_bf16_operands() const { return false; }
  // Whether, more than that, a linear op given an operand's bf16 copy never
  // reads its fp32 values (bf16 GEMMs): then the engine writes an activation
  // that only linear ops read in bf16 alone (Out::f32, GradOut::p null) and
  // keeps no fp32 values of it (decoder_block.h). Implies wants_bf16_operands.
  virtual bool bf16_operands_suffice() const { return false; }
  // out[N,OC], inp[N,C], w[OC,C] (PyTorch nn.Linear layout), bias[OC] or null;
  // out's bf16 (Out), when given, is the result (bias included) rounded.
  virtual void linear_forward(Out out, Operand inp, Operand w, const float* bias, int64_t N, int64_t C,
                              int64_t OC) = 0;
  // dinp[N,C] += dout·w, dw[OC,C] += doutᵀ·inp (each = when overwritten;
  // an overwritten dw is zeros when N = 0), dbias[OC] += Σ_rows dout;
  // each may be null. dout[N,OC] is an Operand like inp: its bf16 copy,
  // when the caller has one (an activation op's GradOut), is what the
  // GEMMs read. An Operand's f32 may be null when its bf16 is given to a
  // backend that wants_bf16_operands (the engine's activations written
  // in bf16 only); dbias reads dout.f32.
  virtual void linear_backward(Grad dinp, Grad dw, float* dbias, Operand dout, Operand inp, Operand w, int64_t N,
                               int64_t C, int64_t OC) = 0;

  // ---- norms ------------------------------------------------------------
  // RMSNorm: out = inp / sqrt(mean(inp²) + eps) * w.  out,inp[N,C], w[C], rstd[N] (saved)
  virtual void rmsnorm_forward(Out out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                               float eps) = 0;
  virtual void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                const float* rstd, int64_t N, int64_t C) = 0;
  // LayerNorm: out = (inp - mean) * rstd * w + b.  out,inp[N,C], w,b[C], mean,rstd[N] (saved)
  virtual void layernorm_forward(Out out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                                 int64_t N, int64_t C, float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) = 0;

  // ---- rotary position embedding ("rotate half", Llama) -----------------
  // out[N,H,D] = x[N,H,D] rotated: for i < D/2, angle = pos[n] * theta^(-2i/D),
  // (x_i, x_{i+D/2}) -> (x_i cos - x_{i+D/2} sin, x_{i+D/2} cos + x_i sin).
  // pos[N] is each token's position inside its own sequence. out may be x
  // (in place: out.f32 == x.f32, or out.bf16 == x.bf16 with x in bf16
  // alone); out.bf16, when given, gets the rotated values rounded (Out).
  // x is an Operand read as above: fp32, or bf16 alone (q and k as their
  // GEMMs wrote them, decoder_block.cpp).
  virtual void rope_forward(Out out, Operand x, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                            float theta) = 0;
  // out[N,H,D] = dx[N,H,D] rotated back (the gradient of a rotation), as above.
  virtual void rope_backward(Out out, const float* dx, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                             float theta) = 0;

  // ---- grouped-query attention over packed sequences ---------------------
  // q[N,H*D], k,v[N,KV*D] (H % KV == 0; query head h reads kv head h/(H/KV)),
  // out[N,H*D] = softmax(q·kᵀ/sqrt(D) [+ causal mask]) · v per sequence,
  // lse[N,H] = the rows' log-sum-exp, saved for backward. Their bf16
  // copies (Operand), when the caller keeps them, are what an attention with
  // bf16 operands reads instead of rounding them on each call (the CUDA
  // backend's tensor-core and flash paths), forward and backward; q, k, v
  // come in bf16 alone where the copies suffice (an fp32 attention then
  // computes from them widened).
  virtual void attention_forward(float* out, float* lse, Operand q, Operand k, Operand v, const int32_t* cu_seqlens,
                                 int64_t n_seq, int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) = 0;
  // dq[N,H*D], dk,dv[N,KV*D] += (or =); recomputes the probabilities from
  // lse. Every row of an overwritten gradient is written (cu_seqlens covers
  // [0, N)).
  virtual void attention_backward(Grad dq, Grad dk, Grad dv, const float* dout, const float* out, const float* lse,
                                  Operand q, Operand k, Operand v, const int32_t* cu_seqlens, int64_t n_seq,
                                  int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) = 0;

  // ---- activations --------------------------------------------------------
  // out[n] = silu(gate[n]) * up[n]; gate and up fp32, or bf16 alone (Operand)
  virtual void swiglu_forward(Out out, Operand gate, Operand up, size_t n) = 0;
  // dgate[n], dup[n] += (or =) their gradients; either may be unwanted
  virtual void swiglu_backward(GradOut dgate, GradOut dup, const float* dout, Operand gate, Operand up,
                               size_t n) = 0;
  // out[n] = gelu_tanh(inp[n]) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))
  virtual void gelu_forward(Out out, const float* inp, size_t n) = 0;
  virtual void gelu_backward(GradOut dinp, const float* dout, const float* inp, size_t n) = 0;
  // out[n] = max(inp[n], 0); dinp[n] += dout[n] where inp[n] > 0
  virtual void relu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void relu_backward(Grad dinp, const float* dout, const float* inp, size_t n) = 0;

  // ---- patches ------------------------------------------------------------
  // pixels[I,Ch,S,S] -> patches[I*(S/p)², Ch*p*p], patch-major (row, column),
  // each row ordered (channel, dy, dx) like a Conv2d weight [hidden,Ch,p,p]
  // flattened, so patch embedding = linear_forward(patches, conv weight).
  virtual void im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S,
                              int64_t p) = 0;

  // ---- losses (fused forward + gradient, one pass over the logits) --------
  // Cross-entropy over rows of logits[N,V] with targets[N] (a row with
  // target < 0 is skipped). Writes *loss = Σ_rows -log softmax(row)[target]
  // (fp64 accumulator) and, when dlogits[N,V] is not null, adds
  // scale · (softmax(row) - onehot(target)) to it.
  virtual void cross_entropy(double* loss, float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, float scale) = 0;
  // Distillation KL with temperature T over rows of student[N,V] against
  // teacher[N,V] (rows with targets[i] < 0 skipped; targets only mask).
  // Writes *loss = Σ_rows T² · KL(softmax(teacher/T) ‖ softmax(student/T)) and,
  // when dstudent[N,V] is not null, adds scale · T · (softmax(student/T) - softmax(teacher/T)).
  virtual void kl_divergence(double* loss, float* dstudent, const float* student, const float* teacher,
                             const int32_t* targets, int64_t N, int64_t V, float T, float scale) = 0;

  // ---- vocabulary-parallel losses (tensor parallelism) ----------------------
  // A tensor-parallel rank holds columns [v0, v0 + V) of logits whose full
  // rows are split over the ranks; only its first `valid` columns are real
  // vocabulary (the rest is padding, ignored). The caller reduces the row
  // statistics across ranks between these ops (section_model.cpp), so the
  // full rows are never gathered. Rows with targets[n] < 0 are skipped where
  // targets are given. The CPU and CUDA backends have them; the defaults
  // throw (a backend without them).
  // mx[N] = max over the valid columns of x[n,·]·inv_t (-inf when none)
  virtual void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t);
  // mx[N] = max over r of parts[r, n]                                parts[R, N]
  virtual void max_of_parts(float* mx, const float* parts, int64_t R, int64_t N);
  // se[N] = Σ_valid exp(x[n,j]·inv_t − mx[n]); tx[N] (when not null) = x[n, targets[n] − v0]
  // where that column is this rank's, else 0
  virtual void shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx,
                            int64_t N, int64_t V, int64_t valid, int64_t v0, float inv_t);
  // With the reduced mx, se (sums over every rank) and tx: *loss = Σ_rows
  // (mx + log se − tx) and dlogits[N,V] += scale · (exp(x − mx)/se − onehot)
  // on this rank's valid columns.
  virtual void shard_cross_entropy(double* loss, float* dlogits, const float* x, const int32_t* targets,
                                   const float* mx, const float* se, const float* tx, int64_t N, int64_t V,
                                   int64_t valid, int64_t v0, float scale);
  // KL(softmax(t/T) ‖ softmax(s/T)) with the reduced statistics of student
  // (mx_s, se_s) and teacher (mx_t, se_t) over x/T: kl[N] = T² · this rank's
  // share of each row's sum (0 for skipped rows), dstudent[N,V] +=
  // scale · T · (softmax(s/T) − softmax(t/T)) on the valid columns.
  virtual void shard_kl(float* kl, float* dstudent, const float* student, const float* teacher,
                        const int32_t* targets, const float* mx_s, const float* se_s, const float* mx_t,
                        const float* se_t, int64_t N, int64_t V, int64_t valid, float T, float scale);
  // *out = Σ_{n: targets[n] >= 0} rows[n], accumulated in fp64
  virtual void masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N);

  // ---- optimizer ----------------------------------------------------------
  // torch.optim.AdamW on n parameters, the gradient being g·grad_scale (a
  // clipping coefficient, applied in the same pass; g is not written):
  // p -= lr·wd·p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
  // p -= lr · (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps). t >= 1 is the step number.
  // p16[n] (BF16), when not null: the updated p rounded to bf16 (nn/dtype.h),
  // written in the same pass — the parameters' bf16 copy the linear ops
  // read (Operand), refreshed without another read of p.
  virtual void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, int64_t t, float grad_scale, void* p16) = 0;

  // Threads for the non-GEMM kernels and the BLAS (0 = all cores).
  virtual void set_threads(int threads) = 0;
  virtual int threads() const = 0;

 protected:
  explicit Backend(Device device) : device_(device) {}

 private:
  Device device_;
};

// `floats` fp32 of a backend's memory, released when this goes out of scope
// (on every path: a collective that throws included); none when floats = 0.
class ScopedBuffer {
 public:
  ScopedBuffer(Backend& backend, size_t floats) : b_(backend), p_(floats ? backend.allocate(floats) : nullptr) {}
  ~ScopedBuffer() {
    if (p_) b_.release(p_);
  }
  ScopedBuffer(const ScopedBuffer&) = delete;
  ScopedBuffer& operator=(const ScopedBuffer&) = delete;
  float* get() const { return p_; }

 private:
  Backend& b_;
  float* p_;
};

}  // namespace maestro
