// The CPU efficiency curve from the engine itself: `--calibrate` times real
// training steps (forward, loss, backward, AdamW) of two transformer
// sections on this machine's CPU backend, takes the achieved share of the
// measured sgemm peak at each GEMM size (tokens × width), and fits the
// planner's curve max · size / (size + half_size) through the two points.
// Lives in the CLI because the planner must not include the engine.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/backend.h"
#include "plan/devices.h"

namespace maestro {

// This machine's CPU as a device profile (`--calibrate OUT.toml`): the sgemm
// peak and memory bandwidth probed by cpu/machine_probe.h, the physical
// memory, the gemm curve fitted to the engine's training steps on
// `threads` threads (0 = all cores), and attention's efficiency (4 heads
// of 32; 64 to 2,048 tokens). Name "cpu-calibrated".
DeviceSpec calibrate_local_cpu(int threads);

// A 2-layer transformer section the fit times: width, heads (of the
// attention probe's head size, so that taking attention's time out uses
// the curve measured at that size), sequences, tokens each.
struct CalibrationShape {
  int64_t hidden, heads, samples, tokens;
};
// The curve through the engine's achieved share of `peak_flops` at two
// shapes, on any backend; with a measured `attention` table (not empty) of
// the FLOPs and time left once attention's are taken out.
GemmEfficiency fit_engine_efficiency(double peak_flops, Backend& backend, const CalibrationShape& small_shape,
                                     const CalibrationShape& large_shape, const EfficiencyTable& attention);

// DeviceSpec::attention: the backend's causal attention forward + backward
// (`heads` of `head_dim`, no GQA; the kernel it picks for that length, as
// in training) timed at each of `lengths` over `tokens / length` sequences,
// as shares of `peak_flops` of the FLOPs the planner counts.
EfficiencyTable measure_attention_efficiency(double peak_flops, Backend& backend, int64_t heads, int64_t head_dim,
                                             const std::vector<int64_t>& lengths, int64_t tokens);

#if MAESTRO_HAVE_CUDA_BACKEND
// CUDA device `device` as a device profile (`--calibrate` with the cuda
// backend): cuBLASLt bf16 and fp32 GEMM peaks over several sizes
// (gpu/cuda/device_probe.h), device-to-device copy bandwidth, memory size,
// the gemm curve fitted to the engine's training steps on the CUDA backend
// (bf16 GEMMs), and attention's efficiency (16 heads of 128; 256 to 16,384
// tokens, the kernel Auto picks at each). Name "cuda-calibrated".
DeviceSpec calibrate_local_gpu(int device);
#endif

}  // namespace maestro
