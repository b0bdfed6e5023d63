// The built-in device table (figures and sources: docs/planner.md).
#include "plan/devices.h"

#include <cctype>
#include <cmath>

namespace maestro {

double EfficiencyTable::at(double size) const {
  if (points.empty()) return 0;
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second;
  size_t i = 1;
  while (points[i].first < size) ++i;
  const auto [x0, y0] = points[i - 1];
  const auto [x1, y1] = points[i];
  const double t = std::log(size / x0) / std::log(x1 / x0);
  return y0 + t * (y1 - y0);
}

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

const DeviceSpec* builtin_device_for_gpu(std::string_view gpu_name) {
  std::string upper(gpu_name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& [model, name] : {std::pair{"H100", "h100"}, std::pair{"H200", "h200"}, std::pair{"A100", "a100"}}) {
    // The model number as a word of its own: "H100" in "NVIDIA H100 PCIe", not in "GH1000".
    for (size_t at = upper.find(model); at != std::string::npos; at = upper.find(model, at + 1)) {
      const size_t end = at + std::string_view(model).size();
      if ((at == 0 || !std::isalnum(static_cast<unsigned char>(upper[at - 1]))) &&
          (end == upper.size() || !std::isdigit(static_cast<unsigned char>(upper[end]))))
        return find_builtin_device(name);
    }
  }
  return nullptr;
}

}  // namespace maestro
