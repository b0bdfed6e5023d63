// The data loader's throughput on a files(manifest) model: how many samples
// per second StepInputs::step (decode every image and clip of the step,
// CLIP preprocessing, log-mel) delivers through the loader's Prefetcher with
// 1 and 2 threads, against the training step's consumption (measured apart
// by run.sh with maestro-run). Usage: bench_data_loader MODEL.sect STEPS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "actors/run_plan.h"
#include "actors/step_inputs.h"
#include "data/prefetcher.h"
#include "dsl/frontend.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.sect STEPS\n", argv[0]);
    return 2;
  }
  maestro::Diagnostics diags;
  auto program = maestro::load_program(argv[1], diags);
  if (!program) {
    diags.render(std::cerr);
    return 2;
  }
  const int64_t steps = std::atoll(argv[2]);
  const maestro::Program runnable = maestro::cpu_runnable(*program);
  const maestro::SectionGraph graph = maestro::build_graph(runnable);
  const maestro::StepInputs inputs(graph, runnable.data, runnable.train.global_batch);
  const int64_t batch = program->train.global_batch;
  inputs.step(0);  // warm: page cache, FFTW
  for (int threads : {1, 2}) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      maestro::Prefetcher<std::shared_ptr<const maestro::StepData>> p(
          [&](int64_t step, int) { return inputs.step(step); }, steps, threads, 2);
      const auto begin = std::chrono::steady_clock::now();
      size_t samples = 0;
      for (int64_t s = 0; s < steps; ++s) samples += p.get(s)->batch.samples.size();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      best = std::max(best, double(samples) / secs);
    }
    std::printf("loader, %d thread%s: %8.1f samples/s (%lld steps of %lld, best of 3)\n", threads,
                threads > 1 ? "s" : " ", best, (long long)steps, (long long)batch);
  }
  return 0;
}
