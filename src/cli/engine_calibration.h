// The CPU efficiency curve from the engine itself: `--calibrate` times real
// training steps (forward, loss, backward, AdamW) of two transformer
// sections on this machine's CPU backend, takes the achieved share of the
// measured sgemm peak at each GEMM size (tokens × width), and fits the
// planner's curve max · size / (size + half_size) through the two points.
// Lives in the CLI because the planner must not include the engine.
#pragma once

#include "nn/backend.h"
#include "plan/devices.h"

namespace maestro {

// This machine's CPU as a device profile (`--calibrate OUT.toml`): the sgemm
// peak and memory bandwidth probed by cpu/machine_probe.h, the physical
// memory, and the gemm curve fitted to the engine's training steps on
// `threads` threads (0 = all cores). Name "cpu-calibrated".
DeviceSpec calibrate_local_cpu(int threads);

// Returns `sgemm_peak`'s device with its gemm curve fitted (docs/planner.md).
GemmEfficiency fit_cpu_efficiency(double sgemm_peak_flops, int threads);

// A 2-layer transformer section the fit times: width, sequences, tokens each.
struct CalibrationShape {
  int64_t hidden, samples, tokens;
};
// The curve through the engine's achieved share of `peak_flops` at two
// shapes, on any backend.
GemmEfficiency fit_engine_efficiency(double peak_flops, Backend& backend, const CalibrationShape& small_shape,
                                     const CalibrationShape& large_shape);

#if MAESTRO_HAVE_CUDA_BACKEND
// CUDA device `device` as a device profile (`--calibrate` with the cuda
// backend): cuBLASLt bf16 and fp32 GEMM peaks over several sizes
// (gpu/cuda/device_probe.h), device-to-device copy bandwidth, memory size,
// and the gemm curve fitted to the engine's training steps on the CUDA
// backend (bf16 GEMMs). Name "cuda-calibrated".
DeviceSpec calibrate_local_gpu(int device);
#endif

}  // namespace maestro
