// bench_engine_step: times training steps of one transformer section on the
// CPU backend — zero grads, forward of one packed micro-batch, the
// cross-entropy loss, backward, one AdamW step — and, with --sgemm, the
// OpenBLAS sgemm rate (the machine's GEMM peak for the achieved-GFLOP/s
// ratio). Prints one JSON line; run.sh interleaves it with torch_step.py.
#include <cblas.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "cpu/cpu_backend.h"
#include "dsl/frontend.h"
#include "graph/counts.h"
#include "nn/section_model.h"

using namespace maestro;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// OpenBLAS's own multi-threaded sgemm GFLOP/s on n×n×n with `threads`
// threads, best of `reps` (the backend keeps OpenBLAS at one thread and
// splits GEMMs itself; this is the machine's GEMM peak to compare with).
double sgemm_gflops(int n, int reps, int threads) {
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t) / 1e9);
  }
  openblas_set_num_threads(1);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 2, hidden = 128, heads = 4, ffn = 384, vocab = 256, samples = 32, tokens = 48;
  int threads = 2, steps = 5, warmup = 2;
  bool sgemm = false;
  CLI::App app{"Time training steps of a transformer section on the CPU backend."};
  app.add_option("--layers", layers);
  app.add_option("--hidden", hidden);
  app.add_option("--heads", heads);
  app.add_option("--ffn", ffn);
  app.add_option("--vocab", vocab);
  app.add_option("--samples", samples);
  app.add_option("--tokens", tokens);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_flag("--sgemm", sgemm, "also measure the sgemm rate");
  CLI11_PARSE(app, argc, argv);

  const std::string text = fmt::format(
      "section llm {{ model = transformer(layers: {}, hidden: {}, heads: {}, ffn: {}, vocab: {}, max_seq: {}); "
      "consumes = [text]; loss = cross_entropy; }}\n"
      "data {{ source = synthetic(seed: 1); mix {{ text = 1.0; }} text_tokens = {}; }}\n"
      "train {{ global_batch = {}; steps = 100; optimizer = adamw(lr: 1e-4); precision = fp32; }}\n",
      layers, hidden, heads, ffn, vocab, tokens, tokens, samples);
  Diagnostics diags;
  const std::optional<Program> program = load_program_text(text, "bench.sect", diags);
  if (!program) {
    diags.render(std::cerr);
    return 2;
  }
  const Section& section = program->sections[0];
  std::unique_ptr<Backend> backend = make_cpu_backend(threads);
  SectionModel model(section, *backend, 1);

  // Token ids: a fixed pseudo-random pattern (the timing does not depend on it).
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(samples), std::vector<int32_t>(static_cast<size_t>(tokens)));
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t t = 0; t < tokens; ++t) ids[size_t(s)][size_t(t)] = int32_t((s * 7919 + t * 104729) % vocab);
  std::vector<SampleInput> inputs(static_cast<size_t>(samples));
  for (int64_t s = 0; s < samples; ++s) inputs[size_t(s)].tokens = ids[size_t(s)];
  const int64_t n_global = samples * (tokens - 1);

  std::vector<double> step_s, losses;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t = Clock::now();
    model.zero_grads();
    ForwardOutput out = model.forward(inputs);
    const double loss = model.loss(*out.context, {}, n_global);
    model.backward(*out.context, {});
    model.adamw_step(program->train.optimizer, 1e-4);
    if (i >= warmup) {
      step_s.push_back(seconds_since(t));
      losses.push_back(loss);
    }
  }
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const std::vector<int64_t> lens(static_cast<size_t>(samples), tokens);
  const double flops = section_flops(section, lens).total();
  nlohmann::ordered_json j;
  j["impl"] = "maestro";
  j["threads"] = backend->threads();
  j["params"] = model.parameter_count();
  j["step_s"] = step_s;
  j["median_s"] = median;
  j["flops_per_step"] = flops;
  j["gflops"] = flops / median / 1e9;
  j["first_loss"] = losses.front();
  if (sgemm) j["sgemm_gflops"] = sgemm_gflops(1024, 5, backend->threads());
  fmt::print("{}\n", j.dump());
  return 0;
}
