// The CPU backend (cpu_backend.h). Shapes are in nn/backend.h's comments;
// here: how each op is computed, and why it is deterministic.
#include "cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace maestro {

namespace {

constexpr int64_t kElementGrain = 1 << 14;  // elements per chunk of an elementwise kernel
constexpr int64_t kReduceBlock = 1 << 12;   // elements per partial of a reduction (fixed: thread-count free)

// g[i] += x, or g[i] = x when g is overwritten (nn/backend.h's Grad).
inline void put(Grad g, int64_t i, float x) { g.p[i] = g.add ? g.p[i] + x : x; }
// The same for an activation op's gradient, and its bf16 copy when it has one
// (then it is overwritten: the copy is x's rounding).
inline void put(GradOut g, int64_t i, float x) {
  if (g.p) put(Grad(g), i, x);
  if (g.bf16) static_cast<uint16_t*>(g.bf16)[i] = float_to_bf16(x);
}
// out[i] = x, in fp32 and/or bf16 (nn/backend.h's Out).
inline void put(Out o, int64_t i, float x) {
  if (o.f32) o.f32[i] = x;
  if (o.bf16) static_cast<uint16_t*>(o.bf16)[i] = float_to_bf16(x);
}
// Runs f(store) with store(i, x) writing out[i] as `o` asks: an op's loop is
// made once for fp32 alone — plain stores, vectorised as before the bf16
// copies existed — and once for put() (a copy asked for).
struct StoreF32 {
  float* p;
  void operator()(int64_t i, float x) const { p[i] = x; }
};
struct StoreOut {
  Out o;
  void operator()(int64_t i, float x) const { put(o, i, x); }
};
template <class F>
void with_store(Out o, F&& f) {
  if (o.bf16) f(StoreOut{o});
  else f(StoreF32{o.f32});
}

// An Operand's values (nn/backend.h): its fp32 ones, or its bf16 ones
// widened into `keep` where it comes in bf16 alone (the CPU backend's
// copies never suffice, but a wrapper standing for bf16 GEMMs passes them
// on: tests/support/checked_backend.h). Read before any output is written,
// so an op may work in place on the copy.
const float* values(Operand x, size_t n, std::vector<float>& keep) {
  if (x.f32) return x.f32;
  if (!x.bf16) throw std::logic_error("an operand with neither fp32 nor bf16 values");
  keep.resize(n);
  const auto* b = static_cast<const uint16_t*>(x.bf16);
  for (size_t i = 0; i < n; ++i) keep[i] = bf16_to_float(b[i]);
  return keep.data();
}

// Rows per chunk so that a chunk holds about kElementGrain elements.
int64_t row_grain(int64_t C) { return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, C)); }

// Attention's scratch (slot 0: P, slot 1: dP): grow-only and per thread, so
// the tasks running on the pool's threads never share one and no call
// allocates once the largest sequence has been seen.
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buffers[2];
  auto& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Tile of a GEMM's output along its longer side: a function of the shape
// only (never of the thread count), at most 8 tiles, at least 64 wide.
int64_t gemm_tile(int64_t dim) { return std::max<int64_t>(64, ((dim + 7) / 8 + 31) / 32 * 32); }

class CpuBackend final : public Backend {
 public:
  // OpenBLAS runs single-threaded: its own threading changes the bits of a
  // product with the thread count, so gemm() splits the output over the pool.
  explicit CpuBackend(int threads)
      : Backend(Device::Host), pool_(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()))) {
    openblas_set_num_threads(1);
  }

  const char* name() const override { return "cpu"; }

  // ---- memory ---------------------------------------------------------------
  // Host memory: the copies in and out are memmoves, and nothing is queued, so
  // copy_to_host has nothing to wait for.
  void* allocate(size_t n, DType dtype) override { return aligned_zeroed(n * dtype_size(dtype)); }
  double* allocate_scalars(size_t n) override { return static_cast<double*>(aligned_zeroed(n * sizeof(double))); }
  void release(void* p) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, size_t n) override {
    if (dst_dtype == src_dtype) return copy_bytes(dst, src, n * dtype_size(dst_dtype));
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      if (dst_dtype == DType::BF16) {
        auto* d = static_cast<uint16_t*>(dst);
        const auto* x = static_cast<const float*>(src);
        for (int64_t i = b; i < e; ++i) d[i] = float_to_bf16(x[i]);
      } else {
        auto* d = static_cast<float*>(dst);
        const auto* x = static_cast<const uint16_t*>(src);
        for (int64_t i = b; i < e; ++i) d[i] = bf16_to_float(x[i]);
      }
    });
  }
  void zero(float* p, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) { std::memset(p + b, 0, (e - b) * sizeof(float)); });
  }
  void zero_scalars(double* p, size_t n) override { std::fill(p, p + n, 0.0); }
  void copy(float* dst, const float* src, size_t n) override { copy_bytes(dst, src, n * sizeof(float)); }
  void add(float* out, const float* a, const float* b_, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = a[i] + b_[i];
    });
  }
  void accumulate(float* dst, const float* src, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] += src[i];
    });
  }
  void scale(float* p, float s, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] *= s;
    });
  }
  // Partials over fixed blocks, summed in block order.
  void sq_norm(double* out, const float* p, size_t n) override {
    const int64_t blocks = (int64_t(n) + kReduceBlock - 1) / kReduceBlock;
    std::vector<double> partial(size_t(blocks), 0.0);
    pool_.parallel_for(blocks, 4, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t end = std::min<int64_t>(int64_t(n), (k + 1) * kReduceBlock);
        double s = 0;
        for (int64_t i = k * kReduceBlock; i < end; ++i) s += double(p[i]) * p[i];
        partial[size_t(k)] = s;
      }
    });
    double s = 0;
    for (double x : partial) s += x;
    *out = s;
  }

  // ---- embedding --------------------------------------------------------------
  void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N, int64_t C) override {
    pool_.parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) std::memcpy(out + i * C, table + int64_t(tokens[i]) * C, C * sizeof(float));
    });
  }
  // A token may repeat: split the columns, and each column sums its rows in order.
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t C) override {
    pool_.parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < N; ++i) {
        float* d = dtable + int64_t(tokens[i]) * C;
        const float* g = dout + i * C;
        for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
      }
    });
  }

  // ---- linear ---------------------------------------------------------------------
  // fp32 GEMMs: bf16 copies of the operands are never wanted (wants_bf16_operands),
  // so every Operand's f32 is here.
  void linear_forward(Out o, Operand in, Operand lw, const float* bias, int64_t N, int64_t C,
                      int64_t OC) override {
    const float *inp = in.f32, *w = lw.f32;
    std::vector<float> sums;  // out in bf16 alone: the fp32 result first
    float* out = o.f32;
    if (!out) sums.resize(size_t(N * OC)), out = sums.data();
    // out[N,OC] = inp[N,C] · w[OC,C]ᵀ
    gemm(false, true, N, OC, C, inp, C, w, C, 0.0f, out, OC);
    if (bias)
      pool_.parallel_for(N, row_grain(OC), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          for (int64_t c = 0; c < OC; ++c) out[i * OC + c] += bias[c];
      });
    if (o.bf16) convert(o.bf16, DType::BF16, out, DType::F32, size_t(N * OC));
  }
  void linear_backward(Grad dinp, Grad dw, float* dbias, Operand dy, Operand in, Operand lw, int64_t N, int64_t C,
                       int64_t OC) override {
    if (N == 0) {  // no rows: an overwritten dw is the empty sum
      if (dw.p && !dw.add) std::fill_n(dw.p, OC * C, 0.0f);
      return;
    }
    const float *inp = in.f32, *w = lw.f32, *dout = dy.f32;
    if (!dout) throw std::logic_error("linear_backward: dout without fp32 values (Backend::bf16_operands_suffice)");
    // dinp[N,C] += (or =) dout[N,OC] · w[OC,C]
    if (dinp.p) gemm(false, false, N, C, OC, dout, OC, w, C, dinp.add ? 1.0f : 0.0f, dinp.p, C);
    // dw[OC,C] += (or =) dout[N,OC]ᵀ · inp[N,C]
    if (dw.p) gemm(true, false, OC, C, N, dout, OC, inp, C, dw.add ? 1.0f : 0.0f, dw.p, C);
    // dbias[OC] += Σ_rows dout, each column summing its rows in order
    if (dbias)
      pool_.parallel_for(OC, 64, [&](int64_t o0, int64_t o1) {
        for (int64_t i = 0; i < N; ++i)
          for (int64_t o = o0; o < o1; ++o) dbias[o] += dout[i * OC + o];
      });
  }

  // ---- norms ------------------------------------------------------------------------
  void rmsnorm_forward(Out out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                       float eps) override {
    with_store(out, [&](auto store) {
      pool_.parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* x = inp + i * C;
          float ss = 0;
          for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
          const float r = 1.0f / std::sqrt(ss / float(C) + eps);
          rstd[i] = r;
          for (int64_t c = 0; c < C; ++c) store(i * C + c, x[c] * r * w[c]);
        }
      });
    });
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int64_t N, int64_t C) override {
    // dx = r·(dy∘w) − x·r³·mean(dy∘w∘x);  dw = Σ_rows dy∘x·r
    if (dinp)
      pool_.parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float *x = inp + i * C, *dy = dout + i * C;
          const float r = rstd[i];
          float dot = 0;
          for (int64_t c = 0; c < C; ++c) dot += dy[c] * w[c] * x[c];
          const float k = r * r * r * dot / float(C);
          float* dx = dinp + i * C;
          for (int64_t c = 0; c < C; ++c) dx[c] += r * dy[c] * w[c] - k * x[c];
        }
      });
    if (dw)
      pool_.parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < N; ++i) {
          const float *x = inp + i * C, *dy = dout + i * C;
          const float r = rstd[i];
          for (int64_t c = c0; c < c1; ++c) dw[c] += dy[c] * x[c] * r;
        }
      });
  }
  void layernorm_forward(Out out, float* mean, float* rstd, const float* inp, const float* w, const float* b_,
                         int64_t N, int64_t C, float eps) override {
    with_store(out, [&](auto store) {
      pool_.parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float* x = inp + i * C;
          float m = 0;
          for (int64_t c = 0; c < C; ++c) m += x[c];
          m /= float(C);
          float v = 0;
          for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
          v /= float(C);
          const float r = 1.0f / std::sqrt(v + eps);
          mean[i] = m;
          rstd[i] = r;
          for (int64_t c = 0; c < C; ++c) store(i * C + c, (x[c] - m) * r * w[c] + b_[c]);
        }
      });
    });
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    // x̂ = (x−m)·r, g = dy∘w:  dx = r·(g − mean(g) − x̂·mean(g∘x̂))
    if (dinp)
      pool_.parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float *x = inp + i * C, *dy = dout + i * C;
          const float m = mean[i], r = rstd[i];
          float s1 = 0, s2 = 0;
          for (int64_t c = 0; c < C; ++c) {
            const float g = dy[c] * w[c];
            s1 += g;
            s2 += g * (x[c] - m) * r;
          }
          s1 /= float(C);
          s2 /= float(C);
          float* dx = dinp + i * C;
          for (int64_t c = 0; c < C; ++c) dx[c] += r * (dy[c] * w[c] - s1 - (x[c] - m) * r * s2);
        }
      });
    if (dw || db)
      pool_.parallel_for(C, 64, [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < N; ++i) {
          const float *x = inp + i * C, *dy = dout + i * C;
          const float m = mean[i], r = rstd[i];
          for (int64_t c = c0; c < c1; ++c) {
            if (dw) dw[c] += dy[c] * (x[c] - m) * r;
            if (db) db[c] += dy[c];
          }
        }
      });
  }

  // ---- rotary -------------------------------------------------------------------------
  void rope_forward(Out out, Operand x, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                    float theta) override {
    std::vector<float> keep;
    rotate(out, values(x, size_t(N * H * D), keep), pos, N, H, D, theta, 1.0f);
  }
  void rope_backward(Out out, const float* dx, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                     float theta) override {
    rotate(out, dx, pos, N, H, D, theta, -1.0f);
  }

  // ---- attention ------------------------------------------------------------------------
  // One task per (sequence, head) pair on the pool: S = q·kᵀ/√D by a
  // (single-threaded) sgemm on strided views into per-thread scratch, the
  // masked softmax row by row, out = P·v by sgemm. Causal rows compute the
  // full S and zero P above the diagonal: one sgemm beats a triangle of
  // small ones at these sizes.
  // fp32 throughout: q, k, v's bf16 copies (Operand) are read only where
  // they come alone, widened.
  void attention_forward(float* out, float* lse, Operand qo, Operand ko, Operand vo, const int32_t* cu, int64_t n_seq,
                         int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) override {
    std::vector<float> keep[3];  // q, k, v in bf16 alone: widened (values)
    const float *q = values(qo, size_t(N * H * D), keep[0]), *k = values(ko, size_t(N * KV * D), keep[1]),
                *v = values(vo, size_t(N * KV * D), keep[2]);
    const float sc = 1.0f / std::sqrt(float(D));
    const int64_t group = H / KV;
    pool_.parallel_for(n_seq * H, 1, [&](int64_t b, int64_t e) {
      for (int64_t pair = b; pair < e; ++pair) {
        const int64_t s = pair / H, h = pair % H, kh = h / group;
        const int64_t t0 = cu[s], L = cu[s + 1] - cu[s];
        if (L == 0) continue;
        float* P = scratch(0, size_t(L * L));  // [L, L]
        const float* qh = q + t0 * H * D + h * D;
        const float* kk = k + t0 * KV * D + kh * D;
        const float* vv = v + t0 * KV * D + kh * D;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(L), int(L), int(D), sc, qh, int(H * D), kk,
                    int(KV * D), 0.0f, P, int(L));
        for (int64_t i = 0; i < L; ++i) {
          float* row = P + i * L;
          const int64_t end = causal ? i + 1 : L;
          float mx = row[0];
          for (int64_t j = 1; j < end; ++j) mx = std::max(mx, row[j]);
          float sum = 0;
          for (int64_t j = 0; j < end; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
          }
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j < end; ++j) row[j] *= inv;
          for (int64_t j = end; j < L; ++j) row[j] = 0.0f;
          lse[(t0 + i) * H + h] = mx + std::log(sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(L), int(D), int(L), 1.0f, P, int(L), vv,
                    int(KV * D), 0.0f, out + t0 * H * D + h * D, int(H * D));
      }
    });
  }
  // One task per (sequence, kv head) pair, its query heads in head order (so
  // dk, dv of a kv head are summed in a fixed order by one thread):
  // P = exp(S − lse) recomputed; dv += Pᵀ·dO; dP = dO·vᵀ; dS = P∘(dP − rowsum(dO∘O));
  // dq += dS·k/√D; dk += dSᵀ·q/√D. An overwritten gradient (Grad) gets
  // β = 0 from its first product: dq's one per head, dk's and dv's the
  // group's first query head.
  void attention_backward(Grad dq, Grad dk, Grad dv, const float* dout, const float* out, const float* lse,
                          Operand qo, Operand ko, Operand vo, const int32_t* cu, int64_t n_seq, int64_t N, int64_t H,
                          int64_t KV, int64_t D, bool causal) override {
    if (!dq.p && !dk.p && !dv.p) return;
    std::vector<float> keep[3];  // as in the forward
    const float *q = values(qo, size_t(N * H * D), keep[0]), *k = values(ko, size_t(N * KV * D), keep[1]),
                *v = values(vo, size_t(N * KV * D), keep[2]);
    const float sc = 1.0f / std::sqrt(float(D));
    const int64_t group = H / KV;
    pool_.parallel_for(n_seq * KV, 1, [&](int64_t b, int64_t e) {
      for (int64_t pair = b; pair < e; ++pair) {
        const int64_t s = pair / KV, kh = pair % KV;
        const int64_t t0 = cu[s], L = cu[s + 1] - cu[s];
        if (L == 0) continue;
        float* P = scratch(0, size_t(L * L));   // [L, L]
        float* dP = scratch(1, size_t(L * L));  // [L, L]
        const float* kk = k + t0 * KV * D + kh * D;
        const float* vv = v + t0 * KV * D + kh * D;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
          const float* qh = q + t0 * H * D + h * D;
          const float* doh = dout + t0 * H * D + h * D;
          const float* oh = out + t0 * H * D + h * D;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(L), int(L), int(D), sc, qh, int(H * D), kk,
                      int(KV * D), 0.0f, P, int(L));
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(L), int(L), int(D), 1.0f, doh, int(H * D), vv,
                      int(KV * D), 0.0f, dP, int(L));
          for (int64_t i = 0; i < L; ++i) {
            float* row = P + i * L;
            float* drow = dP + i * L;
            const int64_t end = causal ? i + 1 : L;
            const float l = lse[(t0 + i) * H + h];
            float di = 0;
            for (int64_t d = 0; d < D; ++d) di += doh[i * H * D + d] * oh[i * H * D + d];
            for (int64_t j = 0; j < end; ++j) {
              row[j] = std::exp(row[j] - l);
              drow[j] = row[j] * (drow[j] - di);
            }
            for (int64_t j = end; j < L; ++j) row[j] = drow[j] = 0.0f;
          }
          const bool first = h == kh * group;  // of the kv head's query heads
          auto beta = [&](const Grad& g, bool first_write) { return !g.add && first_write ? 0.0f : 1.0f; };
          if (dv.p)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(L), int(D), int(L), 1.0f, P, int(L), doh,
                        int(H * D), beta(dv, first), dv.p + t0 * KV * D + kh * D, int(KV * D));
          if (dq.p)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(L), int(D), int(L), sc, dP, int(L), kk,
                        int(KV * D), beta(dq, true), dq.p + t0 * H * D + h * D, int(H * D));
          if (dk.p)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(L), int(D), int(L), sc, dP, int(L), qh,
                        int(H * D), beta(dk, first), dk.p + t0 * KV * D + kh * D, int(KV * D));
        }
      }
    });
  }

  // ---- activations ------------------------------------------------------------------------
  void swiglu_forward(Out out, Operand gate_, Operand up_, size_t n) override {
    std::vector<float> keep[2];
    const float *gate = values(gate_, n, keep[0]), *up = values(up_, n, keep[1]);
    with_store(out, [&](auto store) {
      pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) store(i, gate[i] / (1.0f + std::exp(-gate[i])) * up[i]);
      });
    });
  }
  // silu'(g) = σ(g)·(1 + g·(1 − σ(g)))
  void swiglu_backward(GradOut dgate, GradOut dup, const float* dout, Operand gate_, Operand up_,
                       size_t n) override {
    std::vector<float> keep[2];
    const float *gate = values(gate_, n, keep[0]), *up = values(up_, n, keep[1]);
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float g = gate[i], sg = 1.0f / (1.0f + std::exp(-g));
        if (dgate.wanted()) put(dgate, i, dout[i] * up[i] * sg * (1.0f + g * (1.0f - sg)));
        if (dup.wanted()) put(dup, i, dout[i] * g * sg);
      }
    });
  }
  void gelu_forward(Out out, const float* inp, size_t n) override {
    with_store(out, [&](auto store) {
      pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float x = inp[i];
          store(i, 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x))));
        }
      });
    });
  }
  void gelu_backward(GradOut dinp, const float* dout, const float* inp, size_t n) override {
    if (!dinp.wanted()) return;
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float x = inp[i], u = kGeluScale * (x + 0.044715f * x * x * x), t = std::tanh(u);
        const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        put(dinp, i, dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du));
      }
    });
  }
  void relu_forward(float* out, const float* inp, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = std::max(inp[i], 0.0f);
    });
  }
  void relu_backward(Grad dinp, const float* dout, const float* inp, size_t n) override {
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) put(dinp, i, inp[i] > 0.0f ? dout[i] : 0.0f);
    });
  }

  // ---- patches ------------------------------------------------------------------------------
  void im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p) override {
    const int64_t g = S / p, row = Ch * p * p;
    pool_.parallel_for(I * g * g, row_grain(row), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t img = r / (g * g), py = (r / g) % g, px = r % g;
        float* dst = patches + r * row;
        for (int64_t c = 0; c < Ch; ++c)
          for (int64_t dy = 0; dy < p; ++dy)
            std::memcpy(dst + (c * p + dy) * p, pixels + ((img * Ch + c) * S + py * p + dy) * S + px * p,
                        p * sizeof(float));
      }
    });
  }

  // ---- losses ---------------------------------------------------------------------------------
  void cross_entropy(double* loss, float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     float scale) override {
    std::vector<double> row_loss(size_t(N), 0.0);
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / V), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (targets[i] < 0) continue;
        const float* x = logits + i * V;
        float mx = x[0];
        for (int64_t j = 1; j < V; ++j) mx = std::max(mx, x[j]);
        double sum = 0;
        for (int64_t j = 0; j < V; ++j) sum += std::exp(double(x[j] - mx));
        const double log_z = double(mx) + std::log(sum);
        row_loss[size_t(i)] = log_z - double(x[targets[i]]);
        if (dlogits) {
          float* d = dlogits + i * V;
          const float lz = float(log_z);
          for (int64_t j = 0; j < V; ++j) d[j] += scale * std::exp(x[j] - lz);
          d[targets[i]] -= scale;
        }
      }
    });
    double total = 0;
    for (double l : row_loss) total += l;
    *loss = total;
  }
  void kl_divergence(double* loss, float* dstudent, const float* student, const float* teacher,
                     const int32_t* targets, int64_t N, int64_t V, float T, float scale) override {
    std::vector<double> row_loss(size_t(N), 0.0);
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / V), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (targets[i] < 0) continue;
        const float *xs = student + i * V, *xt = teacher + i * V;
        float ms = xs[0], mt = xt[0];
        for (int64_t j = 1; j < V; ++j) {
          ms = std::max(ms, xs[j]);
          mt = std::max(mt, xt[j]);
        }
        double zs = 0, zt = 0;
        for (int64_t j = 0; j < V; ++j) {
          zs += std::exp(double(xs[j] - ms) / T);
          zt += std::exp(double(xt[j] - mt) / T);
        }
        const double lzs = std::log(zs), lzt = std::log(zt);
        double kl = 0;
        for (int64_t j = 0; j < V; ++j) {
          const double log_ps = double(xs[j] - ms) / T - lzs, log_pt = double(xt[j] - mt) / T - lzt;
          const double pt = std::exp(log_pt);
          kl += pt * (log_pt - log_ps);
          if (dstudent) dstudent[i * V + j] += float(double(scale) * T * (std::exp(log_ps) - pt));
        }
        row_loss[size_t(i)] = double(T) * T * kl;
      }
    });
    double total = 0;
    for (double l : row_loss) total += l;
    *loss = total;
  }

  // ---- vocabulary-parallel losses -------------------------------------------------------------
  void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t) override {
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, V)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < valid; ++j) m = std::max(m, x[i * V + j] * inv_t);
        mx[i] = m;
      }
    });
  }
  void max_of_parts(float* mx, const float* parts, int64_t R, int64_t N) override {
    for (int64_t i = 0; i < N; ++i) {
      float m = parts[i];
      for (int64_t r = 1; r < R; ++r) m = std::max(m, parts[r * N + i]);
      mx[i] = m;
    }
  }
  void shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx, int64_t N,
                    int64_t V, int64_t valid, int64_t v0, float inv_t) override {
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, V)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < valid; ++j) sum += std::exp(double(x[i * V + j] * inv_t - mx[i]));
        se[i] = float(sum);
        if (!tx) continue;
        const int64_t c = targets[i] - v0;
        tx[i] = targets[i] >= 0 && c >= 0 && c < valid ? x[i * V + c] : 0.0f;
      }
    });
  }
  void shard_cross_entropy(double* loss, float* dlogits, const float* x, const int32_t* targets, const float* mx,
                           const float* se, const float* tx, int64_t N, int64_t V, int64_t valid, int64_t v0,
                           float scale) override {
    double total = 0;
    for (int64_t i = 0; i < N; ++i)
      if (targets[i] >= 0) total += double(mx[i]) + std::log(double(se[i])) - double(tx[i]);
    *loss = total;
    if (!dlogits) return;
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, V)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (targets[i] < 0) continue;
        const float lz = float(double(mx[i]) + std::log(double(se[i])));
        float* d = dlogits + i * V;
        for (int64_t j = 0; j < valid; ++j) d[j] += scale * std::exp(x[i * V + j] - lz);
        const int64_t c = targets[i] - v0;
        if (c >= 0 && c < valid) d[c] -= scale;
      }
    });
  }
  void shard_kl(float* kl, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                const float* mx_s, const float* se_s, const float* mx_t, const float* se_t, int64_t N, int64_t V,
                int64_t valid, float T, float scale) override {
    pool_.parallel_for(N, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, V)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        kl[i] = 0;
        if (targets[i] < 0) continue;
        const double lzs = double(mx_s[i]) + std::log(double(se_s[i])), lzt = double(mx_t[i]) + std::log(double(se_t[i]));
        double sum = 0;
        for (int64_t j = 0; j < valid; ++j) {
          const double log_ps = double(student[i * V + j]) / T - lzs, log_pt = double(teacher[i * V + j]) / T - lzt;
          const double pt = std::exp(log_pt);
          sum += pt * (log_pt - log_ps);
          if (dstudent) dstudent[i * V + j] += float(double(scale) * T * (std::exp(log_ps) - pt));
        }
        kl[i] = float(double(T) * T * sum);
      }
    });
  }
  void masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N) override {
    double total = 0;
    for (int64_t i = 0; i < N; ++i)
      if (targets[i] >= 0) total += double(rows[i]);
    *out = total;
  }

  // ---- optimizer ------------------------------------------------------------------------------
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale, void* p16) override {
    uint16_t* copy = static_cast<uint16_t*>(p16);
    const float c1 = float(1.0 - std::pow(double(beta1), double(t)));
    const float c2 = float(1.0 - std::pow(double(beta2), double(t)));
    const float decay = 1.0f - lr * weight_decay;
    pool_.parallel_for(int64_t(n), kElementGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float gi = g[i] * grad_scale;  // the bits of a separate g *= grad_scale pass
        p[i] *= decay;
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
        if (copy) copy[i] = float_to_bf16(p[i]);
      }
    });
  }

  void set_threads(int threads) override {
    (void)threads;  // the pool is sized at construction; make a new backend to change it
  }
  int threads() const override { return pool_.threads(); }

 private:
  static constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)

  static void* aligned_zeroed(size_t bytes) {
    bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return p;
  }
  // dst = src over the pool (dst == src: nothing to do).
  void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (dst == src || bytes == 0) return;
    auto* d = static_cast<char*>(dst);
    const auto* x = static_cast<const char*>(src);
    pool_.parallel_for(int64_t(bytes), kElementGrain * 4, [&](int64_t b, int64_t e) { std::memmove(d + b, x + b, size_t(e - b)); });
  }

  // C[M,Nc] = op(A)·op(B) + beta·C (row-major; op = transpose when ta/tb),
  // cut along the output's longer side into gemm_tile() tiles, each one
  // single-threaded sgemm on the pool: every output element is reduced by
  // the same call shape whatever the thread count.
  void gemm(bool ta, bool tb, int64_t M, int64_t Nc, int64_t K, const float* A, int64_t lda, const float* B,
            int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || Nc == 0) return;
    const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    const bool by_rows = M >= Nc;
    const int64_t dim = by_rows ? M : Nc, tile = gemm_tile(dim);
    pool_.parallel_for((dim + tile - 1) / tile, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t r0 = t * tile, n = std::min(dim, r0 + tile) - r0;
        if (by_rows)  // rows [r0, r0+n) of C and of op(A)
          cblas_sgemm(CblasRowMajor, TA, TB, int(n), int(Nc), int(K), 1.0f, ta ? A + r0 : A + r0 * lda, int(lda), B,
                      int(ldb), beta, C + r0 * ldc, int(ldc));
        else  // columns [r0, r0+n) of C and of op(B)
          cblas_sgemm(CblasRowMajor, TA, TB, int(M), int(n), int(K), 1.0f, A, int(lda), tb ? B + r0 * ldb : B + r0,
                      int(ldb), beta, C + r0, int(ldc));
      }
    });
  }

  // angle = pos·θ^(−2i/D); sign −1 rotates back (the gradient of a rotation).
  // out = x rotated (out.f32 may be x: each pair is read before it is written).
  void rotate(Out out, const float* x, const int32_t* pos, int64_t N, int64_t H, int64_t D, float theta, float sign) {
    const int64_t half = D / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = std::pow(double(theta), -2.0 * double(i) / double(D));
    with_store(out, [&](auto store) {
      pool_.parallel_for(N, row_grain(H * D), [&](int64_t b, int64_t e) {
        std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
        for (int64_t n = b; n < e; ++n) {
          for (int64_t i = 0; i < half; ++i) {
            const double a = double(pos[n]) * inv_freq[size_t(i)];
            cs[size_t(i)] = float(std::cos(a));
            sn[size_t(i)] = sign * float(std::sin(a));
          }
          for (int64_t h = 0; h < H; ++h) {
            const int64_t row = (n * H + h) * D;
            const float* r = x + row;
            for (int64_t i = 0; i < half; ++i) {
              const float x0 = r[i], x1 = r[i + half];
              store(row + i, x0 * cs[size_t(i)] - x1 * sn[size_t(i)]);
              store(row + i + half, x1 * cs[size_t(i)] + x0 * sn[size_t(i)]);
            }
          }
        }
      });
    });
  }

  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace maestro
