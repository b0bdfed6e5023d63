// CPU calibration (see calibrate.h): the best of several timed 2048³ sgemm
// calls and of several a[i] = b[i] + s·c[i] passes over 3 × 64 MiB arrays.
#include "plan/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include <cblas.h>

#include "plan/devices.h"

namespace maestro {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double sgemm_flops() {
  constexpr int n = 2048;
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 0.5f), c(size_t(n) * n, 0.0f);  // [n, n] each
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * double(n) * n / seconds_since(t));
  }
  return best;
}

double triad_bytes_per_s() {
  constexpr size_t n = size_t(16) << 20;  // 16 Mi floats = 64 MiB per array
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const float s = 0.5f + float(rep);
    const auto t = Clock::now();
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    best = std::max(best, 3.0 * sizeof(float) * double(n) / seconds_since(t));
  }
  if (a[n / 2] < 0) throw std::runtime_error("calibration: triad produced a negative value");  // keeps `a` alive
  return best;
}

}  // namespace

DeviceSpec measure_local_cpu() {
  DeviceSpec d;
  d.name = "cpu-calibrated";
  d.fp32_flops = sgemm_flops();
  d.bf16_flops = d.fp32_flops;  // the CPU backend computes in fp32 whatever the precision
  d.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  d.memory_bytes_per_s = triad_bytes_per_s();
  d.gemm = find_builtin_device("cpu")->gemm;  // fp32_flops is already sgemm's plateau
  return d;
}

}  // namespace maestro
