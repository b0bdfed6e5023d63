// The built-in device table (figures and sources: docs/planner.md).
#include "plan/devices.h"

namespace maestro {

const std::vector<DeviceSpec>& builtin_devices() {
  constexpr double T = 1e12, G = 1e9;
  static const std::vector<DeviceSpec> table = {
      // name    bf16 dense  fp32 (non-tensor)  memory  bandwidth  fused attention  GEMM curve
      {"h100", 989 * T, 67 * T, int64_t(80e9), 3.35e12, true, {}},
      {"h200", 989 * T, 67 * T, int64_t(141e9), 4.8e12, true, {}},
      {"a100", 312 * T, 19.5 * T, int64_t(80e9), 2.0e12, true, {}},
      // One CPU socket's worth, deliberately low; `--calibrate` measures the real one.
      // Its flops are sgemm's own plateau, reached by much smaller GEMMs.
      {"cpu", 100 * G, 100 * G, int64_t(16e9), 20e9, false, {0.9, 16.0 * 1024}},
  };
  return table;
}

const DeviceSpec* find_builtin_device(const std::string& name) {
  for (const DeviceSpec& d : builtin_devices())
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace maestro
