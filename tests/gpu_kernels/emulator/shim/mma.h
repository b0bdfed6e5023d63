// The emulator's stand-in for mma.h (cuda_emulator.h): nvcuda::wmma with
// 16×16×16 tiles. Each lane holds the whole tile (the hardware's layout
// across lanes is opaque, and the kernels never look inside a fragment);
// every op is warp-collective, so it first waits for the whole warp, and a
// store writes each lane's share of the tile only (as the hardware). The
// hardware's rules are checked: pointers 32-byte aligned, strides a
// multiple of 16 bytes. Products are exact in fp32 (bf16 operands) and
// summed in k order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda_bf16.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  float v[16][16];  // [row][col] of the tile: A is M×K, B is K×N, C is M×N
};

namespace detail {
void check(const void* p, unsigned ldm, size_t elem, const char* op);
void converge(const char* op);
int lane();
inline float load(const __nv_bfloat16& b) { return __bfloat162float(b); }
inline float load(const float& f) { return f; }
}  // namespace detail

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  detail::converge("load_matrix_sync");
  detail::check(p, ldm, sizeof(T), "load_matrix_sync");
  constexpr bool row = std::is_same_v<Layout, row_major>;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.v[i][j] = detail::load(row ? p[i * ldm + j] : p[j * ldm + i]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  detail::converge("load_matrix_sync");
  detail::check(p, ldm, sizeof(float), "load_matrix_sync");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.v[i][j] = layout == mem_row_major ? p[i * ldm + j] : p[j * ldm + i];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::converge("store_matrix_sync");
  detail::check(p, ldm, sizeof(float), "store_matrix_sync");
  // Each lane stores its share, as on the hardware: a lane that reads the
  // tile back before the warp's __syncwarp finds the others' shares unwritten.
  const int lane = detail::lane();
  for (int e = lane; e < 256; e += 32) {
    const int i = e / 16, j = e % 16;
    (layout == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.v[i][j];
  }
}
template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float value) {
  detail::converge("fill_fragment");
  for (auto& row : f.v)
    for (float& x : row) x = value;
}
// d = a·b + c
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  detail::converge("mma_sync");
  float out[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = c.v[i][j];
      for (int k = 0; k < 16; ++k) s += a.v[i][k] * b.v[k][j];
      out[i][j] = s;
    }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) d.v[i][j] = out[i][j];
}

}  // namespace nvcuda::wmma
