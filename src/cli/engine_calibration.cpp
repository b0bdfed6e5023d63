// Fitting the CPU efficiency curve to the engine (engine_calibration.h).
#include "cli/engine_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <unistd.h>

#include "cpu/cpu_backend.h"
#if MAESTRO_HAVE_CUDA_BACKEND
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/device_probe.h"
#endif
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
// section on `samples` sequences of `tokens` tokens. With attention's
// efficiency measured, the efficiency of the FLOPs other than attention's,
// in the time left once attention's (at that efficiency) is taken out —
// the cost model charges attention by the measured efficiency, so the
// gemm curve must not count it again.
Point measure(const CalibrationShape& shape, double peak, Backend& backend, const EfficiencyTable& attention) {
  const int64_t hidden = shape.hidden, samples = shape.samples, tokens = shape.tokens;
  const std::string text = fmt::format(
      "section llm {{ model = transformer(layers: 2, hidden: {0}, heads: {4}, ffn: {1}, vocab: 512, max_seq: {2}); "
      "consumes = [text]; loss = cross_entropy; }}\n"
      "data {{ source = synthetic(seed: 1); mix {{ text = 1.0; }} text_tokens = {2}; }}\n"
      "train {{ global_batch = {3}; steps = 10; precision = fp32; }}\n",
      hidden, 3 * hidden, tokens, samples, shape.heads);
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
  double flops = section_flops(section, lens).total(), time = times[times.size() / 2];
  if (!attention.empty()) {
    const double a = 3 * double(samples) * attention_forward_flops(section.model, tokens);  // forward + backward
    flops -= a;
    time = std::max(time - a / (attention.at(double(tokens)) * peak), 0.1 * time);
  }
  return {double(samples * tokens * hidden), flops / time / peak};
}

// Causal attention (q, k, v of `heads` × `head_dim`, no GQA) over
// `sequences` sequences of `tokens` tokens each.
struct AttentionShape {
  int64_t heads, head_dim, tokens, sequences;
};

// Median of 5 timed causal attention forward + backward passes (after 2
// warm-up passes), as the share of `peak` of the FLOPs the planner counts
// for them (graph/counts.h: forward, and backward as twice the forward).
Point measure_attention(const AttentionShape& shape, double peak, Backend& b) {
  const int64_t L = shape.tokens, H = shape.heads, D = shape.head_dim, N = shape.sequences * L;
  const std::string text = fmt::format(
      "section llm {{ model = transformer(layers: 1, hidden: {0}, heads: {1}, ffn: {0}, vocab: 512, max_seq: {2}); "
      "consumes = [text]; loss = cross_entropy; }}\n"
      "data {{ source = synthetic(seed: 1); mix {{ text = 1.0; }} text_tokens = {2}; }}\n"
      "train {{ global_batch = 1; steps = 1; }}\n",
      H * D, H, L);
  Diagnostics diags;
  const std::optional<Program> program = load_program_text(text, "calibration.sect", diags);
  if (!program) throw std::logic_error("attention calibration program does not load");
  const double flops = 3 * double(shape.sequences) * attention_forward_flops(program->sections[0].model, L);

  const size_t nx = size_t(N * H * D);
  std::vector<float> host(nx);
  for (size_t i = 0; i < nx; ++i) host[i] = float(int64_t(i * 2654435761u % 2001) - 1000) * 1e-3f;
  float* q = b.allocate(nx);  // [N, H*D] each; q, k, v share the values
  float* k = b.allocate(nx);
  float* v = b.allocate(nx);
  float* out = b.allocate(nx);
  float* dout = b.allocate(nx);
  float* dq = b.allocate(nx);
  float* dk = b.allocate(nx);
  float* dv = b.allocate(nx);
  float* lse = b.allocate(size_t(N * H));  // [N, H]
  for (float* p : {q, k, v, dout}) b.copy_from_host(p, host.data(), nx * sizeof(float));
  std::vector<int32_t> cu(size_t(shape.sequences + 1));
  for (size_t i = 0; i < cu.size(); ++i) cu[i] = int32_t(int64_t(i) * L);
  float sink = 0;
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.attention_forward(out, lse, q, k, v, cu.data(), shape.sequences, N, H, H, D, true);
    b.attention_backward(Grad::overwrite(dq), Grad::overwrite(dk), Grad::overwrite(dv), dout, out, lse, q, k, v,
                         cu.data(), shape.sequences, N, H, H, D, true);
    b.copy_to_host(&sink, dv, sizeof(float));  // the backend's sync
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (float* p : {q, k, v, out, dout, dq, dk, dv, lse}) b.release(p);
  std::sort(times.begin(), times.end());
  return {double(L), flops / times[times.size() / 2] / peak};
}

}  // namespace

EfficiencyTable measure_attention_efficiency(double peak_flops, Backend& backend, int64_t heads, int64_t head_dim,
                                             const std::vector<int64_t>& lengths, int64_t tokens) {
  EfficiencyTable table;
  for (int64_t L : lengths) {
    const Point p = measure_attention({heads, head_dim, L, std::max<int64_t>(1, tokens / L)}, peak_flops, backend);
    table.points.emplace_back(p.size, std::clamp(p.efficiency, 1e-3, 1.0));
  }
  return table;
}

DeviceSpec calibrate_local_cpu(int threads) {
  DeviceSpec d;
  d.name = "cpu-calibrated";
  d.fp32_flops = measure_sgemm_flops();
  d.bf16_flops = d.fp32_flops;  // the CPU backend computes in fp32 whatever the precision
  d.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  d.memory_bytes_per_s = measure_triad_bytes_per_s();
  const std::unique_ptr<Backend> backend = make_cpu_backend(threads);
  d.attention = measure_attention_efficiency(d.fp32_flops, *backend, 4, 32, {64, 256, 1024, 2048}, 2048);
  d.gemm = fit_engine_efficiency(d.fp32_flops, *backend, {64, 2, 8, 48}, {256, 8, 8, 512}, d.attention);
  return d;
}

#if MAESTRO_HAVE_CUDA_BACKEND
DeviceSpec calibrate_local_gpu(int device) {
  DeviceSpec d;
  d.name = "cuda-calibrated";
  for (const GemmRate& r : measure_gemm_rates(device, true)) d.bf16_flops = std::max(d.bf16_flops, r.flops);
  for (const GemmRate& r : measure_gemm_rates(device, false)) d.fp32_flops = std::max(d.fp32_flops, r.flops);
  d.memory_bytes = device_memory_bytes(device);
  d.memory_bytes_per_s = measure_copy_bandwidth(device);
  d.fused_attention = true;  // the fast attention keeps no s² probabilities (head sizes <= 128)
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = true;
  const std::unique_ptr<Backend> backend = make_cuda_backend(o);
  d.attention = measure_attention_efficiency(d.bf16_flops, *backend, 16, 128, {256, 1024, 4096, 16384}, 16384);
  d.gemm = fit_engine_efficiency(d.bf16_flops, *backend, {512, 4, 4, 512}, {2048, 16, 4, 2048}, d.attention);
  return d;
}
#endif

GemmEfficiency fit_engine_efficiency(double peak_flops, Backend& backend, const CalibrationShape& small_shape,
                                     const CalibrationShape& large_shape, const EfficiencyTable& attention) {
  // 1/e = 1/max + (half/max) · 1/size: a line through the two points.
  const Point small = measure(small_shape, peak_flops, backend, attention);
  const Point large = measure(large_shape, peak_flops, backend, attention);
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
