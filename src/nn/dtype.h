// Storage types and places of tensors: the element types a buffer may hold
// (fp32, bf16) and the memory it lives in (host or a CUDA device), shared by
// the engine (nn/), its backends (cpu/, gpu/) and the transport. Header
// only, no dependencies: the bf16 conversions are inline so that a CUDA
// kernel can use the same per-element code (MAESTRO_HD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MAESTRO_HD __host__ __device__
#else
#define MAESTRO_HD
#endif

namespace maestro {

enum class DType : uint8_t { F32, BF16 };

// Where a buffer's bytes are: host memory, or the memory of CUDA device
// `index` (see DeviceId).
enum class Device : uint8_t { Host, Cuda };

inline const char* dtype_name(DType d) { return d == DType::F32 ? "F32" : "BF16"; }  // safetensors spelling
inline size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }                 // bytes per element
inline const char* device_name(Device d) { return d == Device::Host ? "host" : "cuda"; }

// bfloat16 <-> float: the top 16 bits of an IEEE float, rounded to nearest
// even; a NaN stays a (quiet) NaN, infinities stay infinities.
MAESTRO_HD inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

MAESTRO_HD inline float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace maestro
