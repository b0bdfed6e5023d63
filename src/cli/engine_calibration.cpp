// Fitting the CPU efficiency curve to the engine (engine_calibration.h).
#include "cli/engine_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <unistd.h>

#include "cpu/cpu_backend.h"
#include "cpu/machine_probe.h"
#include "dsl/frontend.h"
#include "graph/counts.h"
#include "nn/section_model.h"

namespace maestro {

namespace {

struct Point {
  double size = 0;        // tokens × width of the section's GEMMs
  double efficiency = 0;  // achieved FLOP/s / sgemm peak
};

// Median of 5 timed training steps (after 2 warm-up steps) of a transformer
// section on `samples` sequences of `tokens` tokens.
Point measure(int64_t hidden, int64_t samples, int64_t tokens, double peak, Backend& backend) {
  const std::string text = fmt::format(
      "section llm {{ model = transformer(layers: 2, hidden: {0}, heads: 4, ffn: {1}, vocab: 512, max_seq: {2}); "
      "consumes = [text]; loss = cross_entropy; }}\n"
      "data {{ source = synthetic(seed: 1); mix {{ text = 1.0; }} text_tokens = {2}; }}\n"
      "train {{ global_batch = {3}; steps = 10; precision = fp32; }}\n",
      hidden, 3 * hidden, tokens, samples);
  Diagnostics diags;
  const std::optional<Program> program = load_program_text(text, "calibration.sect", diags);
  if (!program) throw std::logic_error("calibration program does not load");
  const Section& section = program->sections[0];
  SectionModel model(section, backend, 1);
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(samples));
  std::vector<SampleInput> inputs(static_cast<size_t>(samples));
  for (int64_t s = 0; s < samples; ++s) {
    for (int64_t t = 0; t < tokens; ++t) ids[size_t(s)].push_back(int32_t((s * 131 + t * 17) % 512));
    inputs[size_t(s)].tokens = ids[size_t(s)];
  }
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    ForwardOutput out = model.forward(inputs);
    model.loss(*out.context, {}, samples * (tokens - 1));
    model.backward(*out.context, {});
    model.adamw_step(program->train.optimizer, 1e-4);
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const std::vector<int64_t> lens(static_cast<size_t>(samples), tokens);
  const double flops = section_flops(section, lens).total();
  return {double(samples * tokens * hidden), flops / times[times.size() / 2] / peak};
}

}  // namespace

DeviceSpec calibrate_local_cpu(int threads) {
  DeviceSpec d;
  d.name = "cpu-calibrated";
  d.fp32_flops = measure_sgemm_flops();
  d.bf16_flops = d.fp32_flops;  // the CPU backend computes in fp32 whatever the precision
  d.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  d.memory_bytes_per_s = measure_triad_bytes_per_s();
  d.gemm = fit_cpu_efficiency(d.fp32_flops, threads);
  return d;
}

GemmEfficiency fit_cpu_efficiency(double sgemm_peak_flops, int threads) {
  std::unique_ptr<Backend> backend = make_cpu_backend(threads);
  // 1/e = 1/max + (half/max) · 1/size: a line through the two points.
  const Point small = measure(64, 8, 48, sgemm_peak_flops, *backend);
  const Point large = measure(256, 8, 512, sgemm_peak_flops, *backend);
  const double x1 = 1 / small.size, y1 = 1 / small.efficiency, x2 = 1 / large.size, y2 = 1 / large.efficiency;
  const double slope = (y1 - y2) / (x1 - x2), intercept = y2 - slope * x2;
  GemmEfficiency g;
  if (slope <= 0 || intercept <= 0) {  // no fall-off measured: a flat curve at the larger point
    g.max = std::min(1.0, large.efficiency);
    g.half_size = 0;
  } else {
    g.max = std::min(1.0, 1 / intercept);
    g.half_size = slope * g.max;
  }
  return g;
}

}  // namespace maestro
