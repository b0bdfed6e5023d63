// Warp and block reductions shared by the CUDA backend's kernels: sums
// (float, double), maxima and the online-softmax state of gpu/kernel_math.h.
// Blocks are at most 1024 threads (32 warps); every thread of the block
// must call a block_* function.
#pragma once

#include "gpu/kernel_math.h"

namespace maestro::cuda_detail {

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline gpu_math::SoftmaxState warp_softmax(gpu_math::SoftmaxState s) {
  for (int o = 16; o > 0; o >>= 1) {
    const gpu_math::SoftmaxState other{__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)};
    s = gpu_math::softmax_merge(s, other);
  }
  return s;
}

// The block's sum, returned to every thread. shared: 32 slots.
template <class T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  const T r = shared[0];
  __syncthreads();
  return r;
}

// The block's max, returned to every thread. shared: 32 slots.
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  if (warp == 0) v = warp_max(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  const float r = shared[0];
  __syncthreads();
  return r;
}

// The block's softmax state, returned to every thread. shared: 64 floats.
__device__ inline gpu_math::SoftmaxState block_softmax(gpu_math::SoftmaxState s, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  s = warp_softmax(s);
  if (lane == 0) {
    shared[warp] = s.max;
    shared[32 + warp] = s.sum;
  }
  __syncthreads();
  s = lane < warps ? gpu_math::SoftmaxState{shared[lane], shared[32 + lane]} : gpu_math::softmax_init();
  if (warp == 0) s = warp_softmax(s);
  if (threadIdx.x == 0) {
    shared[0] = s.max;
    shared[32] = s.sum;
  }
  __syncthreads();
  const gpu_math::SoftmaxState r{shared[0], shared[32]};
  __syncthreads();
  return r;
}

}  // namespace maestro::cuda_detail
