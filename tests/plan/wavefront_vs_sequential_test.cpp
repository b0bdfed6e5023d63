// Issue 17: on every workload in models/ (and the InternVL-like one), at 64
// and 1,024 devices, the planner's wavefront plan against the sequential
// baseline (each section alone on all devices with its own best shape, one
// after another, no transfers; as a step can run them: every section's state
// on the devices, an encoder's backward after its consumers'), mean of the
// same sampled steps; the simulator's lower bound never above the iteration.
// Against the ideal sequential baseline (neither rule; baselines.h), where
// the wavefront does not reach it, the test holds the ratio reached
// (docs/planner.md explains each); likewise on internvl_26b against both
// since every search keeps to a tp the model splits over (InternViT-6B's 25
// heads: tp 1 only; docs/planner.md, "The points below parity"). Under a
// sanitizer the longest searches are left to the plain build
// (support/sanitized.h).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "data/sampler.h"
#include "plan/baselines.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/roofline_cost.h"
#include "plan/schedule.h"
#include "plan/simulator.h"
#include "support/sanitized.h"
#include "support/test_programs.h"

namespace maestro {
using namespace maestro::test;
namespace {

// 1.0 within 0.5 %: the wavefront pays the transfers between sections that
// the baselines are not charged.
constexpr double kParity = 0.995;

struct Workload {
  const char* model;
  const char* cluster;
  double ideal_at_least;  // sequential-ideal / wavefront
  double sequential_at_least = kParity;  // sequential / wavefront
};


const Workload kWorkloads[] = {
    {"models/llava15_7b.sect", "configs/h100x64.toml", kParity},
    {"models/llava15_7b.sect", "configs/h100x1024.toml", kParity},
    {"models/omni_7b.sect", "configs/h100x64.toml", kParity},
    {"models/omni_7b.sect", "configs/h100x1024.toml", kParity},
    {"models/kd_70b_to_8b.sect", "configs/h200x64.toml", kParity},
    {"models/kd_70b_to_8b.sect", "configs/h200x1024.toml", kParity},
    // Over these 2 steps 0.934 and 0.998 (the ViT at tp 1, its stages recomputed whole;
    // 0.892 and 0.968 when it could only recompute layer by layer, holding their inputs)
    {"models/internvl_20b.sect", "configs/h100x64.toml", 0.93},
    {"models/internvl_20b.sect", "configs/h100x1024.toml", kParity},
    // 0.910, 0.972 (0.916, 0.979 before attention was costed apart:
    // the plan of then peaks above the device now, docs/PERFORMANCE.md §3)
    {"models/internvl_26b.sect", "configs/h100x64.toml", 0.905, 0.97},
    {"models/internvl_26b.sect", "configs/h100x1024.toml", 0.94, 0.94},    // 0.944, 0.944 (0.966 then)
    {"models/kd_32b_to_1_5b.sect", "configs/h100x64.toml", 0.99},  // 0.995 over 4 steps: memory (docs/planner.md)
    {"models/kd_32b_to_1_5b.sect", "configs/h100x1024.toml", kParity},
    {"models/omni_whisper_7b.sect", "configs/h100x64.toml", kParity},
    {"models/omni_whisper_7b.sect", "configs/h100x1024.toml", kParity},
    {"models/video_7b.sect", "configs/h100x64.toml", kParity},
    {"models/video_7b.sect", "configs/h100x1024.toml", kParity},
    {"models/tiny_mllm.sect", "configs/h100x64.toml", kParity},
    {"models/tiny_mllm.sect", "configs/h100x1024.toml", kParity},
    {"models/tiny_kd.sect", "configs/h100x64.toml", kParity},
    {"models/tiny_kd.sect", "configs/h100x1024.toml", kParity},
};

}  // namespace

BOOST_AUTO_TEST_SUITE(wavefront_vs_sequential)

BOOST_AUTO_TEST_CASE(every_workload_at_64_and_1024_devices) {
  for (const Workload& w : kWorkloads) {
    if (left_to_the_plain_build(w.model, w.cluster)) continue;
    const Program program = load(w.model);
    const SectionGraph g = build_graph(program);
    const Cluster cl = make_cluster(load_runtime_config(w.cluster));
    const RooflineCost cost(g, cl);
    const Sampler sampler(program.data, program.train.global_batch);
    const std::vector<Batch> batches = {sampler.batch(0), sampler.batch(1)};
    PlannerOptions options;
    options.later_batches = {batches[1]};
    const Plan plan = plan_program(g, cl, cost, batches[0], options);
    double wavefront = 0;
    for (const Batch& b : batches) {
      const SimResult r = simulate(g, plan, wavefront_schedule(g, plan, cost, b), cost);
      BOOST_TEST(r.iteration_s >= r.lower_bound_s * (1 - 1e-12));
      for (int64_t bytes : r.peak_memory_bytes)
        BOOST_TEST_CONTEXT(w.model << " on " << w.cluster) { BOOST_TEST(bytes <= cl.device.memory_bytes); }
      wavefront += r.iteration_s / double(batches.size());
    }
    const double sequential = sequential_baseline(g, cl, cost, batches).iteration_s;
    const double ideal = sequential_ideal_baseline(g, cl, cost, batches).iteration_s;
    BOOST_TEST_CONTEXT(w.model << " on " << w.cluster << ": wavefront " << wavefront << " s, sequential "
                                << sequential << " s, sequential-ideal " << ideal << " s") {
      BOOST_TEST(sequential / wavefront >= w.sequential_at_least);
      BOOST_TEST(ideal / wavefront >= w.ideal_at_least);
      BOOST_TEST(sequential >= ideal * (1 - 1e-12));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
