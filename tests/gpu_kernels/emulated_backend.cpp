// EmulatedBackend (emulated_backend.h).
#include "emulated_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "cpu/cpu_backend.h"
#include "gpu/cuda/attention_kernels.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/elementwise_kernels.h"
#include "gpu/cuda/vocab_parallel_kernels.h"
#include "gpu/kernel_math.h"
#include "gpu/launch_plan.h"

namespace maestro::test_support {

namespace {

using namespace cuda_detail;

// Host memory as cudaMalloc gives it: 256-byte aligned, and zeroed.
void* device_alloc(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256 + 256;
  void* p = std::aligned_alloc(256, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

// Scratch for one call (the backend's grow-only slots on a GPU).
class Scratch {
 public:
  ~Scratch() {
    for (void* p : blocks_) std::free(p);
  }
  template <class T>
  T* get(size_t n) {
    blocks_.push_back(device_alloc(n * sizeof(T)));
    return static_cast<T*>(blocks_.back());
  }
  // Filled with 0xFF bytes (NaN as fp32 and bf16): what a kernel or GEMM
  // reads of it before writing shows.
  template <class T>
  T* poisoned(size_t n) {
    T* p = get<T>(n);
    std::memset(static_cast<void*>(p), 0xff, n * sizeof(T));
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend(EmulatedAttention attention, int64_t causal_block)
      : Backend(Device::Cuda), attention_(attention), block_(causal_block), cpu_(make_cpu_backend(1)) {}
  const char* name() const override { return "emulated-cuda"; }

  void* allocate(size_t n, DType dtype) override { return device_alloc(n * dtype_size(dtype)); }
  double* allocate_scalars(size_t n) override { return static_cast<double*>(device_alloc(n * sizeof(double))); }
  void release(void* p) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void convert(void* dst, DType dd, const void* src, DType sd, size_t n) override {
    launch_convert(dst, dd, src, sd, n, nullptr);
  }
  void zero(float* p, size_t n) override { std::memset(p, 0, n * sizeof(float)); }
  void zero_scalars(double* p, size_t n) override { std::memset(p, 0, n * sizeof(double)); }
  void copy(float* dst, const float* src, size_t n) override {
    if (n && dst != src) std::memmove(dst, src, n * sizeof(float));
  }
  void add(float* out, const float* a, const float* b, size_t n) override { launch_add(out, a, b, n, nullptr); }
  void accumulate(float* dst, const float* src, size_t n) override { launch_accumulate(dst, src, n, nullptr); }
  void scale(float* p, float s, size_t n) override { launch_scale(p, s, n, nullptr); }
  void sq_norm(double* out, const float* p, size_t n) override {
    Scratch s;
    launch_sq_norm(out, s.get<double>(size_t(2 * kSqNormMaxBlocks)), p, n, nullptr);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N, int64_t C) override {
    Scratch s;
    launch_embedding_forward(out, indices(s, tokens, N), table, N, C, nullptr);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t C) override {
    Scratch s;
    const TokenRows by_token = group_rows_by_token(tokens, N);
    launch_embedding_backward(dtable, dout, indices(s, by_token.packed.data(), int64_t(by_token.packed.size())),
                              by_token.distinct, C, nullptr);
  }

  // The GEMMs: cuBLASLt's on a GPU, the CPU backend's here (fp32).
  void linear_forward(float* out, Operand inp, Operand w, const float* bias, int64_t N, int64_t C,
                      int64_t OC) override {
    if (N == 0) return;
    cpu_->linear_forward(out, inp.f32, w.f32, nullptr, N, C, OC);
    if (bias) launch_bias_add(out, bias, N, OC, nullptr);
  }
  void linear_backward(Grad dinp, Grad dw, float* dbias, const float* dout, Operand inp, Operand w, int64_t N,
                       int64_t C, int64_t OC) override {
    if (N == 0) {
      if (dw.p && !dw.add) zero(dw.p, size_t(OC * C));
      return;
    }
    cpu_->linear_backward(dinp, dw, nullptr, dout, inp.f32, w.f32, N, C, OC);
    Scratch s;
    if (dbias) launch_column_sum(dbias, s.get<float>(size_t(column_chunks(N) * OC)), dout, N, OC, nullptr);
  }

  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                       float eps) override {
    launch_rmsnorm_forward(out, rstd, inp, w, N, C, eps, nullptr);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int64_t N, int64_t C) override {
    Scratch s;
    launch_rmsnorm_backward(dinp, dw, s.get<float>(size_t(column_chunks(N) * C)), dout, inp, w, rstd, N, C, nullptr);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    launch_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, nullptr);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    Scratch s;
    launch_layernorm_backward(dinp, dw, db, s.get<float>(size_t(column_chunks(N) * C)), dout, inp, w, mean, rstd, N,
                              C, nullptr);
  }
  void rope_forward(float* x, const int32_t* pos, int64_t N, int64_t H, int64_t D, float theta) override {
    Scratch s;
    launch_rope(x, indices(s, pos, N), N, H, D, theta, 1.0f, nullptr);
  }
  void rope_backward(float* dx, const int32_t* pos, int64_t N, int64_t H, int64_t D, float theta) override {
    Scratch s;
    launch_rope(dx, indices(s, pos, N), N, H, D, theta, -1.0f, nullptr);
  }

  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* cu,
                         int64_t n_seq, int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) override {
    if (N == 0) return;
    Scratch s;
    if (attention_ == EmulatedAttention::Tiled) {
      const auto [tiles, n_tiles] = upload_tiles(s, cu, n_seq, kFastRowsPerTile);
      launch_fast_attention_forward(out, lse, q, k, v, tiles, n_tiles, H, KV, D, causal, nullptr);
      return;
    }
    if (attention_ != EmulatedAttention::Flash) return batched_forward(s, out, lse, q, k, v, cu, n_seq, N, H, KV, D, causal);
    const auto [tiles, n_tiles] = upload_tiles(s, cu, n_seq, kFlashRows);
    launch_flash_attention_forward(out, lse, rounded(s, q, N * H * D), rounded(s, k, N * KV * D),
                                   rounded(s, v, N * KV * D), tiles, n_tiles, H, KV, D, causal, nullptr);
  }
  void attention_backward(Grad dq, Grad dk, Grad dv, const float* dout, const float* out, const float* lse,
                          const float* q, const float* k, const float* v, const int32_t* cu, int64_t n_seq, int64_t N,
                          int64_t H, int64_t KV, int64_t D, bool causal) override {
    if (N == 0 || (!dq.p && !dk.p && !dv.p)) return;
    Scratch s;
    float* delta = s.get<float>(size_t(N * H));
    launch_attention_delta(delta, dout, out, N, H, D, nullptr);
    if (attention_ == EmulatedAttention::Tiled) {
      const auto [tiles, n_tiles] = upload_tiles(s, cu, n_seq, kFastRowsPerTile);
      launch_fast_attention_backward(dq.p, dq.add, dk.p, dk.add, dv.p, dv.add, dout, lse, delta, q, k, v, tiles,
                                     n_tiles, H, KV, D, causal, nullptr);
      return;
    }
    if (attention_ != EmulatedAttention::Flash)
      return batched_backward(s, dq, dk, dv, dout, lse, delta, q, k, v, cu, n_seq, N, H, KV, D, causal);
    const auto [tiles, n_tiles] = upload_tiles(s, cu, n_seq, kFlashRows);
    launch_flash_attention_backward(dq.p, dq.add, dk.p, dk.add, dv.p, dv.add, rounded(s, dout, N * H * D), lse, delta,
                                    rounded(s, q, N * H * D), rounded(s, k, N * KV * D), rounded(s, v, N * KV * D),
                                    tiles, n_tiles, H, KV, D, causal, nullptr);
  }

  void swiglu_forward(float* out, const float* gate, const float* up, size_t n) override {
    launch_swiglu_forward(out, gate, up, n, nullptr);
  }
  void swiglu_backward(Grad dgate, Grad dup, const float* dout, const float* gate, const float* up,
                       size_t n) override {
    launch_swiglu_backward(dgate.p, dgate.add, dup.p, dup.add, dout, gate, up, n, nullptr);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override { launch_gelu_forward(out, inp, n, nullptr); }
  void gelu_backward(Grad dinp, const float* dout, const float* inp, size_t n) override {
    launch_gelu_backward(dinp.p, dinp.add, dout, inp, n, nullptr);
  }
  void relu_forward(float* out, const float* inp, size_t n) override { launch_relu_forward(out, inp, n, nullptr); }
  void relu_backward(Grad dinp, const float* dout, const float* inp, size_t n) override {
    launch_relu_backward(dinp.p, dinp.add, dout, inp, n, nullptr);
  }
  void im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p) override {
    launch_im2col_patches(patches, pixels, I, Ch, S, p, nullptr);
  }

  void cross_entropy(double* loss, float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     float scale) override {
    zero_scalars(loss, 1);
    Scratch s;
    launch_cross_entropy(loss, s.get<double>(size_t(N)), dlogits, logits, indices(s, targets, N), N, V, scale,
                         nullptr);
  }
  void kl_divergence(double* loss, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                     int64_t N, int64_t V, float T, float scale) override {
    zero_scalars(loss, 1);
    Scratch s;
    launch_kl_divergence(loss, s.get<double>(size_t(N)), dstudent, student, teacher, indices(s, targets, N), N, V, T,
                         scale, nullptr);
  }

  void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t) override {
    launch_shard_row_max(mx, x, N, V, valid, inv_t, nullptr);
  }
  void max_of_parts(float* mx, const float* parts, int64_t R, int64_t N) override {
    launch_max_of_parts(mx, parts, R, N, nullptr);
  }
  void shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx, int64_t N,
                    int64_t V, int64_t valid, int64_t v0, float inv_t) override {
    Scratch s;
    launch_shard_sumexp(se, tx, x, tx ? indices(s, targets, N) : nullptr, mx, N, V, valid, v0, inv_t, nullptr);
  }
  void shard_cross_entropy(double* loss, float* dlogits, const float* x, const int32_t* targets, const float* mx,
                           const float* se, const float* tx, int64_t N, int64_t V, int64_t valid, int64_t v0,
                           float scale) override {
    Scratch s;
    launch_shard_cross_entropy(loss, s.get<double>(size_t(N)), dlogits, x, indices(s, targets, N), mx, se, tx, N, V,
                               valid, v0, scale, nullptr);
  }
  void shard_kl(float* kl, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                const float* mx_s, const float* se_s, const float* mx_t, const float* se_t, int64_t N, int64_t V,
                int64_t valid, float T, float scale) override {
    Scratch s;
    launch_shard_kl(kl, dstudent, student, teacher, indices(s, targets, N), mx_s, se_s, mx_t, se_t, N, V, valid, T,
                    scale, nullptr);
  }
  void masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N) override {
    Scratch s;
    launch_masked_row_sum(out, rows, indices(s, targets, N), N, nullptr);
  }

  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale, void* p16) override {
    launch_adamw(p, g, m, v, static_cast<uint16_t*>(p16), n,
                 gpu_math::adamw_step(lr, beta1, beta2, eps, weight_decay, t, grad_scale), nullptr);
  }

  void set_threads(int) override {}
  int threads() const override { return 1; }

 private:
  // A host index array as "device memory" (the CUDA backend uploads it).
  static const int32_t* indices(Scratch& s, const int32_t* host, int64_t n) {
    if (n == 0) return nullptr;
    int32_t* d = s.get<int32_t>(size_t(n));
    std::memcpy(d, host, size_t(n) * sizeof(int32_t));
    return d;
  }
  static std::pair<const AttentionTile*, int64_t> upload_tiles(Scratch& s, const int32_t* cu, int64_t n_seq,
                                                               int rows_per_tile) {
    const std::vector<AttentionTile> tiles = plan_attention_tiles(cu, n_seq, rows_per_tile);
    if (tiles.empty()) return {nullptr, 0};
    AttentionTile* d = s.get<AttentionTile>(tiles.size());
    std::memcpy(static_cast<void*>(d), tiles.data(), tiles.size() * sizeof(AttentionTile));
    return {d, int64_t(tiles.size())};
  }
  // src[n] rounded to bf16 by the conversion kernel.
  static const uint16_t* rounded(Scratch& s, const float* src, int64_t n) {
    uint16_t* d = s.get<uint16_t>(size_t(n));
    launch_convert(d, DType::BF16, src, DType::F32, size_t(n), nullptr);
    return d;
  }

  // ---- the batched paths: per sequence, S = scale·q·kᵀ [H, L, L] and the
  // products with it as cuBLAS makes them (here loops: fp32 sums over
  // operands rounded to bf16 on the tensor-core path), the score kernels
  // between. Row i's scores are computed and read up to
  // gm::attention_row_end (a causal block's end); past it scratch stays NaN.
  bool bf16() const { return attention_ == EmulatedAttention::BatchedBf16; }
  int64_t block(int64_t L, bool causal) const { return causal && bf16() ? block_ : 0; }
  // The GEMMs' operands: rounded to bf16 and back on the tensor-core path.
  static std::vector<float> operand(const float* x, int64_t n, bool round) {
    std::vector<float> v(x, x + n);
    if (round)
      for (float& f : v) f = bf16_to_float(float_to_bf16(f));
    return v;
  }
  // S[h, i, j] = sc · Σ_d a[t0+i, h, d]·b[t0+j, h/g, d] for j < row end
  void scores(float* S, const std::vector<float>& a, const std::vector<float>& b, float sc, int64_t t0, int64_t L,
              int64_t H, int64_t KV, int64_t D, int64_t blk) const {
    const int64_t g = H / KV;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < gpu_math::attention_row_end(i, L, blk); ++j) {
          float acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += a[size_t(((t0 + i) * H + h) * D + d)] * b[size_t(((t0 + j) * KV + h / g) * D + d)];
          S[(h * L + i) * L + j] = sc * acc;
        }
  }
  static float bf(uint16_t x) { return bf16_to_float(x); }

  void batched_forward(Scratch& s, float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* cu, int64_t n_seq, int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) {
    const float sc = 1.0f / std::sqrt(float(D));
    const int64_t g = H / KV;
    const auto qo = operand(q, N * H * D, bf16()), ko = operand(k, N * KV * D, bf16()), vo = operand(v, N * KV * D, bf16());
    for (int64_t sq = 0; sq < n_seq; ++sq) {
      const int64_t t0 = cu[sq], L = cu[sq + 1] - cu[sq], blk = block(L, causal);
      if (L == 0) continue;
      float* S = s.poisoned<float>(size_t(H * L * L));
      scores(S, qo, ko, sc, t0, L, H, KV, D, blk);
      uint16_t* P16 = bf16() ? s.poisoned<uint16_t>(size_t(H * L * L)) : nullptr;
      if (P16) launch_attention_softmax_bf16(S, P16, lse, t0, L, H, causal, blk, nullptr);
      else launch_attention_softmax(S, lse, t0, L, H, causal, nullptr);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t d = 0; d < D; ++d) {
            float acc = 0;
            for (int64_t j = 0; j < gpu_math::attention_row_end(i, L, blk); ++j) {
              const size_t e = size_t((h * L + i) * L + j);
              acc += (P16 ? bf(P16[e]) : S[e]) * vo[size_t(((t0 + j) * KV + h / g) * D + d)];
            }
            out[((t0 + i) * H + h) * D + d] = acc;
          }
    }
  }

  void batched_backward(Scratch& s, Grad dq, Grad dk, Grad dv, const float* dout, const float* lse, const float* delta,
                        const float* q, const float* k, const float* v, const int32_t* cu, int64_t n_seq, int64_t N,
                        int64_t H, int64_t KV, int64_t D, bool causal) {
    const float sc = 1.0f / std::sqrt(float(D));
    const int64_t g = H / KV;
    const auto qo = operand(q, N * H * D, bf16()), ko = operand(k, N * KV * D, bf16()),
               vo = operand(v, N * KV * D, bf16()), doo = operand(dout, N * H * D, bf16());
    // An overwritten gradient: the GEMMs' beta = 0, every row written.
    if (dq.p && !dq.add) zero(dq.p, size_t(N * H * D));
    if (dk.p && !dk.add) zero(dk.p, size_t(N * KV * D));
    if (dv.p && !dv.add) zero(dv.p, size_t(N * KV * D));
    for (int64_t sq = 0; sq < n_seq; ++sq) {
      const int64_t t0 = cu[sq], L = cu[sq + 1] - cu[sq], blk = block(L, causal);
      if (L == 0) continue;
      float* S = s.poisoned<float>(size_t(H * L * L));
      float* dP = s.poisoned<float>(size_t(H * L * L));
      scores(S, qo, ko, sc, t0, L, H, KV, D, blk);
      scores(dP, doo, vo, 1.0f, t0, L, H, KV, D, blk);
      uint16_t *P16 = nullptr, *dS16 = nullptr;
      if (bf16()) {
        P16 = s.poisoned<uint16_t>(size_t(H * L * L));
        dS16 = s.poisoned<uint16_t>(size_t(H * L * L));
        launch_attention_backward_scores_bf16(S, dP, P16, dS16, lse, delta, t0, L, H, causal, blk, nullptr);
      } else {
        launch_attention_probs(S, lse, t0, L, H, causal, nullptr);
        launch_attention_dscores(dP, S, delta, t0, L, H, nullptr);
      }
      auto P = [&](size_t e) { return P16 ? bf(P16[e]) : S[e]; };
      auto dS = [&](size_t e) { return dS16 ? bf(dS16[e]) : dP[e]; };
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < gpu_math::attention_row_end(i, L, blk); ++j) {
            const size_t e = size_t((h * L + i) * L + j);
            const int64_t qi = ((t0 + i) * H + h) * D, kj = ((t0 + j) * KV + h / g) * D;
            for (int64_t d = 0; d < D; ++d) {
              if (dv.p) dv.p[kj + d] += P(e) * doo[size_t(qi + d)];
              if (dq.p) dq.p[qi + d] += sc * dS(e) * ko[size_t(kj + d)];
              if (dk.p) dk.p[kj + d] += sc * dS(e) * qo[size_t(qi + d)];
            }
          }
    }
  }

  EmulatedAttention attention_;
  int64_t block_;
  std::unique_ptr<Backend> cpu_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_backend(EmulatedAttention attention, int64_t causal_block) {
  return std::make_unique<EmulatedBackend>(attention, causal_block);
}

}  // namespace maestro::test_support
