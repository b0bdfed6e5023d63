// The flash attention kernels (attention_kernels.h, "flash path"): the
// tiled kernel's online softmax with its four products on the tensor cores
// (WMMA 16×16×16, bf16 operands — the backend's bf16 copies of q, k, v, dO
// — fp32 sums), and no [H, L, L] buffer in device memory.
// Geometry and shared-memory layout: gpu/launch_plan.h (FlashLayout).
// Per-element math: gpu/kernel_math.h (flash_rescale, flash_prob,
// attention_dscore). No atomics: dq is summed by the query rows' block,
// dk and dv by the key rows' block, each in a fixed order — the same bits
// on every run. Written without a GPU: the start-up self-check runs it
// against the reference path before a run may train on it.
#include <cuda_bf16.h>
#include <mma.h>

#include "gpu/cuda/attention_kernels.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/device_reduce.cuh"
#include "gpu/kernel_math.h"

namespace maestro::cuda_detail {

namespace gm = gpu_math;
namespace wmma = nvcuda::wmma;

namespace {

using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // read as the transpose
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kThreads = 32 * kFlashWarps;

// dst[r][d] (row stride ld) = src[(row0 + r)·stride + d] for r < rows and
// d < D; zero for the padding (r < n, d < Dp). Both bf16: the backend hands
// the kernels bf16 copies of q, k, v and dO (rounded once per call, as the
// tensor-core path's GEMMs read them). With D a multiple of 8, 16-byte
// loads and stores: every row then starts 16-byte aligned (the backend's
// scratch is 256-byte aligned, the strides multiples of D, and the shared
// rows Dp + 8 long).
template <int Dp>
__device__ void load_tile(bf16* dst, int64_t ld, const bf16* src, int64_t row0, int64_t rows, int64_t stride,
                          int64_t D, int n) {
  if (D % 8 == 0) {
    constexpr int kPerRow = Dp / 8;
    for (int e = threadIdx.x; e < n * kPerRow; e += kThreads) {
      const int r = e / kPerRow, d = (e % kPerRow) * 8;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows && d < D) x = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + d);
      *reinterpret_cast<uint4*>(dst + r * ld + d) = x;
    }
  } else {
    for (int e = threadIdx.x; e < n * Dp; e += kThreads) {
      const int r = e / Dp, d = e % Dp;
      dst[r * ld + d] = r < rows && d < D ? src[(row0 + r) * stride + d] : __float2bfloat16_rn(0.0f);
    }
  }
}

// C[16][kFlashCols] (fp32, ldc) = A[16][Dp]·B[kFlashCols][Dp]ᵀ. a(k, f)
// puts A's k-th 16×16 fragment in f: from registers (the forward's and the
// dq kernel's own rows, loaded once) or from shared memory (the dk/dv
// kernel, whose 2·Dp/16 accumulators leave no registers for them).
template <int Dp, typename AFragment>
__device__ void product_abt(float* C, int64_t ldc, AFragment a, const bf16* B, int64_t ldb) {
#pragma unroll
  for (int n = 0; n < kFlashCols / 16; ++n) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int k = 0; k < Dp / 16; ++k) {
      FragA f;
      FragBt b;
      a(k, f);
      wmma::load_matrix_sync(b, B + 16 * n * ldb + 16 * k, unsigned(ldb));
      wmma::mma_sync(c, f, b, c);
    }
    wmma::store_matrix_sync(C + 16 * n, c, unsigned(ldc), wmma::mem_row_major);
  }
}
// A's fragments held in registers, or read from shared memory (A[16][Dp], lda).
template <int Dp>
struct HeldRows {
  const FragA (&a)[Dp / 16];
  __device__ void operator()(int k, FragA& f) const { f = a[k]; }
};
struct SharedRows {
  const bf16* A;
  int64_t lda;
  __device__ void operator()(int k, FragA& f) const { wmma::load_matrix_sync(f, A + 16 * k, unsigned(lda)); }
};

// The warp's 16 rows of A[.][Dp] (bf16, lda) as fragments.
template <int Dp>
__device__ void load_rows(FragA (&a)[Dp / 16], const bf16* A, int64_t lda) {
#pragma unroll
  for (int k = 0; k < Dp / 16; ++k) wmma::load_matrix_sync(a[k], A + 16 * k, unsigned(lda));
}

// acc[16][Dp] += A[16][kFlashCols]·B[kFlashCols][Dp] (A, B bf16 row-major).
template <int Dp>
__device__ void product_ab(FragC (&acc)[Dp / 16], const bf16* A, int64_t lda, const bf16* B, int64_t ldb) {
#pragma unroll
  for (int k = 0; k < kFlashCols / 16; ++k) {
    FragA a;
    wmma::load_matrix_sync(a, A + 16 * k, unsigned(lda));
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n) {
      FragB b;
      wmma::load_matrix_sync(b, B + 16 * k * ldb + 16 * n, unsigned(ldb));
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

template <int Dp>
__device__ void zero(FragC (&acc)[Dp / 16]) {
#pragma unroll
  for (int n = 0; n < Dp / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

// The backward kernels' shared memory (FlashLayout, "backward"): two tiles
// of the block's own rows, two of the walked side, S and dP, P and dS, and
// two rows of per-row values (lse, delta).
struct BackwardTiles {
  bf16 *own0, *own1, *walk0, *walk1, *P, *dS;
  float *S, *dP, *lse, *delta;
};
template <int Dp>
__device__ BackwardTiles backward_tiles(unsigned char* smem) {
  constexpr FlashLayout L = flash_layout(Dp);
  BackwardTiles b;
  b.own0 = reinterpret_cast<bf16*>(smem);
  b.own1 = reinterpret_cast<bf16*>(smem + L.row_tile);
  b.walk0 = reinterpret_cast<bf16*>(smem + 2 * L.row_tile);
  b.walk1 = reinterpret_cast<bf16*>(smem + 2 * L.row_tile + L.col_tile);
  b.S = reinterpret_cast<float*>(smem + 2 * L.row_tile + 2 * L.col_tile);
  b.dP = b.S + kFlashRows * L.lds;
  b.P = reinterpret_cast<bf16*>(b.dP + kFlashRows * L.lds);
  b.dS = b.P + kFlashRows * L.ldp;
  b.lse = reinterpret_cast<float*>(b.dS + kFlashRows * L.ldp);
  b.delta = b.lse + kFlashRows;
  return b;
}

// The warp's 16 rows of a gradient: staged through shared memory
// (stage[16][Dp], fp32, ldo), then grad[(row0 + r)·stride + d] gets
// scale·value (put_grad) for r < rows and d < D.
template <int Dp>
__device__ void write_rows(float* grad, bool add, const FragC (&acc)[Dp / 16], float* stage, int64_t ldo,
                           int64_t row0, int64_t rows, int64_t stride, int64_t D, float scale) {
#pragma unroll
  for (int n = 0; n < Dp / 16; ++n) wmma::store_matrix_sync(stage + 16 * n, acc[n], unsigned(ldo), wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < 16 && r < rows; ++r)
    for (int64_t d = lane; d < D; d += 32) gm::put_grad(grad[(row0 + r) * stride + d], scale * stage[r * ldo + d], add);
  __syncwarp();
}

// grid (n_tiles of kFlashRows query rows, H). Warp w owns the tile's query
// rows 16w..16w+15: S = q·kᵀ per key tile into shared memory, the online
// softmax (two lanes per row), O rescaled and O += P·v, O kept in shared
// memory (a fragment's layout is opaque, so its rows cannot be rescaled in
// registers).
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                         const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = reinterpret_cast<bf16*>(smem + L.row_tile);
  bf16* Vs = reinterpret_cast<bf16*>(smem + L.row_tile + L.col_tile);
  float* Ss = reinterpret_cast<float*>(smem + L.row_tile + 2 * L.col_tile);
  bf16* Ps = reinterpret_cast<bf16*>(smem + L.row_tile + 2 * L.col_tile + L.scores);
  float* Os = reinterpret_cast<float*>(smem + L.row_tile + 2 * L.col_tile + L.scores + L.probs);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp;
  const AttentionTile t = tiles[blockIdx.x];
  const int64_t h = blockIdx.y, kh = h / (H / KV);
  const float scale = rsqrtf(float(D));
  load_tile<Dp>(Qs, L.ldh, q + h * D, t.row0, t.rows, H * D, D, kFlashRows);
  for (int e = threadIdx.x; e < kFlashRows * L.ldo; e += kThreads) Os[e] = 0.0f;
  __syncthreads();
  FragA qf[Dp / 16];
  load_rows<Dp>(qf, Qs + r0 * L.ldh, L.ldh);
  // The online softmax: lanes 2r and 2r + 1 own row r of the warp's 16,
  // half of its columns (and of O's) each, and keep the row's max m and
  // Σ exp l; a tile's row max and sum take one shuffle between the two.
  constexpr int kHalf = kFlashCols / 2;
  const int my_row = lane / 2, half = lane % 2;
  const int64_t my_local = r0 + my_row;
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = causal ? int64_t(t.row0) + t.rows : int64_t(t.seq_end);
  const int64_t last_row = int64_t(t.row0) + r0 + 15;  // the warp's last query row
  for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kFlashCols) {
    const int64_t keys = key_end - key0 < kFlashCols ? key_end - key0 : int64_t(kFlashCols);
    __syncthreads();  // the previous K, V tiles are consumed
    load_tile<Dp>(Ks, L.ldh, k + kh * D, key0, keys, KV * D, D, kFlashCols);
    load_tile<Dp>(Vs, L.ldh, v + kh * D, key0, keys, KV * D, D, kFlashCols);
    __syncthreads();
    if (causal && key0 > last_row) continue;  // every key of the tile is after the warp's rows
    product_abt<Dp>(Ss + r0 * L.lds, L.lds, HeldRows<Dp>{qf}, Ks, L.ldh);
    __syncwarp();
    float x[kHalf], mx = -INFINITY;
    const int64_t row = t.row0 + my_local;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const int j = half * kHalf + i;
      x[i] = my_local < t.rows && j < keys && gm::attention_visible(row, key0 + j, causal)
                 ? Ss[my_local * L.lds + j] * scale
                 : -INFINITY;
      mx = fmaxf(mx, x[i]);
    }
    const float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
    const float alpha = gm::flash_rescale(m, m_new);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float p = gm::flash_prob(x[i], m_new);
      sum += p;
      Ps[my_local * L.ldp + half * kHalf + i] = __float2bfloat16_rn(p);
    }
    l = l * alpha + (sum + __shfl_xor_sync(0xffffffffu, sum, 1));
    m = m_new;
#pragma unroll 8
    for (int d = half * (Dp / 2); d < (half + 1) * (Dp / 2); ++d) Os[my_local * L.ldo + d] *= alpha;
    __syncwarp();
    FragC o[Dp / 16];
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n)
      wmma::load_matrix_sync(o[n], Os + r0 * L.ldo + 16 * n, unsigned(L.ldo), wmma::mem_row_major);
    product_ab<Dp>(o, Ps + r0 * L.ldp, L.ldp, Vs, L.ldh);
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n)
      wmma::store_matrix_sync(Os + r0 * L.ldo + 16 * n, o[n], unsigned(L.ldo), wmma::mem_row_major);
    __syncwarp();
  }
  // Out: the whole warp on a row (lanes along the head), its m and l from lane 2r.
  for (int r = 0; r < 16; ++r) {
    const float row_m = __shfl_sync(0xffffffffu, m, 2 * r), row_l = __shfl_sync(0xffffffffu, l, 2 * r);
    const int64_t local = r0 + r, row = t.row0 + local;
    if (local >= t.rows) break;  // warp-uniform
    const float inv = 1.0f / row_l;  // l > 0: a row sees at least its own key
    for (int64_t d = lane; d < D; d += 32) out[(row * H + h) * D + d] = Os[local * L.ldo + d] * inv;
    if (lane == 0) lse[row * H + h] = row_m + logf(row_l);
  }
}

// grid (n_tiles of kFlashRows query rows, H). Warp w owns query rows
// 16w..16w+15: per key tile S = q·kᵀ and dP = dO·vᵀ, dS = P·(dP − delta)
// with P = exp(scale·S − lse), and dq += dS·k in fragments; dq = scale·Σ.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(float* dq, bool add_dq, const bf16* dout, const float* lse, const float* delta,
                            const bf16* q, const bf16* k, const bf16* v, const AttentionTile* tiles, int64_t H,
                            int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles b = backward_tiles<Dp>(smem);
  bf16 *Qs = b.own0, *dOs = b.own1, *Ks = b.walk0, *Vs = b.walk1, *dSs = b.dS;
  float *Ss = b.S, *dPs = b.dP, *lse_s = b.lse, *delta_s = b.delta;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp;
  const AttentionTile t = tiles[blockIdx.x];
  const int64_t h = blockIdx.y, kh = h / (H / KV);
  const float scale = rsqrtf(float(D));
  load_tile<Dp>(Qs, L.ldh, q + h * D, t.row0, t.rows, H * D, D, kFlashRows);
  load_tile<Dp>(dOs, L.ldh, dout + h * D, t.row0, t.rows, H * D, D, kFlashRows);
  for (int r = threadIdx.x; r < kFlashRows; r += kThreads) {
    lse_s[r] = r < t.rows ? lse[(t.row0 + r) * H + h] : 0.0f;
    delta_s[r] = r < t.rows ? delta[(t.row0 + r) * H + h] : 0.0f;
  }
  __syncthreads();
  FragA qf[Dp / 16], dof[Dp / 16];
  load_rows<Dp>(qf, Qs + r0 * L.ldh, L.ldh);
  load_rows<Dp>(dof, dOs + r0 * L.ldh, L.ldh);
  FragC acc[Dp / 16];
  zero<Dp>(acc);
  const int64_t key_end = causal ? int64_t(t.row0) + t.rows : int64_t(t.seq_end);
  const int64_t last_row = int64_t(t.row0) + r0 + 15;
  for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kFlashCols) {
    const int64_t keys = key_end - key0 < kFlashCols ? key_end - key0 : int64_t(kFlashCols);
    __syncthreads();
    load_tile<Dp>(Ks, L.ldh, k + kh * D, key0, keys, KV * D, D, kFlashCols);
    load_tile<Dp>(Vs, L.ldh, v + kh * D, key0, keys, KV * D, D, kFlashCols);
    __syncthreads();
    if (causal && key0 > last_row) continue;
    product_abt<Dp>(Ss + r0 * L.lds, L.lds, HeldRows<Dp>{qf}, Ks, L.ldh);
    product_abt<Dp>(dPs + r0 * L.lds, L.lds, HeldRows<Dp>{dof}, Vs, L.ldh);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      const int64_t local = r0 + r, row = t.row0 + local;
#pragma unroll
      for (int c = 0; c < kFlashCols / 32; ++c) {
        const int j = lane + 32 * c;
        float ds = 0.0f;
        if (local < t.rows && j < keys && gm::attention_visible(row, key0 + j, causal))
          ds = gm::attention_dscore(expf(Ss[local * L.lds + j] * scale - lse_s[local]), dPs[local * L.lds + j],
                                    delta_s[local]);
        dSs[local * L.ldp + j] = __float2bfloat16_rn(ds);
      }
    }
    __syncwarp();
    product_ab<Dp>(acc, dSs + r0 * L.ldp, L.ldp, Ks, L.ldh);
  }
  __syncthreads();  // the stage overlays Q and dO
  float* stage = reinterpret_cast<float*>(smem);
  write_rows<Dp>(dq + h * D, add_dq, acc, stage + r0 * L.ldo, L.ldo, t.row0 + r0, t.rows - r0, H * D, D, scale);
}

// grid (n_tiles of kFlashRows key rows, KV). Warp w owns key rows
// 16w..16w+15 of kv head blockIdx.y. For each query head of the group in
// turn and each tile of kFlashCols query rows: Sᵀ = k·qᵀ, dPᵀ = v·dOᵀ,
// Pᵀ and dSᵀ as the q kernel computes them, dv += Pᵀ·dO and dk += dSᵀ·q in
// fragments (a fixed order: heads, then query tiles); dk = scale·Σ.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(float* dk, bool add_dk, float* dv, bool add_dv, const bf16* dout, const float* lse,
                             const float* delta, const bf16* q, const bf16* k, const bf16* v,
                             const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles b = backward_tiles<Dp>(smem);
  bf16 *Ks = b.own0, *Vs = b.own1, *Qs = b.walk0, *dOs = b.walk1, *Ps = b.P, *dSs = b.dS;
  float *Ss = b.S, *dPs = b.dP, *lse_s = b.lse, *delta_s = b.delta;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp;
  const AttentionTile t = tiles[blockIdx.x];
  const int64_t kh = blockIdx.y, g = H / KV;
  const float scale = rsqrtf(float(D));
  load_tile<Dp>(Ks, L.ldh, k + kh * D, t.row0, t.rows, KV * D, D, kFlashRows);
  load_tile<Dp>(Vs, L.ldh, v + kh * D, t.row0, t.rows, KV * D, D, kFlashRows);
  FragC dk_acc[Dp / 16], dv_acc[Dp / 16];
  zero<Dp>(dk_acc);
  zero<Dp>(dv_acc);
  const int64_t first_key = int64_t(t.row0) + r0;  // the warp's first key row
  // Causal: a query sees keys up to itself, so the tile's keys are seen from its first row on.
  const int64_t query_begin = causal ? int64_t(t.row0) : int64_t(t.seq_begin);
  for (int64_t h = kh * g; h < (kh + 1) * g; ++h)
    for (int64_t q0 = query_begin; q0 < t.seq_end; q0 += kFlashCols) {
      const int64_t queries = t.seq_end - q0 < kFlashCols ? t.seq_end - q0 : int64_t(kFlashCols);
      __syncthreads();  // the previous query tile is consumed (and K, V written)
      load_tile<Dp>(Qs, L.ldh, q + h * D, q0, queries, H * D, D, kFlashCols);
      load_tile<Dp>(dOs, L.ldh, dout + h * D, q0, queries, H * D, D, kFlashCols);
      for (int j = threadIdx.x; j < kFlashCols; j += kThreads) {
        lse_s[j] = j < queries ? lse[(q0 + j) * H + h] : 0.0f;
        delta_s[j] = j < queries ? delta[(q0 + j) * H + h] : 0.0f;
      }
      __syncthreads();
      if (causal && q0 + queries - 1 < first_key) continue;  // every query is before the warp's keys
      product_abt<Dp>(Ss + r0 * L.lds, L.lds, SharedRows{Ks + r0 * L.ldh, L.ldh}, Qs, L.ldh);
      product_abt<Dp>(dPs + r0 * L.lds, L.lds, SharedRows{Vs + r0 * L.ldh, L.ldh}, dOs, L.ldh);
      __syncwarp();
      for (int r = 0; r < 16; ++r) {
        const int64_t local = r0 + r, key = t.row0 + local;
#pragma unroll
        for (int c = 0; c < kFlashCols / 32; ++c) {
          const int j = lane + 32 * c;
          float p = 0.0f, ds = 0.0f;
          if (local < t.rows && j < queries && gm::attention_visible(q0 + j, key, causal)) {
            p = expf(Ss[local * L.lds + j] * scale - lse_s[j]);
            ds = gm::attention_dscore(p, dPs[local * L.lds + j], delta_s[j]);
          }
          Ps[local * L.ldp + j] = __float2bfloat16_rn(p);
          dSs[local * L.ldp + j] = __float2bfloat16_rn(ds);
        }
      }
      __syncwarp();
      product_ab<Dp>(dv_acc, Ps + r0 * L.ldp, L.ldp, dOs, L.ldh);
      product_ab<Dp>(dk_acc, dSs + r0 * L.ldp, L.ldp, Qs, L.ldh);
    }
  __syncthreads();  // the stage overlays K and V
  float* stage = reinterpret_cast<float*>(smem) + r0 * L.ldo;
  if (dk) write_rows<Dp>(dk + kh * D, add_dk, dk_acc, stage, L.ldo, first_key, t.rows - r0, KV * D, D, scale);
  if (dv) write_rows<Dp>(dv + kh * D, add_dv, dv_acc, stage, L.ldo, first_key, t.rows - r0, KV * D, D, 1.0f);
}

// Kernels with more than 48 KiB of dynamic shared memory must ask for it
// (per device, so on every launch: one cheap call).
template <typename Kernel>
void allow_shared(Kernel kernel, int64_t bytes) {
  MAESTRO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <int Dp>
void forward(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionTile* tiles,
             int64_t n_tiles, int64_t H, int64_t KV, int64_t D, bool causal, cudaStream_t st) {
  constexpr FlashLayout L = flash_layout(Dp);
  allow_shared(flash_forward_kernel<Dp>, L.forward_bytes());
  flash_forward_kernel<Dp><<<dim3(unsigned(n_tiles), unsigned(H)), kThreads, L.forward_bytes(), st>>>(
      out, lse, q, k, v, tiles, H, KV, D, causal);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

template <int Dp>
void backward(float* dq, bool add_dq, float* dk, bool add_dk, float* dv, bool add_dv, const bf16* dout,
              const float* lse, const float* delta, const bf16* q, const bf16* k, const bf16* v,
              const AttentionTile* tiles, int64_t n_tiles, int64_t H, int64_t KV, int64_t D, bool causal,
              cudaStream_t st) {
  constexpr FlashLayout L = flash_layout(Dp);
  if (dq) {
    allow_shared(flash_backward_q_kernel<Dp>, L.backward_bytes());
    flash_backward_q_kernel<Dp><<<dim3(unsigned(n_tiles), unsigned(H)), kThreads, L.backward_bytes(), st>>>(
        dq, add_dq, dout, lse, delta, q, k, v, tiles, H, KV, D, causal);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
  if (dk || dv) {
    allow_shared(flash_backward_kv_kernel<Dp>, L.backward_bytes());
    flash_backward_kv_kernel<Dp><<<dim3(unsigned(n_tiles), unsigned(KV)), kThreads, L.backward_bytes(), st>>>(
        dk, add_dk, dv, add_dv, dout, lse, delta, q, k, v, tiles, H, KV, D, causal);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
}

const bf16* as_bf16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }

}  // namespace

void launch_flash_attention_forward(float* out, float* lse, const uint16_t* q16, const uint16_t* k16,
                                    const uint16_t* v16, const AttentionTile* tiles, int64_t n_tiles, int64_t H,
                                    int64_t KV, int64_t D, bool causal, cudaStream_t st) {
  if (n_tiles == 0) return;
  (flash_padded_head(D) == 64 ? forward<64> : forward<128>)(out, lse, as_bf16(q16), as_bf16(k16), as_bf16(v16), tiles,
                                                            n_tiles, H, KV, D, causal, st);
}

void launch_flash_attention_backward(float* dq, bool add_dq, float* dk, bool add_dk, float* dv, bool add_dv,
                                     const uint16_t* dout16, const float* lse, const float* delta,
                                     const uint16_t* q16, const uint16_t* k16, const uint16_t* v16,
                                     const AttentionTile* tiles, int64_t n_tiles, int64_t H, int64_t KV, int64_t D,
                                     bool causal, cudaStream_t st) {
  if (n_tiles == 0) return;
  (flash_padded_head(D) == 64 ? backward<64> : backward<128>)(dq, add_dq, dk, add_dk, dv, add_dv, as_bf16(dout16), lse,
                                                              delta, as_bf16(q16), as_bf16(k16), as_bf16(v16), tiles,
                                                              n_tiles, H, KV, D, causal, st);
}

}  // namespace maestro::cuda_detail
