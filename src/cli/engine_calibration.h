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
// memory, the gemm curve fitted to the engine's training steps on
// `threads` threads (0 = all cores), and the attention curve (4 heads of
// 32; 128 and 512 tokens). Name "cpu-calibrated".
DeviceSpec calibrate_local_cpu(int threads);

// A 2-layer transformer section the fit times: width, heads (of the
// attention probe's head size, so that taking attention's time out uses
// the curve measured at that size), sequences, tokens each.
struct CalibrationShape {
  int64_t hidden, heads, samples, tokens;
};
// The curve through the engine's achieved share of `peak_flops` at two
// shapes, on any backend; with a measured `attention` curve (max > 0) of
// the FLOPs and time left once attention's are taken out.
GemmEfficiency fit_engine_efficiency(double peak_flops, Backend& backend, const CalibrationShape& small_shape,
                                     const CalibrationShape& large_shape, const GemmEfficiency& attention);

// Causal attention (q, k, v of `heads` × `head_dim`, no GQA) over
// `sequences` sequences of `tokens` tokens each.
struct AttentionShape {
  int64_t heads, head_dim, tokens, sequences;
};
// DeviceSpec::attention: the backend's attention forward + backward timed at
// two sequence lengths, as shares of `peak_flops` of the FLOPs the planner
// counts, and the same curve through them (size = a sequence's tokens).
GemmEfficiency fit_attention_efficiency(double peak_flops, Backend& backend, const AttentionShape& short_shape,
                                        const AttentionShape& long_shape);

#if MAESTRO_HAVE_CUDA_BACKEND
// CUDA device `device` as a device profile (`--calibrate` with the cuda
// backend): cuBLASLt bf16 and fp32 GEMM peaks over several sizes
// (gpu/cuda/device_probe.h), device-to-device copy bandwidth, memory size,
// the gemm curve fitted to the engine's training steps on the CUDA backend
// (bf16 GEMMs), and the attention curve of the backend's default attention
// (16 heads of 128; 512 and 2,048 tokens). Name "cuda-calibrated".
DeviceSpec calibrate_local_gpu(int device);
#endif

}  // namespace maestro
