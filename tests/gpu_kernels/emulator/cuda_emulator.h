// A CUDA kernel emulator on the CPU: the CUDA backend's kernel sources
// (src/gpu/cuda/*.cu) compiled as host C++ with this header forced in
// (-include) and the shim/ headers in place of the toolkit's, so that the
// very code a GPU runs — its indexing, shared memory, barriers, shuffles,
// tensor-core fragments and asynchronous copies — runs here, where there is
// no GPU (tests/gpu_kernels; the backend around the kernels runs over
// cuda_runtime.cpp and cublas.cpp; the flash kernels' inline PTX over
// shim/flash_ptx_emulated.h).
//
// A launch runs its blocks one after another; a block's threads are fibers
// on the calling thread, each running until it reaches a barrier
// (__syncthreads, __syncwarp, a shuffle, an mma.sync or ldmatrix) or ends,
// and each warp runs as far as it can before the next one starts. So a
// thread that reads shared memory before the barrier that should have
// ordered it after another thread's (or warp's) write reads what was there
// before: the block's dynamic shared memory starts as 0xFF bytes (NaN as
// fp32 and as bf16). Warps and lanes run in order or, to expose the
// opposite hazard, in reverse (set_schedule), which also moves when
// cp.async copies land (below). Strictness beyond the hardware: a barrier
// some threads of the block (or lanes of the warp) never reach is an
// error, not a hang, and so is an ldmatrix or cp.async address the
// hardware would refuse.
//
// What it does not model: concurrency between blocks (they run in turn;
// the kernels here use no atomics and no inter-block communication), the
// memory model beyond barriers and cp.async waits, the tensor cores'
// internal rounding (mma sums here are fp32 in k order), fast-math
// intrinsics, and timing. Launch geometry is checked against a device of
// compute capability 8.6 (1,024 threads a block, 48 KiB of dynamic shared
// memory unless a kernel asks for up to 99 KiB): the least of the GPUs the
// backend is built for.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"  // the shim's

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// A block's static shared memory: per host thread, since the host threads of
// a program over the emulator (maestro-run-emulated's sections) launch
// kernels at once, each running its blocks one at a time.
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
// Kernel sources that use inline PTX (gpu/cuda/flash_ptx.cuh) take the
// emulator's versions of those functions instead (shim/flash_ptx_emulated.h).
#define MAESTRO_CUDA_EMULATOR 1

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// The running thread's coordinates (set by the scheduler on every switch).
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

// CUDA's device overloads that the host library lacks.
template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
inline T max(T a, T b) {
  return a < b ? b : a;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

namespace emu {

enum class Schedule { ThreadOrder, Reverse };
// The order the scheduler resumes a block's threads in (ThreadOrder by default).
void set_schedule(Schedule s);

// How many devices cudaGetDeviceCount reports (MAESTRO_EMULATED_GPUS in the
// environment, else 1, until set; cuda_runtime.cpp).
void set_device_count(int n);

// Every launch since the last reset_counts(), and the barriers they took.
struct Counts {
  uint64_t launches = 0, blocks = 0, block_barriers = 0, warp_barriers = 0;
};
Counts counts();
void reset_counts();

// A fault the hardware would raise or that is undefined there (a divergent
// barrier, a misaligned ldmatrix row): thrown from the launch that made it,
// naming the kernel, the block and the thread.
struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fault(const std::string& what);

void block_barrier();
void warp_barrier(unsigned mask);
// The calling lane's 8 bytes exchanged with its warp: writes `mine`, waits
// for the warp, returns lane `src`'s.
uint64_t warp_exchange(uint64_t mine, int src);
int lane();
// Every lane's `bytes` (at most 32) in lane order: writes the calling lane's,
// waits for the warp, copies all 32 into `all` (32·bytes).
void warp_gather(const void* mine, size_t bytes, void* all);
// cp.async for the calling thread: a 16-byte copy from global `src` to
// dynamic shared `dst` (zeros when !valid; both 16-byte aligned, else a
// fault), queued in the thread's open group; commit closes the group;
// wait(n) makes every copy land but those of the newest n groups. Under
// Schedule::ThreadOrder a copy lands as late as the hardware may let it
// (at the wait: a read of a tile before its wait finds the old bytes);
// under Reverse as early (when issued: a tile copied over one that other
// warps still read, with no barrier between, corrupts their reads).
void async_copy16(void* dst, const void* src, bool valid);
void async_commit();
void async_wait(int pending);
// Whether [p, p + bytes) lies in the running block's dynamic shared memory.
bool in_dynamic_shared(const void* p, size_t bytes);

// The running block's dynamic shared memory (the launch's byte count).
unsigned char* dynamic_shared();

// The opt-in dynamic shared memory of a kernel (cudaFuncSetAttribute):
// false past the device's limit.
bool set_max_dynamic_shared(const void* kernel, int bytes);

// Runs `thread` for every thread of every block of the grid, or records a
// launch error for cudaGetLastError (a bad geometry, as the driver would).
void run_grid(const void* kernel, const char* name, dim3 grid, dim3 block, size_t shared_bytes,
              const std::function<void()>& thread);

// kernel<<<grid, block, shared, stream>>>(args...) becomes
// emu::launch(kernel, "kernel", grid, block, shared, stream)(args...)
// (the build rewrites the sources: CMakeLists.txt).
template <class... P>
auto launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t shared = 0, cudaStream_t = nullptr) {
  return [=](auto&&... args) {
    std::tuple<std::decay_t<P>...> params(std::forward<decltype(args)>(args)...);
    run_grid(reinterpret_cast<const void*>(kernel), name, grid, block, shared, [&] { std::apply(kernel, params); });
  };
}

}  // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  if (width != 32) emu::fault("__shfl_sync: only width 32 is emulated");
  emu::warp_barrier(mask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = emu::warp_exchange(bits, src & 31);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return __shfl_sync(mask, v, emu::lane() ^ lane_mask, width);
}

template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return emu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value) ? cudaSuccess
                                                                                   : cudaErrorInvalidValue;
}
