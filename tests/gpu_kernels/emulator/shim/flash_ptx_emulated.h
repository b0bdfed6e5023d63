// The emulator's versions of gpu/cuda/flash_ptx.cuh's inline PTX: mma.sync
// m16n8k16 (bf16 operands, fp32 accumulators) and ldmatrix x4, plain and
// transposed, over the fragment layouts of the PTX ISA ("Matrix Fragments
// for mma.m16n8k16", "ldmatrix"), and cp.async. The first two are
// warp-collective: each gathers the warp's fragments (or row addresses),
// then each lane computes its own share. A cp.async copy is held back until
// the cp_async_wait that covers its group, so a kernel that reads a tile
// before waiting for it (and the barrier after) reads what was there
// before. A lane's row address outside the block's dynamic shared memory or
// not 16-byte aligned is a fault, as on the hardware. Products are exact in
// fp32 and summed in k order after the accumulator (the tensor cores'
// internal rounding is not modelled).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_bf16.h"

namespace maestro::cuda_detail::warp {

inline float bf16_half(uint32_t x, int hi) { return __bfloat162float(__nv_bfloat16{uint16_t(hi ? x >> 16 : x)}); }

// d += a·b over one 16×8×16 tile. Lane L (g = L/4, t = L%4) holds
//   a[0] A[g][2t..2t+1], a[1] A[g+8][2t..], a[2] A[g][2t+8..], a[3] A[g+8][2t+8..]
//   b[0] B[2t..2t+1][g], b[1] B[2t+8..2t+9][g]
//   d[0..1] D[g][2t..2t+1], d[2..3] D[g+8][2t..2t+1]
// (the lower 16 bits of a register: the lower column, or row of B).
inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  struct Fragments {
    uint32_t a[4], b[2];
  } mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
  emu::warp_gather(&mine, sizeof mine, all);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = bf16_half(all[l].a[0], e);
      A[g + 8][2 * t + e] = bf16_half(all[l].a[1], e);
      A[g][2 * t + 8 + e] = bf16_half(all[l].a[2], e);
      A[g + 8][2 * t + 8 + e] = bf16_half(all[l].a[3], e);
      B[2 * t + e][g] = bf16_half(all[l].b[0], e);
      B[2 * t + 8 + e][g] = bf16_half(all[l].b[1], e);
    }
  }
  const int g = emu::lane() / 4, t = emu::lane() % 4;
  for (int e = 0; e < 4; ++e) {
    const int i = g + 8 * (e / 2), j = 2 * t + e % 2;
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][j];
    d[e] = s;
  }
}

// Four 8×8 bf16 matrices from shared memory: lane L gives the address of
// row L%8 of matrix L/8 (16 bytes). Plain: r[i] = matrix i's row L/4,
// columns 2(L%4), 2(L%4)+1. Transposed: r[i] = matrix i's rows 2(L%4) and
// 2(L%4)+1 at column L/4.
inline void ldmatrix_x4_impl(uint32_t (&r)[4], const void* row, bool trans) {
  if (!emu::in_dynamic_shared(row, 16) || reinterpret_cast<uintptr_t>(row) % 16 != 0)
    emu::fault("ldmatrix: a row address outside dynamic shared memory or not 16-byte aligned");
  const unsigned char* rows[32];
  const unsigned char* mine = static_cast<const unsigned char*>(row);
  emu::warp_gather(&mine, sizeof mine, rows);
  const int g = emu::lane() / 4, t = emu::lane() % 4;
  for (int i = 0; i < 4; ++i) {
    if (!trans) {
      std::memcpy(&r[i], rows[8 * i + g] + 4 * t, 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, rows[8 * i + 2 * t] + 2 * g, 2);
      std::memcpy(&hi, rows[8 * i + 2 * t + 1] + 2 * g, 2);
      r[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl(r, row, true); }

inline void cp_async16(void* dst, const void* src, bool valid) { emu::async_copy16(dst, src, valid); }
inline void cp_async_commit() { emu::async_commit(); }
template <int Pending>
inline void cp_async_wait() {
  emu::async_wait(Pending);
}

// Two floats rounded to bf16 (to nearest even) in one register, `lo` in the lower half.
inline uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(__float2bfloat16_rn(lo).bits) | uint32_t(__float2bfloat16_rn(hi).bits) << 16;
}

}  // namespace maestro::cuda_detail::warp
