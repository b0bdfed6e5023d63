// The per-element math of the CUDA backend's kernels (gpu/cuda/*.cu), as
// MAESTRO_HD functions: the kernels call them on the device, and
// tests/gpu/kernel_math_test.cpp runs the very same code on the CPU against
// the CPU backend and cpu/reference_ops.h. A kernel adds only the parallel
// shape (which thread owns which element, how a row's sums are reduced);
// what is computed per element lives here. Header only, no CUDA needed.
//
// fp32 throughout, like the CPU backend; rotary angles in fp64 as there.
#pragma once

#include <math.h>

#include <cstdint>

#include "nn/dtype.h"

namespace maestro::gpu_math {

// ---- norms -----------------------------------------------------------------
// RMSNorm row: r = 1/sqrt(Σx²/C + eps); out = x·r·w
MAESTRO_HD inline float rms_rstd(float sum_sq, int64_t C, float eps) { return 1.0f / sqrtf(sum_sq / float(C) + eps); }
MAESTRO_HD inline float rmsnorm_out(float x, float r, float w) { return x * r * w; }
// dx = r·dy·w − k·x with k = r³·Σ(dy·w·x)/C (one per row)
MAESTRO_HD inline float rmsnorm_row_k(float r, float dot, int64_t C) { return r * r * r * dot / float(C); }
MAESTRO_HD inline float rmsnorm_dx(float x, float dy, float w, float r, float k) { return r * dy * w - k * x; }
MAESTRO_HD inline float rmsnorm_dw(float x, float dy, float r) { return dy * x * r; }

// LayerNorm row: mean m, r = 1/sqrt(var + eps), out = (x−m)·r·w + b
MAESTRO_HD inline float ln_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
MAESTRO_HD inline float layernorm_out(float x, float m, float r, float w, float b) { return (x - m) * r * w + b; }
// dx = r·(dy·w − mean(g) − x̂·mean(g·x̂)), g = dy·w, x̂ = (x−m)·r
MAESTRO_HD inline float layernorm_dx(float x, float dy, float w, float m, float r, float mean_g, float mean_gx) {
  return r * (dy * w - mean_g - (x - m) * r * mean_gx);
}
MAESTRO_HD inline float layernorm_dw(float x, float dy, float m, float r) { return dy * (x - m) * r; }

// ---- rotary ("rotate half") -------------------------------------------------
// θ^(−2i/D), in fp64 like the CPU backend
MAESTRO_HD inline double rope_inv_freq(int64_t i, int64_t D, float theta) {
  return pow(double(theta), -2.0 * double(i) / double(D));
}
// The rotation of pair i at position pos: c = cos(angle), s = sign·sin(angle)
// (fp64 angle, as the CPU backend); sign −1 is the inverse (backward). One
// per (token, pair), shared by every head.
MAESTRO_HD inline void rope_cos_sin(int32_t pos, double inv_freq, float sign, float& c, float& s) {
  const double a = double(pos) * inv_freq;
  c = float(cos(a));
  s = sign * float(sin(a));
}
// (x0, x1) -> (x0 c − x1 s, x1 c + x0 s)
MAESTRO_HD inline void rope_apply(float& x0, float& x1, float c, float s) {
  const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
  x0 = y0;
  x1 = y1;
}

// ---- activations --------------------------------------------------------------
MAESTRO_HD inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MAESTRO_HD inline float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }
// d/dgate and d/dup of silu(gate)·up, times dout
MAESTRO_HD inline float swiglu_dgate(float dout, float gate, float up) {
  const float s = sigmoid(gate);
  return dout * up * (s + gate * s * (1.0f - s));
}
MAESTRO_HD inline float swiglu_dup(float dout, float gate) { return dout * gate * sigmoid(gate); }
// max(x, 0), NaN passed on as torch.relu does; its gradient, times dout
MAESTRO_HD inline float relu(float x) { return x < 0.0f ? 0.0f : x; }
MAESTRO_HD inline float relu_grad(float dout, float x) { return x > 0.0f ? dout : 0.0f; }
// g += x, or g = x (never reading g) for an overwritten gradient (nn/backend.h's Grad)
MAESTRO_HD inline void put_grad(float& g, float x, bool add) { g = add ? g + x : x; }
// An element-wise op's input (nn/backend.h's Operand as rope and swiglu
// read it): its fp32 values when given, else its bf16 values widened
// (exact) — an activation kept in bf16 alone.
struct In {
  const float* f32;
  const uint16_t* b16;
  MAESTRO_HD float operator[](int64_t i) const { return f32 ? f32[i] : bf16_to_float(b16[i]); }
};
// out[i] = x in fp32 and/or bf16 (nn/backend.h's Out: either may be null).
MAESTRO_HD inline void put_out(float* f32, uint16_t* b16, int64_t i, float x) {
  if (f32) f32[i] = x;
  if (b16) b16[i] = float_to_bf16(x);
}
// A gradient (put_grad when g is not null) and its bf16 copy (GradOut: only
// an overwritten gradient has one, so the copy is x's rounding).
MAESTRO_HD inline void put_grad_out(float* g, bool add, uint16_t* g16, int64_t i, float x) {
  if (g) put_grad(g[i], x, add);
  if (g16) g16[i] = float_to_bf16(x);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
MAESTRO_HD inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))); }
MAESTRO_HD inline float gelu_grad(float dout, float x) {
  const float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  return dout * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x));
}

// ---- softmax, cross-entropy, KL ---------------------------------------------------
// Online softmax state of a row: max m and Σ exp(x − m). Merging two partial
// states (two threads' halves of a row) is associative, so a reduction tree
// of any shape gives the row's (max, sum).
struct SoftmaxState {
  float max;
  float sum;
};
MAESTRO_HD inline SoftmaxState softmax_init() { return {-INFINITY, 0.0f}; }
MAESTRO_HD inline SoftmaxState softmax_push(SoftmaxState s, float x) {
  if (x <= s.max) return {s.max, s.sum + expf(x - s.max)};
  return {x, s.sum * expf(s.max - x) + 1.0f};
}
MAESTRO_HD inline SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b) {
  if (a.sum == 0.0f) return b;
  if (b.sum == 0.0f) return a;
  const float m = a.max > b.max ? a.max : b.max;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
MAESTRO_HD inline float softmax_lse(SoftmaxState s) { return s.max + logf(s.sum); }
// Cross-entropy of one row: loss = lse − x[target];
// gradient element: scale·(exp(x − lse) − [j == target])
MAESTRO_HD inline float ce_grad(float x, float lse, bool is_target, float scale) {
  return scale * (expf(x - lse) - (is_target ? 1.0f : 0.0f));
}
// KL(teacher ‖ student) at temperature T, per element given both rows'
// log-sum-exp of x/T: T²·p_t·(log p_t − log p_s), and its gradient
// scale·T·(p_s − p_t).
MAESTRO_HD inline float kl_term(float student, float teacher, float lse_s, float lse_t, float T) {
  const float ls = student / T - lse_s, lt = teacher / T - lse_t;
  return T * T * expf(lt) * (lt - ls);
}
MAESTRO_HD inline float kl_grad(float student, float teacher, float lse_s, float lse_t, float T, float scale) {
  return scale * T * (expf(student / T - lse_s) - expf(teacher / T - lse_t));
}

// ---- vocabulary-parallel losses (a rank's columns [v0, v0 + valid) of a row) ----------
// nn/backend.h's shard_* ops; the ranks' row maxima and sums of
// exponentials are reduced between them (nn/vocab_parallel_loss.cpp).
// Target column `target` within this rank's columns, or -1 when the row is
// skipped (target < 0) or the column is another rank's.
MAESTRO_HD inline int64_t shard_column(int32_t target, int64_t v0, int64_t valid) {
  const int64_t c = int64_t(target) - v0;
  return target >= 0 && c >= 0 && c < valid ? c : -1;
}
// A row's log Σ exp from its reduced max and sum of exp(x − max), in fp64
// as the CPU backend does it.
MAESTRO_HD inline double shard_lse(float mx, float se) { return double(mx) + log(double(se)); }
// One column's term of a row's sum of exponentials: exp(x·inv_t − max).
MAESTRO_HD inline float shard_exp(float x, float inv_t, float mx) { return expf(x * inv_t - mx); }

// ---- attention (one query row against one key) ----------------------------------------
// Whether query token i may see key token j of the same sequence.
MAESTRO_HD inline bool attention_visible(int64_t i, int64_t j, bool causal) { return !causal || j <= i; }
// The end of the part of score row i that the batched GEMMs read back: the
// whole row (L), or with causal blocks of `block` rows (gpu/gemm_plan.h) the
// end of i's diagonal block — the masked zeros of P and dS past it are
// never read, so the kernels do not write them.
MAESTRO_HD inline int64_t attention_row_end(int64_t i, int64_t L, int64_t block) {
  if (block <= 0) return L;
  const int64_t end = (i / block + 1) * block;
  return end < L ? end : L;
}
// dS = P·(dP − Σ_j P·dP) (= P·(dP − rowsum(dO∘O)))
MAESTRO_HD inline float attention_dscore(float p, float dp, float delta) { return p * (dp - delta); }
// The flash kernels' online softmax over a row's key tiles: after a tile
// the row's running max is m_new = max(m, the tile's visible scores), −∞
// while nothing is visible. What the row has summed so far (Σ exp, the
// output) is multiplied by flash_rescale (1 while nothing is visible), and
// a score x (−∞ where masked) adds flash_prob = exp(x − m_new) (0 masked).
MAESTRO_HD inline float flash_rescale(float m, float m_new) { return m_new == -INFINITY ? 1.0f : expf(m - m_new); }
MAESTRO_HD inline float flash_prob(float x, float m_new) { return m_new == -INFINITY ? 0.0f : expf(x - m_new); }

// ---- optimizer --------------------------------------------------------------------------
// torch.optim.AdamW: the step's constants, computed once per call on the host.
struct AdamWStep {
  float lr, beta1, beta2, eps, decay;  // decay = 1 − lr·weight_decay
  float c1, c2;                        // bias corrections 1 − β^t (fp64 pow, like the CPU backend)
  float grad_scale;                    // the gradient is g·grad_scale (clipping)
};
inline AdamWStep adamw_step(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                            float grad_scale) {
  return {lr,
          beta1,
          beta2,
          eps,
          1.0f - lr * weight_decay,
          float(1.0 - pow(double(beta1), double(t))),
          float(1.0 - pow(double(beta2), double(t))),
          grad_scale};
}
MAESTRO_HD inline void adamw_update(float& p, float g, float& m, float& v, const AdamWStep& s) {
  g *= s.grad_scale;
  p *= s.decay;
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  p -= s.lr * (m / s.c1) / (sqrtf(v / s.c2) + s.eps);
}

// Two bf16 values in one 32-bit word as they lie in memory (little-endian:
// `lo` at the lower address) — the 8-byte stores of the kernels that round
// four floats at a time.
MAESTRO_HD inline uint32_t bf16x2(float lo, float hi) {
  return uint32_t(float_to_bf16(lo)) | uint32_t(float_to_bf16(hi)) << 16;
}

// ---- global norm ------------------------------------------------------------------------
MAESTRO_HD inline double sq(float x) { return double(x) * double(x); }

}  // namespace maestro::gpu_math
