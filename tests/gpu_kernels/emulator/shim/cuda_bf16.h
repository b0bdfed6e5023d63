// The emulator's stand-in for cuda_bf16.h (cuda_emulator.h): __nv_bfloat16
// as storage, converted with nn/dtype.h's rounding (to nearest even), the
// bits the hardware's __float2bfloat16_rn gives.
#pragma once

#include <cstdint>

#include "nn/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {maestro::float_to_bf16(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return maestro::bf16_to_float(b.bits); }
