// Elementwise, row and column kernels (elementwise_kernels.h). Shapes:
// elementwise kernels are grid-stride loops; row ops (norms, losses) take a
// block of kRowThreads per row and reduce with device_reduce.cuh; weight
// gradients (Σ over rows) split the rows into chunks of kColumnRows
// (launch_plan.h) and add the chunks' column sums in chunk order. No sum
// uses atomics: a run's results are the same bits every time.
#include "gpu/cuda/elementwise_kernels.h"

#include <cstdint>
#include <initializer_list>

#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/device_reduce.cuh"
#include "gpu/launch_plan.h"

namespace maestro::cuda_detail {

namespace gm = gpu_math;

namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 256;

#define MAESTRO_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(n); i += int64_t(gridDim.x) * blockDim.x)

unsigned blocks(int64_t n) { return unsigned(grid_blocks(n, kThreads)); }

__global__ void to_bf16_kernel(uint16_t* d, const float* s, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) d[i] = float_to_bf16(s[i]);
}
// Four at a time (16-byte loads, 8-byte stores): the GEMMs' operand rounding
// is a large share of a bf16 step, and memory-bound.
__global__ void to_bf16_x4_kernel(uint2* d, const float4* s, size_t n4) {
  MAESTRO_GRID_STRIDE(i, n4) {
    const float4 f = s[i];
    d[i] = make_uint2(gm::bf16x2(f.x, f.y), gm::bf16x2(f.z, f.w));
  }
}
__global__ void to_f32_kernel(float* d, const uint16_t* s, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) d[i] = bf16_to_float(s[i]);
}
// Four elements a thread — 16-byte fp32 loads and stores, 8-byte bf16
// stores — for the memory-bound element-wise ops of every layer (add,
// accumulate, swiglu), as the rounding kernel above: scalar, it reached
// 1.5 TB/s on the H200, four at a time 3.7–4.0 (docs/PERFORMANCE.md §6).
// The launchers take this path where every pointer is aligned for it
// (by_four) and finish the last n % 4 elements one at a time. The same
// per-element math, so the same bits either way.
struct V4 {
  float v[4];
};
__device__ inline V4 load4(const float* p, int64_t q) {
  const float4 f = reinterpret_cast<const float4*>(p)[q];
  return {{f.x, f.y, f.z, f.w}};
}
// An In's four elements q·4 .. q·4+3: one 16-byte fp32 load, or one 8-byte
// bf16 load widened.
__device__ inline V4 load4(gm::In x, int64_t q) {
  if (x.f32) return load4(x.f32, q);
  const uint2 b = reinterpret_cast<const uint2*>(x.b16)[q];
  return {{bf16_to_float(uint16_t(b.x)), bf16_to_float(uint16_t(b.x >> 16)), bf16_to_float(uint16_t(b.y)),
           bf16_to_float(uint16_t(b.y >> 16))}};
}
__device__ inline void store4(float* p, int64_t q, const V4& x) {
  reinterpret_cast<float4*>(p)[q] = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
}
// put_out / put_grad_out (kernel_math.h), four at a time
__device__ inline void put_out4(float* f32, uint16_t* b16, int64_t q, const V4& x) {
  if (f32) store4(f32, q, x);
  if (b16) reinterpret_cast<uint2*>(b16)[q] = make_uint2(gm::bf16x2(x.v[0], x.v[1]), gm::bf16x2(x.v[2], x.v[3]));
}
__device__ inline void put_grad_out4(float* g, bool add, uint16_t* g16, int64_t q, const V4& x) {
  if (g) {
    V4 y = add ? load4(g, q) : V4{};
    for (int k = 0; k < 4; ++k) gm::put_grad(y.v[k], x.v[k], add);
    store4(g, q, y);
  }
  put_out4(nullptr, g16, q, x);
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void add_x4_kernel(float* out, const float* a, const float* b, size_t n4) {
  MAESTRO_GRID_STRIDE(q, n4) {
    const V4 x = load4(a, q), y = load4(b, q);
    V4 r;
    for (int k = 0; k < 4; ++k) r.v[k] = x.v[k] + y.v[k];
    store4(out, q, r);
  }
}
__global__ void accumulate_kernel(float* d, const float* s, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) d[i] += s[i];
}
__global__ void accumulate_x4_kernel(float* d, const float* s, size_t n4) {
  MAESTRO_GRID_STRIDE(q, n4) {
    V4 x = load4(d, q);
    const V4 y = load4(s, q);
    for (int k = 0; k < 4; ++k) x.v[k] += y.v[k];
    store4(d, q, x);
  }
}
__global__ void scale_kernel(float* p, float s, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) p[i] *= s;
}
// Σ p² in two passes, no atomics: every run (and every replica of a dp
// group, which compare their norms bit for bit) gets the same bits.
// Pass 1: block b's share of the grid-stride loop → partial[b].
__global__ void sq_norm_partial_kernel(double* partial, const float* p, size_t n) {
  __shared__ double shared[32];
  double s = 0;
  MAESTRO_GRID_STRIDE(i, n) s += gm::sq(p[i]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
// Pass 2: one block sums partial[0, blocks) in a fixed order.
__global__ void sum_partials_kernel(double* out, const double* partial, unsigned blocks) {
  __shared__ double shared[32];
  double s = 0;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *out = s;
}

__global__ void embedding_forward_kernel(float* out, const int32_t* tok, const float* table, int64_t N, int64_t C) {
  MAESTRO_GRID_STRIDE(e, N * C) out[e] = table[int64_t(tok[e / C]) * C + e % C];
}
// grid (U distinct tokens, C / kThreads): thread (u, c) adds token u's rows
// of column c in row order (launch_plan.h's TokenRows, packed).
__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* packed, int64_t U,
                                          int64_t C) {
  const int64_t u = blockIdx.x, c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int32_t *offsets = packed, *tokens = packed + U + 1, *rows = tokens + U;
  float* d = dtable + int64_t(tokens[u]) * C + c;
  float s = *d;
  for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) s += dout[int64_t(rows[k]) * C + c];
  *d = s;
}
__global__ void bias_add_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  MAESTRO_GRID_STRIDE(e, N * OC) out[e] += bias[e % OC];
}

// out[c] += Σ_rows f(i, c) in two passes, no atomics (the same bits on
// every run): pass 1, grid (C / kThreads, row chunks), chunk k's column
// sums → partial[k, c]; pass 2 adds the chunks to out[c] in chunk order.
template <class F>
__global__ void column_chunk_kernel(float* partial, int64_t N, int64_t C, F f) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * kColumnRows, r1 = min(N, r0 + kColumnRows);
  float s = 0;
  for (int64_t i = r0; i < r1; ++i) s += f(i, c);
  partial[blockIdx.y * C + c] = s;
}
__global__ void add_column_chunks_kernel(float* out, const float* partial, int64_t chunks, int64_t C) {
  MAESTRO_GRID_STRIDE(c, C) {
    float s = out[c];
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
    out[c] = s;
  }
}
template <class F>
void column_sum(float* out, float* partial, int64_t N, int64_t C, F f, cudaStream_t st) {
  if (N == 0 || C == 0) return;
  const int64_t chunks = column_chunks(N);
  const dim3 grid{unsigned((C + kThreads - 1) / kThreads), unsigned(chunks)};
  column_chunk_kernel<F><<<grid, kThreads, 0, st>>>(partial, N, C, f);
  MAESTRO_CUDA_LAUNCH_CHECK();
  add_column_chunks_kernel<<<blocks(C), kThreads, 0, st>>>(out, partial, chunks, C);
  MAESTRO_CUDA_LAUNCH_CHECK();
}
struct Column {
  const float* a;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const { return a[i * C + c]; }
};
struct RmsnormDw {
  const float *x, *dy, *rstd;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const { return gm::rmsnorm_dw(x[i * C + c], dy[i * C + c], rstd[i]); }
};
struct LayernormDw {
  const float *x, *dy, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const {
    return gm::layernorm_dw(x[i * C + c], dy[i * C + c], mean[i], rstd[i]);
  }
};

__global__ void rmsnorm_forward_kernel(float* out, uint16_t* out16, float* rstd, const float* inp, const float* w,
                                       int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  const float r = gm::rms_rstd(block_sum(ss, shared), C, eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    gm::put_out(out, out16, row * C + c, gm::rmsnorm_out(x[c], r, w[c]));
}
__global__ void rmsnorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                        const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float *x = inp + row * C, *dy = dout + row * C;
  const float r = rstd[row];
  float dot = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dy[c] * w[c] * x[c];
  const float k = gm::rmsnorm_row_k(r, block_sum(dot, shared), C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dinp[row * C + c] += gm::rmsnorm_dx(x[c], dy[c], w[c], r, k);
}
__global__ void layernorm_forward_kernel(float* out, uint16_t* out16, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s, shared) / float(C);
  float v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - m) * (x[c] - m);
  const float r = gm::ln_rstd(block_sum(v, shared) / float(C), eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    gm::put_out(out, out16, row * C + c, gm::layernorm_out(x[c], m, r, w[c], b[c]));
}
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                          const float* mean, const float* rstd, int64_t C) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float *x = inp + row * C, *dy = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float s1 = 0, s2 = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = dy[c] * w[c];
    s1 += g;
    s2 += g * (x[c] - m) * r;
  }
  const float mean_g = block_sum(s1, shared) / float(C), mean_gx = block_sum(s2, shared) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[row * C + c] += gm::layernorm_dx(x[c], dy[c], w[c], m, r, mean_g, mean_gx);
}

// One thread per (token, pair i < D/2): the fp64 cos/sin once, applied to
// every head (the CPU backend's order; a warp's pairs are adjacent in memory).
// out = x rotated, out may be x (a thread reads its pair before writing it).
__global__ void rope_kernel(float* out, uint16_t* out16, gm::In x, const int32_t* pos, int64_t N, int64_t H,
                            int64_t D, float theta, float sign) {
  const int64_t half = D / 2;
  MAESTRO_GRID_STRIDE(e, N * half) {
    const int64_t i = e % half, n = e / half;
    float c, s;
    gm::rope_cos_sin(pos[n], gm::rope_inv_freq(i, D, theta), sign, c, s);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = (n * H + h) * D;
      float x0 = x[row + i], x1 = x[row + i + half];
      gm::rope_apply(x0, x1, c, s);
      gm::put_out(out, out16, row + i, x0);
      gm::put_out(out, out16, row + i + half, x1);
    }
  }
}

__global__ void swiglu_forward_kernel(float* out, uint16_t* out16, gm::In gate, gm::In up, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) gm::put_out(out, out16, i, gm::swiglu(gate[i], up[i]));
}
__global__ void swiglu_forward_x4_kernel(float* out, uint16_t* out16, gm::In gate, gm::In up, size_t n4) {
  MAESTRO_GRID_STRIDE(q, n4) {
    const V4 g = load4(gate, q), u = load4(up, q);
    V4 r;
    for (int k = 0; k < 4; ++k) r.v[k] = gm::swiglu(g.v[k], u.v[k]);
    put_out4(out, out16, q, r);
  }
}
__global__ void swiglu_backward_kernel(float* dgate, bool add_dgate, uint16_t* dgate16, float* dup, bool add_dup,
                                       uint16_t* dup16, const float* dout, gm::In gate, gm::In up, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) {
    if (dgate || dgate16) gm::put_grad_out(dgate, add_dgate, dgate16, i, gm::swiglu_dgate(dout[i], gate[i], up[i]));
    if (dup || dup16) gm::put_grad_out(dup, add_dup, dup16, i, gm::swiglu_dup(dout[i], gate[i]));
  }
}
__global__ void swiglu_backward_x4_kernel(float* dgate, bool add_dgate, uint16_t* dgate16, float* dup, bool add_dup,
                                          uint16_t* dup16, const float* dout, gm::In gate, gm::In up, size_t n4) {
  MAESTRO_GRID_STRIDE(q, n4) {
    const V4 d = load4(dout, q), g = load4(gate, q), u = load4(up, q);
    V4 r;
    if (dgate || dgate16) {
      for (int k = 0; k < 4; ++k) r.v[k] = gm::swiglu_dgate(d.v[k], g.v[k], u.v[k]);
      put_grad_out4(dgate, add_dgate, dgate16, q, r);
    }
    if (dup || dup16) {
      for (int k = 0; k < 4; ++k) r.v[k] = gm::swiglu_dup(d.v[k], g.v[k]);
      put_grad_out4(dup, add_dup, dup16, q, r);
    }
  }
}
__global__ void gelu_forward_kernel(float* out, uint16_t* out16, const float* inp, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) gm::put_out(out, out16, i, gm::gelu(inp[i]));
}
__global__ void gelu_backward_kernel(float* dinp, bool add, uint16_t* dinp16, const float* dout, const float* inp,
                                     size_t n) {
  MAESTRO_GRID_STRIDE(i, n) gm::put_grad_out(dinp, add, dinp16, i, gm::gelu_grad(dout[i], inp[i]));
}
__global__ void relu_forward_kernel(float* out, const float* inp, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) out[i] = gm::relu(inp[i]);
}
__global__ void relu_backward_kernel(float* dinp, bool add, const float* dout, const float* inp, size_t n) {
  MAESTRO_GRID_STRIDE(i, n) gm::put_grad(dinp[i], gm::relu_grad(dout[i], inp[i]), add);
}
// One thread per element of patches[I*g², Ch*p*p].
__global__ void im2col_kernel(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p) {
  const int64_t g = S / p, row_len = Ch * p * p;
  MAESTRO_GRID_STRIDE(e, I * g * g * row_len) {
    const int64_t col = e % row_len, patch = e / row_len;
    const int64_t dx = col % p, dy = (col / p) % p, c = col / (p * p);
    const int64_t px = patch % g, py = (patch / g) % g, img = patch / (g * g);
    patches[e] = pixels[((img * Ch + c) * S + py * p + dy) * S + px * p + dx];
  }
}

// *out += Σ terms[0, n), by one block in a fixed order: a loss's rows
// summed with the same bits on every run (no atomics).
__global__ void add_row_terms_kernel(double* out, const double* terms, int64_t n) {
  __shared__ double shared[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += terms[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *out += s;
}

// One block per row; terms[row]: the row's loss (0 for a skipped row).
__global__ void cross_entropy_kernel(double* terms, float* dlogits, const float* logits, const int32_t* targets,
                                     int64_t V, float scale) {
  __shared__ float shared[64];
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  if (t < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) terms[row] = 0;
    return;
  }
  const float* x = logits + row * V;
  gm::SoftmaxState s = gm::softmax_init();
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s = gm::softmax_push(s, x[j]);
  const float lse = gm::softmax_lse(block_softmax(s, shared));
  if (threadIdx.x == 0) terms[row] = double(lse) - double(x[t]);
  if (dlogits)
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dlogits[row * V + j] += gm::ce_grad(x[j], lse, j == t, scale);
}
__global__ void kl_kernel(double* terms, float* dstudent, const float* student, const float* teacher,
                          const int32_t* targets, int64_t V, float T, float scale) {
  __shared__ float shared[64];
  __shared__ double shared_sum[32];
  const int64_t row = blockIdx.x;
  if (targets[row] < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) terms[row] = 0;
    return;
  }
  const float *xs = student + row * V, *xt = teacher + row * V;
  gm::SoftmaxState ss = gm::softmax_init(), st = gm::softmax_init();
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    ss = gm::softmax_push(ss, xs[j] / T);
    st = gm::softmax_push(st, xt[j] / T);
  }
  const float lse_s = gm::softmax_lse(block_softmax(ss, shared));
  const float lse_t = gm::softmax_lse(block_softmax(st, shared));
  double total = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    total += gm::kl_term(xs[j], xt[j], lse_s, lse_t, T);
    if (dstudent) dstudent[row * V + j] += gm::kl_grad(xs[j], xt[j], lse_s, lse_t, T, scale);
  }
  total = block_sum(total, shared_sum);
  if (threadIdx.x == 0) terms[row] = total;
}

// p16, when not null, gets the updated p rounded to bf16 (Backend::adamw).
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, uint16_t* p16, size_t n,
                             gm::AdamWStep step) {
  MAESTRO_GRID_STRIDE(i, n) {
    gm::adamw_update(p[i], g[i], m[i], v[i], step);
    if (p16) p16[i] = float_to_bf16(p[i]);
  }
}
// Four at a time (16-byte accesses, 8-byte bf16 stores): AdamW is
// memory-bound, 28 bytes per parameter (30 with the bf16 copy).
__global__ void adamw_x4_kernel(float4* p, const float4* g, float4* m, float4* v, uint2* p16, size_t n4,
                                gm::AdamWStep step) {
  MAESTRO_GRID_STRIDE(i, n4) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    gm::adamw_update(pi.x, gi.x, mi.x, vi.x, step);
    gm::adamw_update(pi.y, gi.y, mi.y, vi.y, step);
    gm::adamw_update(pi.z, gi.z, mi.z, vi.z, step);
    gm::adamw_update(pi.w, gi.w, mi.w, vi.w, step);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p16) p16[i] = make_uint2(gm::bf16x2(pi.x, pi.y), gm::bf16x2(pi.z, pi.w));
  }
}

}  // namespace

#define MAESTRO_LAUNCH(kernel, n, ...)                            \
  do {                                                            \
    if ((n) == 0) return;                                         \
    kernel<<<blocks(int64_t(n)), kThreads, 0, st>>>(__VA_ARGS__); \
    MAESTRO_CUDA_LAUNCH_CHECK();                                  \
  } while (0)

void launch_convert(void* dst, DType dd, const void* src, DType sd, size_t n, cudaStream_t st) {
  if (dd == sd) {
    if (dst != src && n > 0) MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dd), cudaMemcpyDeviceToDevice, st));
    return;
  }
  if (dd == DType::BF16) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* f = static_cast<const float*>(src);
    size_t head = 0;  // elements done four at a time
    if (reinterpret_cast<uintptr_t>(d) % 8 == 0 && reinterpret_cast<uintptr_t>(f) % 16 == 0 && n >= 4) {
      const size_t n4 = n / 4;
      MAESTRO_LAUNCH(to_bf16_x4_kernel, n4, reinterpret_cast<uint2*>(d), reinterpret_cast<const float4*>(f), n4);
      head = n4 * 4;
    }
    if (head < n) MAESTRO_LAUNCH(to_bf16_kernel, n - head, d + head, f + head, n - head);
  } else {
    MAESTRO_LAUNCH(to_f32_kernel, n, static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
  }
}
// The elements [0, head) four at a time: n rounded down to a multiple of 4
// when n >= 4 and every pointer given is aligned for it (fp32 16 bytes,
// bf16 8; null ones are not written), else none.
size_t by_four(size_t n, std::initializer_list<const void*> f32, std::initializer_list<const void*> b16 = {}) {
  auto aligned = [](const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; };
  if (n < 4) return 0;
  for (const void* p : f32)
    if (!aligned(p, 16)) return 0;
  for (const void* p : b16)
    if (!aligned(p, 8)) return 0;
  return n / 4 * 4;
}
template <class T>
T* from(T* p, size_t k) {  // p + k, null staying null
  return p ? p + k : nullptr;
}
gm::In from(gm::In x, size_t k) { return {from(x.f32, k), from(x.b16, k)}; }

void launch_add(float* out, const float* a, const float* b, size_t n, cudaStream_t st) {
  const size_t head = by_four(n, {out, a, b});
  if (head) MAESTRO_LAUNCH(add_x4_kernel, head / 4, out, a, b, head / 4);
  if (head < n) MAESTRO_LAUNCH(add_kernel, n - head, out + head, a + head, b + head, n - head);
}
void launch_accumulate(float* dst, const float* src, size_t n, cudaStream_t st) {
  const size_t head = by_four(n, {dst, src});
  if (head) MAESTRO_LAUNCH(accumulate_x4_kernel, head / 4, dst, src, head / 4);
  if (head < n) MAESTRO_LAUNCH(accumulate_kernel, n - head, dst + head, src + head, n - head);
}
void launch_scale(float* p, float s, size_t n, cudaStream_t st) { MAESTRO_LAUNCH(scale_kernel, n, p, s, n); }
void launch_sq_norm(double* out, double* partial, const float* p, size_t n, cudaStream_t st) {
  const auto grid = unsigned(grid_blocks(int64_t(n), kThreads, kSqNormMaxBlocks));
  sq_norm_partial_kernel<<<grid, kThreads, 0, st>>>(partial, p, n);
  MAESTRO_CUDA_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kThreads, 0, st>>>(out, partial, grid);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_embedding_forward(float* out, const int32_t* tok, const float* table, int64_t N, int64_t C, cudaStream_t st) {
  MAESTRO_LAUNCH(embedding_forward_kernel, N * C, out, tok, table, N, C);
}
void launch_embedding_backward(float* dtable, const float* dout, const int32_t* packed, int64_t U, int64_t C,
                               cudaStream_t st) {
  if (U == 0 || C == 0) return;
  const dim3 grid{unsigned(U), unsigned((C + kThreads - 1) / kThreads)};
  embedding_backward_kernel<<<grid, kThreads, 0, st>>>(dtable, dout, packed, U, C);
  MAESTRO_CUDA_LAUNCH_CHECK();
}
void launch_bias_add(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t st) {
  MAESTRO_LAUNCH(bias_add_kernel, N * OC, out, bias, N, OC);
}
void launch_column_sum(float* out, float* partial, const float* in, int64_t N, int64_t C, cudaStream_t st) {
  column_sum(out, partial, N, C, Column{in, C}, st);
}

void launch_rmsnorm_forward(float* out, uint16_t* out16, float* rstd, const float* inp, const float* w, int64_t N,
                            int64_t C, float eps, cudaStream_t st) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<unsigned(N), kRowThreads, 0, st>>>(out, out16, rstd, inp, w, C, eps);
  MAESTRO_CUDA_LAUNCH_CHECK();
}
void launch_rmsnorm_backward(float* dinp, float* dw, float* partial, const float* dout, const float* inp,
                             const float* w, const float* rstd, int64_t N, int64_t C, cudaStream_t st) {
  if (N == 0) return;
  if (dinp) {
    rmsnorm_backward_kernel<<<unsigned(N), kRowThreads, 0, st>>>(dinp, dout, inp, w, rstd, C);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
  if (dw) column_sum(dw, partial, N, C, RmsnormDw{inp, dout, rstd, C}, st);
}
void launch_layernorm_forward(float* out, uint16_t* out16, float* mean, float* rstd, const float* inp, const float* w,
                              const float* b, int64_t N, int64_t C, float eps, cudaStream_t st) {
  if (N == 0) return;
  layernorm_forward_kernel<<<unsigned(N), kRowThreads, 0, st>>>(out, out16, mean, rstd, inp, w, b, C, eps);
  MAESTRO_CUDA_LAUNCH_CHECK();
}
void launch_layernorm_backward(float* dinp, float* dw, float* db, float* partial, const float* dout, const float* inp,
                               const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                               cudaStream_t st) {
  if (N == 0) return;
  if (dinp) {
    layernorm_backward_kernel<<<unsigned(N), kRowThreads, 0, st>>>(dinp, dout, inp, w, mean, rstd, C);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
  if (dw) column_sum(dw, partial, N, C, LayernormDw{inp, dout, mean, rstd, C}, st);
  if (db) column_sum(db, partial, N, C, Column{dout, C}, st);  // after dw's pass 2 in stream order
}

void launch_rope(float* out, uint16_t* out16, gm::In x, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                 float theta, float sign, cudaStream_t st) {
  MAESTRO_LAUNCH(rope_kernel, N * (D / 2), out, out16, x, pos, N, H, D, theta, sign);
}
void launch_swiglu_forward(float* out, uint16_t* out16, gm::In gate, gm::In up, size_t n, cudaStream_t st) {
  const size_t head = by_four(n, {out, gate.f32, up.f32}, {out16, gate.b16, up.b16});
  if (head) MAESTRO_LAUNCH(swiglu_forward_x4_kernel, head / 4, out, out16, gate, up, head / 4);
  if (head < n)
    MAESTRO_LAUNCH(swiglu_forward_kernel, n - head, from(out, head), from(out16, head), from(gate, head),
                   from(up, head), n - head);
}
void launch_swiglu_backward(float* dgate, bool add_dgate, uint16_t* dgate16, float* dup, bool add_dup, uint16_t* dup16,
                            const float* dout, gm::In gate, gm::In up, size_t n, cudaStream_t st) {
  const size_t head = by_four(n, {dgate, dup, dout, gate.f32, up.f32}, {dgate16, dup16, gate.b16, up.b16});
  if (head)
    MAESTRO_LAUNCH(swiglu_backward_x4_kernel, head / 4, dgate, add_dgate, dgate16, dup, add_dup, dup16, dout, gate, up,
                   head / 4);
  if (head < n)
    MAESTRO_LAUNCH(swiglu_backward_kernel, n - head, from(dgate, head), add_dgate, from(dgate16, head), from(dup, head),
                   add_dup, from(dup16, head), dout + head, from(gate, head), from(up, head), n - head);
}
void launch_gelu_forward(float* out, uint16_t* out16, const float* inp, size_t n, cudaStream_t st) {
  MAESTRO_LAUNCH(gelu_forward_kernel, n, out, out16, inp, n);
}
void launch_gelu_backward(float* dinp, bool add, uint16_t* dinp16, const float* dout, const float* inp, size_t n,
                          cudaStream_t st) {
  MAESTRO_LAUNCH(gelu_backward_kernel, n, dinp, add, dinp16, dout, inp, n);
}
void launch_relu_forward(float* out, const float* inp, size_t n, cudaStream_t st) {
  MAESTRO_LAUNCH(relu_forward_kernel, n, out, inp, n);
}
void launch_relu_backward(float* dinp, bool add, const float* dout, const float* inp, size_t n, cudaStream_t st) {
  MAESTRO_LAUNCH(relu_backward_kernel, n, dinp, add, dout, inp, n);
}
void launch_im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p,
                           cudaStream_t st) {
  MAESTRO_LAUNCH(im2col_kernel, I * (S / p) * (S / p) * Ch * p * p, patches, pixels, I, Ch, S, p);
}

void launch_add_row_terms(double* out, const double* terms, int64_t n, cudaStream_t st) {
  if (n == 0) return;
  add_row_terms_kernel<<<1, 1024, 0, st>>>(out, terms, n);
  MAESTRO_CUDA_LAUNCH_CHECK();
}
void launch_cross_entropy(double* loss, double* terms, float* dlogits, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V, float scale, cudaStream_t st) {
  if (N == 0) return;
  cross_entropy_kernel<<<unsigned(N), kRowThreads, 0, st>>>(terms, dlogits, logits, targets, V, scale);
  MAESTRO_CUDA_LAUNCH_CHECK();
  launch_add_row_terms(loss, terms, N, st);
}
void launch_kl_divergence(double* loss, double* terms, float* dstudent, const float* student, const float* teacher,
                          const int32_t* targets, int64_t N, int64_t V, float T, float scale, cudaStream_t st) {
  if (N == 0) return;
  kl_kernel<<<unsigned(N), kRowThreads, 0, st>>>(terms, dstudent, student, teacher, targets, V, T, scale);
  MAESTRO_CUDA_LAUNCH_CHECK();
  launch_add_row_terms(loss, terms, N, st);
}

void launch_adamw(float* p, const float* g, float* m, float* v, uint16_t* p16, size_t n, const gm::AdamWStep& step,
                  cudaStream_t st) {
  size_t head = 0;  // parameters done four at a time
  auto aligned = [](const void* q, size_t to) { return reinterpret_cast<uintptr_t>(q) % to == 0; };
  if (n >= 4 && aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16) && aligned(p16, 8)) {
    const size_t n4 = n / 4;
    MAESTRO_LAUNCH(adamw_x4_kernel, n4, reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g),
                   reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), reinterpret_cast<uint2*>(p16), n4,
                   step);
    head = n4 * 4;
  }
  if (head < n)
    MAESTRO_LAUNCH(adamw_kernel, n - head, p + head, g + head, m + head, v + head, p16 ? p16 + head : nullptr,
                   n - head, step);
}

}  // namespace maestro::cuda_detail
