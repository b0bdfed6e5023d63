// The inline PTX of the flash kernels (sm_80 and later): mma.sync
// m16n8k16 with bf16 operands and fp32 accumulators, ldmatrix x4 (plain
// and transposed), and cp.async, the copies from global to shared memory
// that land while the kernel computes on the previous tile. mma.sync's
// fragments have the layouts the PTX ISA documents ("Matrix Fragments for
// mma.m16n8k16"), unlike WMMA's opaque ones, so a kernel keeps a score
// tile in registers, takes its softmax there and hands it on to the next
// product as an A operand.
// Lane L (g = L/4, t = L%4) holds
//   A (16×16): a[0] rows g, cols 2t..2t+1; a[1] row g+8; a[2] row g, cols
//              2t+8..2t+9; a[3] row g+8, cols 2t+8..
//   B (16×8):  b[0] rows 2t..2t+1, col g; b[1] rows 2t+8..2t+9, col g
//   C (16×8):  c[0..1] row g, cols 2t..2t+1; c[2..3] row g+8
// two bf16 to a register, the lower index in the lower half. So the C
// fragments of columns 16k..16k+7 and 16k+8..16k+15 are, rounded and
// paired, the A fragment of columns 16k..16k+15.
// The emulator (tests/gpu_kernels) has its own versions of these functions
// (shim/flash_ptx_emulated.h), which check the same layouts on the CPU.
#pragma once

#include <cstdint>

#ifdef MAESTRO_CUDA_EMULATOR
#include "flash_ptx_emulated.h"
#else
#include <cuda_bf16.h>

namespace maestro::cuda_detail::warp {

// d += a·b (one 16×8×16 tile).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the flash kernels need sm_80 or later (mma.sync m16n8k16 with bf16, ldmatrix)"
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Four 8×8 bf16 matrices from shared memory: lane L gives the address of
// row L%8 of matrix L/8 (16 bytes, 16-byte aligned). Plain: r[i] = matrix
// i's row L/4, columns 2(L%4)..+1. Transposed: matrix i's rows 2(L%4) and
// 2(L%4)+1 at column L/4.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

// 16 bytes from global `src` to shared `dst` (both 16-byte aligned), or 16
// zero bytes when !valid (src is then not read, but must be a valid
// address). They land by the cp_async_wait that covers their group; other
// threads see them after a barrier that follows it.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
  const unsigned addr = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0));
#endif
}
// Closes the calling thread's group of copies (an empty group is allowed).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most `Pending` of the calling thread's newest groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
#endif
}

// Two floats rounded to bf16 (to nearest even) in one register, `lo` in the lower half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace maestro::cuda_detail::warp
#endif
