// The built-in device table: the peak figures the cost model divides work by.
// Sources of every figure are in docs/planner.md ("Device table"). A device
// profile written by `maestro-run --calibrate` has the same fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace maestro {

// Fraction of peak a GEMM reaches, as a function of its size: rows (tokens
// of the micro-batch) × width (hidden / tp). max · size / (size + half_size):
// half of `max` at half_size elements, `max` for large GEMMs. The GPU curve
// is calibrated against Megatron-LM's MFU (docs/planner.md, "Calibration").
struct GemmEfficiency {
  double max = 0.46;
  double half_size = 512.0 * 1024;
  double at(double size) const { return max * size / (size + half_size); }
};

// A share of peak measured at a few sizes: (size, efficiency) pairs with
// ascending sizes. Between two points it is interpolated linearly in
// log(size); outside them it is the nearest point's (measurements, not a
// model: no extrapolation).
struct EfficiencyTable {
  std::vector<std::pair<double, double>> points;
  bool empty() const { return points.empty(); }
  double at(double size) const;
};

struct DeviceSpec {
  std::string name;               // "h100"
  double bf16_flops = 0;          // dense peak, FLOP/s
  double fp32_flops = 0;          // peak for fp32 math, FLOP/s
  int64_t memory_bytes = 0;       // device memory
  double memory_bytes_per_s = 0;  // device memory bandwidth
  // Attention runs as one fused (flash) kernel that keeps no s² probabilities
  // for backward: activations are counts.h's per-token bytes only.
  bool fused_attention = false;
  GemmEfficiency gemm;
  // Attention's share of peak (QKᵀ, softmax, ·V; forward and backward
  // together) by a sequence's tokens, measured by `--calibrate` on the
  // engine's backend at a few lengths (cli/engine_calibration.h). Empty:
  // not measured (the built-in devices): attention runs at the gemm
  // curve's max, plus the shortfall of the micro-batch's longest sequence
  // at its own size (plan/roofline_cost.cpp).
  EfficiencyTable attention = {};
  double flops(bool bf16) const { return bf16 ? bf16_flops : fp32_flops; }
};

// h100 (SXM), h200, a100 (SXM 80 GB), cpu (a conservative default).
const std::vector<DeviceSpec>& builtin_devices();
// nullptr when `name` is not in the table.
const DeviceSpec* find_builtin_device(const std::string& name);
// The table's GPU a CUDA device name is ("NVIDIA H100 80GB HBM3" → h100,
// "NVIDIA H200 NVL" → h200, "NVIDIA A100-SXM4-40GB" → a100; PCIe and NVL
// variants take the SXM figures); nullptr for any other GPU.
const DeviceSpec* builtin_device_for_gpu(std::string_view gpu_name);

}  // namespace maestro
