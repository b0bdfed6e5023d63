// The flash attention kernels (attention_kernels.h, "flash path"): the
// tiled kernel's online softmax with its four products on the tensor cores
// in the manner of FlashAttention-2 — mma.sync m16n8k16 with bf16 operands
// (the backend's bf16 copies of q, k, v, dO) and fp32 sums
// (gpu/cuda/flash_ptx.cuh) — each warp's scores, probabilities and output
// kept in registers, and no [H, L, L] buffer in device memory. Shared
// memory holds only the bf16 tiles (gpu/launch_plan.h's FlashLayout); the
// next tile of the walked side is copied in (cp.async) while the block
// computes on the current one.
// Per-element math: gpu/kernel_math.h (flash_rescale, flash_prob,
// attention_dscore). No atomics: dq is summed by the query rows' block, dk
// and dv by the key rows' block, each in a fixed order — the same bits on
// every run. Written without a GPU: the emulator runs them on the CPU
// (tests/gpu_kernels), and the start-up self-check runs them against the
// reference path before a run may train on them.
#include <cuda_bf16.h>

#include "gpu/cuda/attention_kernels.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/flash_ptx.cuh"
#include "gpu/kernel_math.h"

namespace maestro::cuda_detail {

namespace gm = gpu_math;

namespace {

using bf16 = __nv_bfloat16;
using warp::cp_async16;
using warp::cp_async_commit;
using warp::cp_async_wait;
using warp::ldmatrix_x4;
using warp::ldmatrix_x4_trans;
using warp::mma_bf16_16816;
using warp::pack_bf16;

constexpr int kThreads = 32 * kFlashWarps;

// dst[r][d] (row stride ld) = src[(row0 + r)·stride + d] for r < rows and
// d < D; zero for the padding (r < n, d < Dp). Both bf16: the backend hands
// the kernels bf16 copies of q, k, v and dO (rounded once per call, as the
// tensor-core path's GEMMs read them). With D a multiple of 8, 16-byte
// cp.async copies in the calling thread's open group (every row then starts
// 16-byte aligned: the backend's scratch is 256-byte aligned, the strides
// multiples of D, and the shared rows Dp + 8 long); else plain stores.
// Either way the tile is there for every thread after the group's
// cp_async_wait and a barrier.
template <int Dp>
__device__ void load_tile(bf16* dst, int64_t ld, const bf16* src, int64_t row0, int64_t rows, int64_t stride,
                          int64_t D, int n) {
  if (D % 8 == 0) {
    constexpr int kPerRow = Dp / 8;
    for (int e = threadIdx.x; e < n * kPerRow; e += kThreads) {
      const int r = e / kPerRow, d = (e % kPerRow) * 8;
      const bool valid = r < rows && d < D;
      cp_async16(dst + r * ld + d, valid ? src + (row0 + r) * stride + d : src, valid);
    }
  } else {
    for (int e = threadIdx.x; e < n * Dp; e += kThreads) {
      const int r = e / Dp, d = e % Dp;
      dst[r * ld + d] = r < rows && d < D ? src[(row0 + r) * stride + d] : __float2bfloat16_rn(0.0f);
    }
  }
}

// A warp's fragments (flash_ptx.cuh's layouts). Lane L: g = L/4 owns rows g
// and g + 8 of a 16-row tile, t = L%4 columns 2t and 2t + 1 of each 8.
// An accumulator of 16 rows × 8·NT columns is float[NT][4]: element e of
// column tile n is row g + 8·(e/2), column 8n + 2t + e%2.
__device__ int lane_id() { return int(threadIdx.x % 32); }

// a = the A fragment of tile[0..15][c0..c0+15] (bf16, row stride ld).
__device__ void load_a(uint32_t (&a)[4], const bf16* tile, int64_t ld, int c0) {
  const int lane = lane_id(), i = lane / 8;
  ldmatrix_x4(a, tile + ((i % 2) * 8 + lane % 8) * ld + c0 + (i / 2) * 8);
}
// b[0..1], b[2..3] = the B fragments of columns n0..n0+7 and n0+8..n0+15,
// k in k0..k0+15, of B = tileᵀ, tile [n][k] row-major (K or V in Q·Kᵀ).
__device__ void load_b_transposed(uint32_t (&b)[4], const bf16* tile, int64_t ld, int n0, int k0) {
  const int lane = lane_id(), i = lane / 8;
  ldmatrix_x4(b, tile + (n0 + (i / 2) * 8 + lane % 8) * ld + k0 + (i % 2) * 8);
}
// The same of B = tile, tile [k][n] row-major (V in P·V).
__device__ void load_b(uint32_t (&b)[4], const bf16* tile, int64_t ld, int k0, int n0) {
  const int lane = lane_id(), i = lane / 8;
  ldmatrix_x4_trans(b, tile + (k0 + (i % 2) * 8 + lane % 8) * ld + n0 + (i / 2) * 8);
}
__device__ void mma_pair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  const uint32_t lo[2] = {b[0], b[1]}, hi[2] = {b[2], b[3]};
  mma_bf16_16816(c0, a, lo);
  mma_bf16_16816(c1, a, hi);
}

template <int N>
__device__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[n][e] = 0.0f;
}

// c[m][16][8·NT] = A_m[16][Dp]·B[8·NT][Dp]ᵀ for the warp's MT tiles of 16
// rows (A_m at A + 16·m rows: Q, dO; K, V) against the walked tile B (K,
// V; Q, dO), both bf16 in shared memory. Each B fragment serves all MT.
template <int Dp, int NT, int MT>
__device__ void product_abt(float (&c)[MT][NT][4], const bf16* A, const bf16* B, int64_t ld) {
#pragma unroll
  for (int m = 0; m < MT; ++m) zero(c[m]);
#pragma unroll
  for (int k = 0; k < Dp / 16; ++k) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) load_a(a[m], A + 16 * m * ld, ld, 16 * k);
#pragma unroll
    for (int n = 0; n < NT / 2; ++n) {
      uint32_t b[4];
      load_b_transposed(b, B, ld, 16 * n, 16 * k);
#pragma unroll
      for (int m = 0; m < MT; ++m) mma_pair(c[m][2 * n], c[m][2 * n + 1], a[m], b);
    }
  }
}

// The accumulator c[16][8·NT] rounded to bf16 as A fragments of 16 columns each.
template <int NT>
__device__ void as_a(uint32_t (&a)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
  for (int k = 0; k < NT / 2; ++k) {
    a[k][0] = pack_bf16(c[2 * k][0], c[2 * k][1]);
    a[k][1] = pack_bf16(c[2 * k][2], c[2 * k][3]);
    a[k][2] = pack_bf16(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = pack_bf16(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

// acc[m][16][Dp] += P_m[16][16·KT]·B[16·KT][Dp] for the warp's MT tiles
// of 16 rows: P in registers (as_a), B the walked tile [k][Dp] (V; dO, Q;
// K), bf16 in shared memory. Each B fragment serves all MT.
template <int Dp, int KT, int MT>
__device__ void product_pb(float (&acc)[MT][Dp / 8][4], const uint32_t (&p)[MT][KT][4], const bf16* B, int64_t ld) {
#pragma unroll
  for (int k = 0; k < KT; ++k)
#pragma unroll
    for (int n = 0; n < Dp / 16; ++n) {
      uint32_t b[4];
      load_b(b, B, ld, 16 * k, 16 * n);
#pragma unroll
      for (int m = 0; m < MT; ++m) mma_pair(acc[m][2 * n], acc[m][2 * n + 1], p[m][k], b);
    }
}

// The max (or sum) of a row over the four lanes of a quad that hold it.
__device__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// A gradient's warp rows from its accumulator: grad[(row0 + r)·stride + d]
// gets scale·acc (put_grad) for the lane's rows r < rows and columns d < D.
template <int Dp>
__device__ void write_rows(float* grad, bool add, const float (&acc)[Dp / 8][4], int64_t row0, int64_t rows,
                           int64_t stride, int64_t D, float scale) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int n = 0; n < Dp / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = g + 8 * (e / 2), d = 8 * n + 2 * t + e % 2;
      if (r < rows && d < D) gm::put_grad(grad[(row0 + r) * stride + d], scale * acc[n][e], add);
    }
}

// Blocks in the order that keeps an SM's last blocks short: a causal
// sequence's last query tiles see the most keys, its first key tiles the
// most queries, and a GPU starts blocks roughly in index order — so the
// forward and dq kernels take their tiles from the end of the list (token
// order, plan_attention_tiles) and the dk/dv kernel from the start. Each
// output row is still summed by one block in a fixed order: the same bits.
//
// The walk over the other side's tiles, shared by the three kernels: tile
// i + 1 is copied into stage (i + 1) % 2 while the block computes on tile
// i in stage i % 2. `load(i, stage)` issues tile i's copies (the first
// group also holds the block's own rows, issued before the walk);
// `compute(i, stage)` runs once tile i is there for every thread.
template <typename Load, typename Compute>
__device__ void walk_tiles(int64_t n, Load load, Compute compute) {
  load(int64_t(0), 0);
  cp_async_commit();
  for (int64_t i = 0; i < n; ++i) {
    if (i + 1 < n) load(i + 1, int((i + 1) % 2));
    cp_async_commit();  // possibly empty: every thread's groups stay in step
    cp_async_wait<1>();  // all but the newest group: tile i (and the own rows) landed
    __syncthreads();
    compute(i, int(i % 2));
    __syncthreads();  // stage i % 2 is consumed before tile i + 2 is copied over it
  }
}

// The key tiles of C keys that a block of query rows walks (forward, dq):
// tile i holds keys key0(i) .. key0(i) + keys(i) − 1 of kv head kh — up to
// the block's last row when causal — as K, then V, in a stage of shared
// memory (`stages`: stage s at s·2C rows).
template <int Dp, int C>
struct KeyTiles {
  const AttentionTile& t;
  const bf16 *k, *v;
  int64_t kh, KV, D;
  bool causal;
  bf16* stages;
  static constexpr int64_t ld = flash_layout(Dp).ldh;
  __device__ int64_t end() const { return causal ? int64_t(t.row0) + t.rows : int64_t(t.seq_end); }
  __device__ int64_t count() const { return (end() - t.seq_begin + C - 1) / C; }
  __device__ int64_t key0(int64_t i) const { return int64_t(t.seq_begin) + i * C; }
  __device__ int64_t keys(int64_t i) const { return end() - key0(i) < C ? end() - key0(i) : int64_t(C); }
  __device__ bf16* K(int stage) const { return stages + stage * 2 * C * ld; }
  __device__ bf16* V(int stage) const { return K(stage) + C * ld; }
  __device__ void load(int64_t i, int stage) const {
    load_tile<Dp>(K(stage), ld, k + kh * D, key0(i), keys(i), KV * D, D, C);
    load_tile<Dp>(V(stage), ld, v + kh * D, key0(i), keys(i), KV * D, D, C);
  }
};

// grid (n_tiles of kFlashForwardRows query rows, H). Warp w owns the
// tile's query rows 32w..32w+31, two tiles of 16 (MT; each K and V
// fragment serves both): per tile of kFlashCols keys S = q·kᵀ in
// registers, the online softmax there (each lane's two rows of each 16; a
// row's max over its quad), O rescaled and O += P·v with P handed on in
// registers. A lane's Σ exp covers its own columns; the quad adds them at
// the end.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                         const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  constexpr int C = kFlashCols, NT = C / 8, MT = kFlashForwardRows / (16 * kFlashWarps);
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* stages = Qs + kFlashForwardRows * L.ldh;  // KeyTiles' stages
  const int warp = threadIdx.x / 32, g = lane_id() / 4, r0 = 16 * MT * warp;
  const int ct = 2 * (lane_id() % 4);  // the lane's first column in each 8
  const AttentionTile t = tiles[gridDim.x - 1 - blockIdx.x];  // the last first (see above walk_tiles)
  const int64_t h = blockIdx.y, kh = h / (H / KV);
  const float scale = rsqrtf(float(D));
  float o[MT][Dp / 8][4];
  float m[MT][2], l[MT][2];  // rows 16·mt + g and 16·mt + g + 8 of the warp's
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    zero(o[mt]);
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const int64_t last_row = int64_t(t.row0) + r0 + 16 * MT - 1;  // the warp's last query row
  const KeyTiles<Dp, C> tiles_of_keys{t, k, v, kh, KV, D, causal, stages};
  load_tile<Dp>(Qs, L.ldh, q + h * D, t.row0, t.rows, H * D, D, kFlashForwardRows);
  auto compute = [&](int64_t i, int stage) {
    const int64_t key0 = tiles_of_keys.key0(i), keys = tiles_of_keys.keys(i);
    if (causal && key0 > last_row) return;  // every key of the tile is after the warp's rows
    float s[MT][NT][4];
    product_abt<Dp, NT, MT>(s, Qs + r0 * L.ldh, tiles_of_keys.K(stage), L.ldh);
    uint32_t p[MT][NT / 2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t local = r0 + 16 * mt + g + 8 * (e / 2), j = 8 * n + ct + e % 2;
          const float x = local < t.rows && j < keys && gm::attention_visible(t.row0 + local, key0 + j, causal)
                              ? s[mt][n][e] * scale
                              : -INFINITY;
          s[mt][n][e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      float m_new[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m_new[r] = fmaxf(m[mt][r], quad_max(mx[r]));
        alpha[r] = gm::flash_rescale(m[mt][r], m_new[r]);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[e / 2] += s[mt][n][e] = gm::flash_prob(s[mt][n][e], m_new[e / 2]);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[mt][r] = l[mt][r] * alpha[r] + sum[r];
        m[mt][r] = m_new[r];
      }
#pragma unroll
      for (int n = 0; n < Dp / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][n][e] *= alpha[e / 2];
      as_a<NT>(p[mt], s[mt]);
    }
    product_pb<Dp, NT / 2, MT>(o, p, tiles_of_keys.V(stage), L.ldh);
  };
  walk_tiles(tiles_of_keys.count(), [&](int64_t i, int stage) { tiles_of_keys.load(i, stage); }, compute);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float row_l = quad_sum(l[mt][r]);
      const int64_t local = r0 + 16 * mt + g + 8 * r, row = t.row0 + local;
      if (local >= t.rows) continue;
      const float inv = 1.0f / row_l;  // l > 0: a row sees at least its own key
#pragma unroll
      for (int n = 0; n < Dp / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t d = 8 * n + ct + e;
          if (d < D) out[(row * H + h) * D + d] = o[mt][n][2 * r + e] * inv;
        }
      if (ct == 0) lse[row * H + h] = m[mt][r] + logf(row_l);
    }
}

// grid (n_tiles of kFlashRows query rows, H). Warp w owns query rows
// 16w..16w+15: per tile of kFlashCols keys S = q·kᵀ and dP = dO·vᵀ in
// registers, dS = P·(dP − delta) with P = exp(scale·S − lse), and
// dq += dS·k with dS handed on in registers; dq = scale·Σ.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(float* dq, bool add_dq, const bf16* dout, const float* lse, const float* delta,
                            const bf16* q, const bf16* k, const bf16* v, const AttentionTile* tiles, int64_t H,
                            int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  constexpr int C = kFlashCols, NT = C / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* dOs = Qs + kFlashRows * L.ldh;
  bf16* stages = dOs + kFlashRows * L.ldh;  // KeyTiles' stages
  const int warp = threadIdx.x / 32, g = lane_id() / 4, r0 = 16 * warp;
  const int ct = 2 * (lane_id() % 4);
  const AttentionTile t = tiles[gridDim.x - 1 - blockIdx.x];  // the last first (see above walk_tiles)
  const int64_t h = blockIdx.y, kh = h / (H / KV);
  const float scale = rsqrtf(float(D));
  float row_lse[2], row_delta[2];  // the lane's rows g and g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t local = r0 + g + 8 * r;
    row_lse[r] = local < t.rows ? lse[(t.row0 + local) * H + h] : 0.0f;
    row_delta[r] = local < t.rows ? delta[(t.row0 + local) * H + h] : 0.0f;
  }
  float acc[1][Dp / 8][4];
  zero(acc[0]);
  const int64_t last_row = int64_t(t.row0) + r0 + 15;
  const KeyTiles<Dp, C> tiles_of_keys{t, k, v, kh, KV, D, causal, stages};
  load_tile<Dp>(Qs, L.ldh, q + h * D, t.row0, t.rows, H * D, D, kFlashRows);
  load_tile<Dp>(dOs, L.ldh, dout + h * D, t.row0, t.rows, H * D, D, kFlashRows);
  auto compute = [&](int64_t i, int stage) {
    const int64_t key0 = tiles_of_keys.key0(i), keys = tiles_of_keys.keys(i);
    if (causal && key0 > last_row) return;
    const bf16* Ks = tiles_of_keys.K(stage);
    float sm[1][NT][4], dpm[1][NT][4];
    product_abt<Dp, NT, 1>(sm, Qs + r0 * L.ldh, Ks, L.ldh);
    product_abt<Dp, NT, 1>(dpm, dOs + r0 * L.ldh, tiles_of_keys.V(stage), L.ldh);
    float(&s)[NT][4] = sm[0];
    const float(&dp)[NT][4] = dpm[0];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t local = r0 + g + 8 * (e / 2), j = 8 * n + ct + e % 2;
        float ds = 0.0f;
        if (local < t.rows && j < keys && gm::attention_visible(t.row0 + local, key0 + j, causal))
          ds = gm::attention_dscore(expf(s[n][e] * scale - row_lse[e / 2]), dp[n][e], row_delta[e / 2]);
        s[n][e] = ds;
      }
    uint32_t ds16[1][NT / 2][4];
    as_a<NT>(ds16[0], s);
    product_pb<Dp, NT / 2, 1>(acc, ds16, Ks, L.ldh);
  };
  walk_tiles(tiles_of_keys.count(), [&](int64_t i, int stage) { tiles_of_keys.load(i, stage); }, compute);
  write_rows<Dp>(dq + h * D, add_dq, acc[0], int64_t(t.row0) + r0, int64_t(t.rows) - r0, H * D, D, scale);
}

// grid (n_tiles of kFlashRows key rows, KV). Warp w owns key rows
// 16w..16w+15 of kv head blockIdx.y. For each query head of the group in
// turn and each tile of kFlashCols query rows: Sᵀ = k·qᵀ, dPᵀ = v·dOᵀ,
// Pᵀ and dSᵀ as the q kernel computes them, all in registers; dv += Pᵀ·dO
// and dk += dSᵀ·q (a fixed order: heads, then query tiles); dk = scale·Σ.
template <int Dp>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(float* dk, bool add_dk, float* dv, bool add_dv, const bf16* dout, const float* lse,
                             const float* delta, const bf16* q, const bf16* k, const bf16* v,
                             const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D, bool causal) {
  constexpr FlashLayout L = flash_layout(Dp);
  constexpr int C = kFlashCols, NT = C / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + kFlashRows * L.ldh;
  bf16* stages = Vs + kFlashRows * L.ldh;  // stage s: Q at s·2C rows, dO C rows after
  const int warp = threadIdx.x / 32, g = lane_id() / 4, r0 = 16 * warp;
  const int ct = 2 * (lane_id() % 4);
  const AttentionTile t = tiles[blockIdx.x];
  const int64_t kh = blockIdx.y, group = H / KV;
  const float scale = rsqrtf(float(D));
  float dk_acc[1][Dp / 8][4], dv_acc[1][Dp / 8][4];
  zero(dk_acc[0]);
  zero(dv_acc[0]);
  const int64_t first_key = int64_t(t.row0) + r0;  // the warp's first key row
  // Causal: a query sees keys up to itself, so the tile's keys are seen from its first row on.
  const int64_t query_begin = causal ? int64_t(t.row0) : int64_t(t.seq_begin);
  const int64_t q_tiles = (t.seq_end - query_begin + C - 1) / C;
  load_tile<Dp>(Ks, L.ldh, k + kh * D, t.row0, t.rows, KV * D, D, kFlashRows);
  load_tile<Dp>(Vs, L.ldh, v + kh * D, t.row0, t.rows, KV * D, D, kFlashRows);
  // Tile i: query head kh·group + i / q_tiles, query rows from q0_of(i).
  auto head_of = [&](int64_t i) { return kh * group + i / q_tiles; };
  auto q0_of = [&](int64_t i) { return query_begin + (i % q_tiles) * C; };
  auto queries_of = [&](int64_t i) { return t.seq_end - q0_of(i) < C ? t.seq_end - q0_of(i) : int64_t(C); };
  auto load = [&](int64_t i, int stage) {
    bf16* Qs = stages + stage * 2 * C * L.ldh;
    const int64_t h = head_of(i);
    load_tile<Dp>(Qs, L.ldh, q + h * D, q0_of(i), queries_of(i), H * D, D, C);
    load_tile<Dp>(Qs + C * L.ldh, L.ldh, dout + h * D, q0_of(i), queries_of(i), H * D, D, C);
  };
  auto compute = [&](int64_t i, int stage) {
    const int64_t h = head_of(i), q0 = q0_of(i), queries = queries_of(i);
    if (causal && q0 + queries - 1 < first_key) return;  // every query is before the warp's keys
    const bf16* Qs = stages + stage * 2 * C * L.ldh;
    const bf16* dOs = Qs + C * L.ldh;
    float col_lse[NT][2], col_delta[NT][2];  // the lane's columns 8n + ct, 8n + ct + 1
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = 8 * n + ct + e;
        col_lse[n][e] = j < queries ? lse[(q0 + j) * H + h] : 0.0f;
        col_delta[n][e] = j < queries ? delta[(q0 + j) * H + h] : 0.0f;
      }
    float sm[1][NT][4], dpm[1][NT][4];
    product_abt<Dp, NT, 1>(sm, Ks + r0 * L.ldh, Qs, L.ldh);
    product_abt<Dp, NT, 1>(dpm, Vs + r0 * L.ldh, dOs, L.ldh);
    float(&s)[NT][4] = sm[0];
    float(&dp)[NT][4] = dpm[0];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t local = r0 + g + 8 * (e / 2), j = 8 * n + ct + e % 2;
        float p = 0.0f, ds = 0.0f;
        if (local < t.rows && j < queries && gm::attention_visible(q0 + j, t.row0 + local, causal)) {
          p = expf(s[n][e] * scale - col_lse[n][e % 2]);
          ds = gm::attention_dscore(p, dp[n][e], col_delta[n][e % 2]);
        }
        s[n][e] = p;
        dp[n][e] = ds;
      }
    uint32_t p16[1][NT / 2][4], ds16[1][NT / 2][4];
    as_a<NT>(p16[0], s);
    as_a<NT>(ds16[0], dp);
    product_pb<Dp, NT / 2, 1>(dv_acc, p16, dOs, L.ldh);
    product_pb<Dp, NT / 2, 1>(dk_acc, ds16, Qs, L.ldh);
  };
  walk_tiles(group * q_tiles, load, compute);
  if (dk) write_rows<Dp>(dk + kh * D, add_dk, dk_acc[0], first_key, int64_t(t.rows) - r0, KV * D, D, scale);
  if (dv) write_rows<Dp>(dv + kh * D, add_dv, dv_acc[0], first_key, int64_t(t.rows) - r0, KV * D, D, 1.0f);
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
