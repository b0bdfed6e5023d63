// Attention kernels (attention_kernels.h). Per-element math: gpu/kernel_math.h.
#include "gpu/cuda/attention_kernels.h"

#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/device_reduce.cuh"
#include "nn/dtype.h"

namespace maestro::cuda_detail {

namespace gm = gpu_math;

namespace {

constexpr int kRowThreads = 256;

// log Σ exp over row[0, end), by the whole block.
__device__ float row_lse(const float* row, int64_t end, float* shared) {
  gm::SoftmaxState s = gm::softmax_init();
  for (int64_t j = threadIdx.x; j < end; j += blockDim.x) s = gm::softmax_push(s, row[j]);
  return gm::softmax_lse(block_softmax(s, shared));
}

// One block per row r = h*L + i of S[H,L,L].
__global__ void attention_softmax_kernel(float* S, float* lse, int64_t t0, int64_t L, int64_t H, bool causal) {
  __shared__ float shared[64];
  const int64_t r = blockIdx.x, h = r / L, i = r % L;
  float* row = S + r * L;
  const int64_t end = causal ? i + 1 : L;
  const float l = row_lse(row, end, shared);
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x) row[j] = j < end ? expf(row[j] - l) : 0.0f;
  if (threadIdx.x == 0) lse[(t0 + i) * H + h] = l;
}

__global__ void attention_probs_kernel(float* S, const float* lse, int64_t t0, int64_t L, int64_t H, bool causal) {
  const int64_t n = H * L * L;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % L, i = (e / L) % L, h = e / (L * L);
    S[e] = gm::attention_visible(i, j, causal) ? expf(S[e] - lse[(t0 + i) * H + h]) : 0.0f;
  }
}

__global__ void attention_dscores_kernel(float* dP, const float* P, const float* delta, int64_t t0, int64_t L,
                                         int64_t H) {
  const int64_t n = H * L * L;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = (e / L) % L, h = e / (L * L);
    dP[e] = gm::attention_dscore(P[e], dP[e], delta[(t0 + i) * H + h]);
  }
}

// Tensor-core path, forward: as attention_softmax_kernel, but P goes to a
// bf16 buffer (the P·v GEMM's operand) and S is left as it was.
// kPer > 0: rows of at most kPer·kRowThreads keys, read once into registers
// (max, Σ exp, then P = exp·(1/Σ)); thread t holds keys t + k·kRowThreads,
// and past the row's end x = −∞, so its exp is the masked zero written up
// to the row's block end. kPer = 0: rows of any length, an online softmax
// that reads the row twice (two exps per score).
template <int kPer>
__global__ void attention_softmax_bf16_kernel(const float* S, uint16_t* P16, float* lse, int64_t t0, int64_t L,
                                              int64_t H, bool causal, int64_t block) {
  __shared__ float shared[64];
  const int64_t r = blockIdx.x, h = r / L, i = r % L;
  const float* row = S + r * L;
  uint16_t* out = P16 + r * L;
  const int64_t end = causal ? i + 1 : L, read_end = gm::attention_row_end(i, L, block);
  float l;
  if constexpr (kPer == 0) {
    l = row_lse(row, end, shared);
    for (int64_t j = threadIdx.x; j < end; j += blockDim.x) out[j] = float_to_bf16(expf(row[j] - l));
    for (int64_t j = end + threadIdx.x; j < read_end; j += blockDim.x) out[j] = 0;  // masked: no score read
  } else {
    float x[kPer];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * kRowThreads;
      x[k] = j < end ? row[j] : -INFINITY;
      mx = fmaxf(mx, x[k]);
    }
    mx = block_max(mx, shared);  // finite: every row sees at least its own key
    float sum = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      x[k] = expf(x[k] - mx);
      sum += x[k];
    }
    sum = block_sum(sum, shared);
    const float inv = 1.0f / sum;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * kRowThreads;
      if (j < read_end) out[j] = float_to_bf16(x[k] * inv);
    }
    l = gm::softmax_lse({mx, sum});
  }
  if (threadIdx.x == 0) lse[(t0 + i) * H + h] = l;
}

// Tensor-core path, backward: one block per score row (h, i). From S
// (scores) and dP = dO·vᵀ: P = exp(S − lse) where visible, dS = P·(dP −
// delta), both written as bf16 (the gradient GEMMs' operands). Replaces
// probs in place, dscores in place and two rounding passes.
__global__ void attention_backward_scores_bf16_kernel(const float* S, const float* dP, uint16_t* P16, uint16_t* dS16,
                                                      const float* lse, const float* delta, int64_t t0, int64_t L,
                                                      int64_t H, bool causal, int64_t block) {
  const int64_t r = blockIdx.x, h = r / L, i = r % L, base = r * L;
  const float l = lse[(t0 + i) * H + h], d = delta[(t0 + i) * H + h];
  const int64_t end = causal ? i + 1 : L;  // gm::attention_visible(i, j, causal) ⇔ j < end
  const int64_t read_end = gm::attention_row_end(i, L, block);
  for (int64_t j = threadIdx.x; j < end; j += blockDim.x) {
    const float p = expf(S[base + j] - l);
    P16[base + j] = float_to_bf16(p);
    dS16[base + j] = float_to_bf16(gm::attention_dscore(p, dP[base + j], d));
  }
  for (int64_t j = end + threadIdx.x; j < read_end; j += blockDim.x) P16[base + j] = dS16[base + j] = 0;  // masked
}

// One warp per (token, head).
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int64_t N, int64_t H,
                                       int64_t D) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= N * H) return;
  const float *a = dout + w * D, *b = out + w * D;  // [N,H,D] rows are (token, head)
  float s = 0;
  for (int64_t d = lane; d < D; d += 32) s += a[d] * b[d];
  s = warp_sum(s);
  if (lane == 0) delta[w] = s;
}

// ---- fast path ------------------------------------------------------------------
constexpr int kKeys = 32;                                // keys per shared-memory tile (one per lane)
constexpr int kSlots = kFastAttentionMaxHead / 32;       // head dims per lane

// Shared memory: K and V tiles [kKeys][D+1] (padded: lane j reads row j
// without bank conflicts), then per warp two rows of D (q and, backward, dout).
size_t fast_shared_bytes(int64_t D) {
  return sizeof(float) * (2 * kKeys * (D + 1) + 2 * kFastRowsPerTile * D);
}

__device__ inline void load_kv_tile(float* Ks, float* Vs, const float* k, const float* v, int64_t key0,
                                    int64_t keys, int64_t kh, int64_t KV, int64_t D) {
  for (int64_t e = threadIdx.x; e < kKeys * D; e += blockDim.x) {
    const int64_t j = e / D, d = e % D;
    const bool in = j < keys;
    Ks[j * (D + 1) + d] = in ? k[((key0 + j) * KV + kh) * D + d] : 0.0f;
    Vs[j * (D + 1) + d] = in ? v[((key0 + j) * KV + kh) * D + d] : 0.0f;
  }
}

// What a warp of a fast-attention block works on: its query row of the
// block's tile, the head, the shared K/V tiles and its two shared rows.
struct FastWarp {
  float *Ks, *Vs, *rows;  // rows: [2, D] of this warp
  AttentionTile t;
  int warp, lane;
  int64_t h, kh, row;
  bool active;  // the tile has a row for this warp
  float scale;
};
__device__ inline FastWarp fast_warp(float* smem, const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D) {
  FastWarp w;
  w.Ks = smem;
  w.Vs = w.Ks + kKeys * (D + 1);
  w.warp = threadIdx.x / 32;
  w.lane = threadIdx.x % 32;
  w.rows = w.Vs + kKeys * (D + 1) + w.warp * 2 * D;
  w.t = tiles[blockIdx.x];
  w.h = blockIdx.y;
  w.kh = w.h / (H / KV);
  w.row = w.t.row0 + w.warp;
  w.active = w.warp < w.t.rows;
  w.scale = rsqrtf(float(D));
  return w;
}

// grid (n_tiles, H), block kFastRowsPerTile warps; warp w owns query row tile.row0 + w.
__global__ void fast_attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                                              const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D,
                                              bool causal) {
  extern __shared__ float smem[];
  const FastWarp w = fast_warp(smem, tiles, H, KV, D);
  float *Ks = w.Ks, *Vs = w.Vs, *qs = w.rows;
  const AttentionTile t = w.t;
  const int lane = w.lane;
  const int64_t h = w.h, kh = w.kh, row = w.row;
  const bool active = w.active;
  const float scale = w.scale;
  if (active)
    for (int64_t d = lane; d < D; d += 32) qs[d] = q[(row * H + h) * D + d];
  float acc[kSlots];
  for (int s = 0; s < kSlots; ++s) acc[s] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = causal ? int64_t(t.row0) + t.rows : int64_t(t.seq_end);
  for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kKeys) {
    const int64_t keys = key_end - key0 < kKeys ? key_end - key0 : int64_t(kKeys);
    __syncthreads();  // the previous tile is consumed
    load_kv_tile(Ks, Vs, k, v, key0, keys, kh, KV, D);
    __syncthreads();
    if (!active) continue;
    const int64_t key = key0 + lane;
    const bool visible = lane < keys && gm::attention_visible(row, key, causal);
    float s = -INFINITY;
    if (visible) {
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qs[d] * Ks[lane * (D + 1) + d];
      s = dot * scale;
    }
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet
    const float p = visible ? expf(s - m_new) : 0.0f;
    const float correction = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
    l = l * correction + warp_sum(p);
    for (int sl = 0; sl < kSlots; ++sl) acc[sl] *= correction;
    for (int j = 0; j < keys; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      for (int sl = 0; sl < kSlots; ++sl) {
        const int64_t d = lane + 32 * sl;
        if (d < D) acc[sl] += pj * Vs[j * (D + 1) + d];
      }
    }
    m = m_new;
  }
  if (!active) return;
  for (int sl = 0; sl < kSlots; ++sl) {
    const int64_t d = lane + 32 * sl;
    if (d < D) out[(row * H + h) * D + d] = acc[sl] / l;
  }
  if (lane == 0) lse[row * H + h] = m + logf(l);
}

// Backward, no atomics (the same bits on every run): dq here, one warp per
// query row as the forward; dk and dv in fast_attention_backward_kv_kernel,
// one warp per key row. Both recompute p and dS from lse and delta.
__global__ void fast_attention_backward_q_kernel(float* dq, bool add_dq, const float* dout, const float* lse,
                                                 const float* delta, const float* q, const float* k, const float* v,
                                                 const AttentionTile* tiles, int64_t H, int64_t KV, int64_t D,
                                                 bool causal) {
  extern __shared__ float smem[];
  const FastWarp w = fast_warp(smem, tiles, H, KV, D);
  float *Ks = w.Ks, *Vs = w.Vs, *qs = w.rows, *dos = w.rows + D;
  const AttentionTile t = w.t;
  const int lane = w.lane;
  const int64_t h = w.h, row = w.row;
  const bool active = w.active;
  const float scale = w.scale;
  float row_lse = 0, row_delta = 0;
  if (active) {
    for (int64_t d = lane; d < D; d += 32) {
      qs[d] = q[(row * H + h) * D + d];
      dos[d] = dout[(row * H + h) * D + d];
    }
    row_lse = lse[row * H + h];
    row_delta = delta[row * H + h];
  }
  float dq_acc[kSlots];
  for (int s = 0; s < kSlots; ++s) dq_acc[s] = 0.0f;
  const int64_t key_end = causal ? int64_t(t.row0) + t.rows : int64_t(t.seq_end);
  for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kKeys) {
    const int64_t keys = key_end - key0 < kKeys ? key_end - key0 : int64_t(kKeys);
    __syncthreads();
    load_kv_tile(Ks, Vs, k, v, key0, keys, w.kh, KV, D);
    __syncthreads();
    if (!active) continue;
    const int64_t key = key0 + lane;
    const bool visible = lane < keys && gm::attention_visible(row, key, causal);
    float ds = 0;
    if (visible) {
      float s = 0, dp = 0;
      for (int64_t d = 0; d < D; ++d) {
        s += qs[d] * Ks[lane * (D + 1) + d];
        dp += dos[d] * Vs[lane * (D + 1) + d];
      }
      ds = gm::attention_dscore(expf(s * scale - row_lse), dp, row_delta);
    }
    for (int j = 0; j < keys; ++j) {
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
      for (int sl = 0; sl < kSlots; ++sl) {
        const int64_t d = lane + 32 * sl;
        if (d < D) dq_acc[sl] += dsj * scale * Ks[j * (D + 1) + d];
      }
    }
  }
  if (!active) return;
  for (int sl = 0; sl < kSlots; ++sl) {
    const int64_t d = lane + 32 * sl;
    if (d < D) gm::put_grad(dq[(row * H + h) * D + d], dq_acc[sl], add_dq);
  }
}

// Shared memory of the kv kernel: query and dout tiles [kKeys][D+1] (the K/V
// tiles' place), their lse and delta [kKeys] each, then per warp two rows of
// D (its key's k and v).
size_t fast_kv_shared_bytes(int64_t D) { return fast_shared_bytes(D) + sizeof(float) * 2 * kKeys; }

// grid (n_tiles over key rows, KV), block kFastRowsPerTile warps; warp w owns
// key row tile.row0 + w of kv head blockIdx.y. For each query head of the
// group in turn and each tile of 32 query rows (lane = query), p and dS as
// the q kernel computes them; dv += Σ p·dO and dk += Σ scale·dS·q, summed
// in a fixed order (heads, then query rows), written once.
__global__ void fast_attention_backward_kv_kernel(float* dk, bool add_dk, float* dv, bool add_dv, const float* dout,
                                                  const float* lse, const float* delta, const float* q, const float* k,
                                                  const float* v, const AttentionTile* tiles, int64_t H, int64_t KV,
                                                  int64_t D, bool causal) {
  extern __shared__ float smem[];
  float* Qs = smem;                          // [kKeys][D+1]
  float* dOs = Qs + kKeys * (D + 1);         // [kKeys][D+1]
  float* rows = dOs + kKeys * (D + 1);       // [warps][2][D]
  float* lse_s = rows + kFastRowsPerTile * 2 * D;  // [kKeys]
  float* delta_s = lse_s + kKeys;                  // [kKeys]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const AttentionTile t = tiles[blockIdx.x];
  const int64_t kh = blockIdx.y, g = H / KV, key = t.row0 + warp;
  const bool active = warp < t.rows;
  float *ks = rows + warp * 2 * D, *vs = ks + D;
  if (active)
    for (int64_t d = lane; d < D; d += 32) {
      ks[d] = k[(key * KV + kh) * D + d];
      vs[d] = v[(key * KV + kh) * D + d];
    }
  const float scale = rsqrtf(float(D));
  float dk_acc[kSlots], dv_acc[kSlots];
  for (int s = 0; s < kSlots; ++s) dk_acc[s] = dv_acc[s] = 0.0f;
  // Causal: a query sees keys up to itself, so the tile's keys are seen from its first row on.
  const int64_t query_begin = causal ? int64_t(t.row0) : int64_t(t.seq_begin);
  for (int64_t h = kh * g; h < (kh + 1) * g; ++h)
    for (int64_t q0 = query_begin; q0 < t.seq_end; q0 += kKeys) {
      const int64_t queries = t.seq_end - q0 < kKeys ? t.seq_end - q0 : int64_t(kKeys);
      __syncthreads();  // the previous tile is consumed (and this warp's k, v rows written)
      for (int64_t e = threadIdx.x; e < kKeys * D; e += blockDim.x) {
        const int64_t j = e / D, d = e % D;
        const bool in = j < queries;
        Qs[j * (D + 1) + d] = in ? q[((q0 + j) * H + h) * D + d] : 0.0f;
        dOs[j * (D + 1) + d] = in ? dout[((q0 + j) * H + h) * D + d] : 0.0f;
      }
      for (int64_t j = threadIdx.x; j < kKeys; j += blockDim.x) {
        lse_s[j] = j < queries ? lse[(q0 + j) * H + h] : 0.0f;
        delta_s[j] = j < queries ? delta[(q0 + j) * H + h] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      const bool visible = lane < queries && gm::attention_visible(q0 + lane, key, causal);
      float p = 0, ds = 0;
      if (visible) {
        float s = 0, dp = 0;
        for (int64_t d = 0; d < D; ++d) {
          s += Qs[lane * (D + 1) + d] * ks[d];
          dp += dOs[lane * (D + 1) + d] * vs[d];
        }
        p = expf(s * scale - lse_s[lane]);
        ds = gm::attention_dscore(p, dp, delta_s[lane]);
      }
      for (int j = 0; j < queries; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
        for (int sl = 0; sl < kSlots; ++sl) {
          const int64_t d = lane + 32 * sl;
          if (d >= D) continue;
          dk_acc[sl] += dsj * scale * Qs[j * (D + 1) + d];
          dv_acc[sl] += pj * dOs[j * (D + 1) + d];
        }
      }
    }
  if (!active) return;
  for (int sl = 0; sl < kSlots; ++sl) {
    const int64_t d = lane + 32 * sl;
    if (d >= D) continue;
    if (dk) gm::put_grad(dk[(key * KV + kh) * D + d], dk_acc[sl], add_dk);
    if (dv) gm::put_grad(dv[(key * KV + kh) * D + d], dv_acc[sl], add_dv);
  }
}

int64_t elementwise_blocks(int64_t n) { return grid_blocks(n, kRowThreads); }

}  // namespace

void launch_attention_softmax(float* S, float* lse, int64_t t0, int64_t L, int64_t H, bool causal, cudaStream_t st) {
  attention_softmax_kernel<<<unsigned(H * L), kRowThreads, 0, st>>>(S, lse, t0, L, H, causal);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_attention_probs(float* S, const float* lse, int64_t t0, int64_t L, int64_t H, bool causal,
                            cudaStream_t st) {
  attention_probs_kernel<<<unsigned(elementwise_blocks(H * L * L)), kRowThreads, 0, st>>>(S, lse, t0, L, H, causal);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_attention_dscores(float* dP, const float* P, const float* delta, int64_t t0, int64_t L, int64_t H,
                              cudaStream_t st) {
  attention_dscores_kernel<<<unsigned(elementwise_blocks(H * L * L)), kRowThreads, 0, st>>>(dP, P, delta, t0, L, H);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_attention_softmax_bf16(const float* S, uint16_t* P16, float* lse, int64_t t0, int64_t L, int64_t H,
                                   bool causal, int64_t block, cudaStream_t st) {
  const auto rows = unsigned(H * L);
  if (L <= 4 * kRowThreads)
    attention_softmax_bf16_kernel<4><<<rows, kRowThreads, 0, st>>>(S, P16, lse, t0, L, H, causal, block);
  else if (L <= 8 * kRowThreads)
    attention_softmax_bf16_kernel<8><<<rows, kRowThreads, 0, st>>>(S, P16, lse, t0, L, H, causal, block);
  else if (L <= 16 * kRowThreads)
    attention_softmax_bf16_kernel<16><<<rows, kRowThreads, 0, st>>>(S, P16, lse, t0, L, H, causal, block);
  else  // longer rows: the online softmax, two reads of the row
    attention_softmax_bf16_kernel<0><<<rows, kRowThreads, 0, st>>>(S, P16, lse, t0, L, H, causal, block);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_attention_backward_scores_bf16(const float* S, const float* dP, uint16_t* P16, uint16_t* dS16,
                                           const float* lse, const float* delta, int64_t t0, int64_t L, int64_t H,
                                           bool causal, int64_t block, cudaStream_t st) {
  attention_backward_scores_bf16_kernel<<<unsigned(H * L), kRowThreads, 0, st>>>(S, dP, P16, dS16, lse, delta, t0, L,
                                                                                 H, causal, block);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_attention_delta(float* delta, const float* dout, const float* out, int64_t N, int64_t H, int64_t D,
                            cudaStream_t st) {
  if (N * H == 0) return;
  attention_delta_kernel<<<unsigned((N * H * 32 + kRowThreads - 1) / kRowThreads), kRowThreads, 0, st>>>(
      delta, dout, out, N, H, D);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_fast_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionTile* tiles, int64_t n_tiles, int64_t H, int64_t KV, int64_t D,
                                   bool causal, cudaStream_t st) {
  if (n_tiles == 0) return;
  const dim3 grid{unsigned(n_tiles), unsigned(H)};
  fast_attention_forward_kernel<<<grid, 32 * kFastRowsPerTile, fast_shared_bytes(D), st>>>(out, lse, q, k, v, tiles,
                                                                                            H, KV, D, causal);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_fast_attention_backward(float* dq, bool add_dq, float* dk, bool add_dk, float* dv, bool add_dv,
                                    const float* dout, const float* lse, const float* delta, const float* q,
                                    const float* k, const float* v, const AttentionTile* tiles, int64_t n_tiles,
                                    int64_t H, int64_t KV, int64_t D, bool causal, cudaStream_t st) {
  if (n_tiles == 0) return;
  if (dq) {
    const dim3 grid{unsigned(n_tiles), unsigned(H)};
    fast_attention_backward_q_kernel<<<grid, 32 * kFastRowsPerTile, fast_shared_bytes(D), st>>>(
        dq, add_dq, dout, lse, delta, q, k, v, tiles, H, KV, D, causal);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
  if (dk || dv) {
    const dim3 grid{unsigned(n_tiles), unsigned(KV)};
    fast_attention_backward_kv_kernel<<<grid, 32 * kFastRowsPerTile, fast_kv_shared_bytes(D), st>>>(
        dk, add_dk, dv, add_dv, dout, lse, delta, q, k, v, tiles, H, KV, D, causal);
    MAESTRO_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace maestro::cuda_detail
