// The sgemm and triad probes (machine_probe.h).
#include "cpu/machine_probe.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace maestro {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

double measure_sgemm_flops(int n, int reps) {
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 0.5f), c(size_t(n) * n, 0.0f);  // [n, n] each
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * double(n) * n / seconds_since(t));
  }
  if (c[0] != 0.5f * float(n)) throw std::runtime_error("calibration: sgemm computed a wrong product");
  return best;
}

double measure_triad_bytes_per_s(size_t floats, int reps) {
  std::vector<float> a(floats, 0.0f), b(floats, 1.0f), c(floats, 2.0f);  // [floats] each
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const float s = 0.5f + float(rep);
    const auto t = Clock::now();
    for (size_t i = 0; i < floats; ++i) a[i] = b[i] + s * c[i];
    best = std::max(best, 3.0 * sizeof(float) * double(floats) / seconds_since(t));
  }
  if (a[floats / 2] < 0) throw std::runtime_error("calibration: triad produced a negative value");  // keeps `a` alive
  return best;
}

}  // namespace maestro
