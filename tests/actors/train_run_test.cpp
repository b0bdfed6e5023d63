// The whole runtime in process (actors/trainer.h): a small multimodal
// program trains for a few steps through the real actors, engine and
// planner; the same run twice gives bitwise-identical losses, dp = 2 agrees
// with dp = 1, a failing run reports its section and exit status, and every
// actor is gone when train() returns (it returns at all: ~actor_system
// waits for every actor, so a leaked one would hang the test).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>

#include "actors/run_plan.h"
#include "actors/trainer.h"
#include "dsl/frontend.h"

using namespace maestro;

namespace {

// An image encoder -> projector -> LLM, small enough for a unit test.
std::string small_mllm(const std::string& llm_parallel) {
  return R"(
section vision {
  model    = vit(layers: 1, hidden: 32, heads: 2, ffn: 64, patch: 4, image: 8);
  consumes = [image];
  micro_batch = 3;
}
section proj { model = mlp(in: 32, out: 32); }
section llm {
  model    = transformer(layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 64, max_seq: 64);
  consumes = [text];
  )" + llm_parallel + R"(
  micro_batch = 4;
  loss     = cross_entropy;
}
flow vision -> proj -> llm;
data {
  source = synthetic(seed: 5);
  mix { image_text = 0.5; text = 0.5; }
  text_tokens = uniform(min: 8, max: 24);
  images = 1;
}
train {
  global_batch = 8;
  steps = 3;
  seed = 2;
  optimizer = adamw(lr: 1e-3);
  precision = fp32;
}
)";
}

Program parse(const std::string& text) {
  Diagnostics diags;
  std::optional<Program> p = load_program_text(text, "small.sect", diags);
  BOOST_REQUIRE_MESSAGE(p.has_value(), "the test program must parse");
  return *p;
}

// The command's path: Program -> runnable program -> graph, inputs, plan -> train.
TrainResult run(const Program& p, const std::string& schedule = "wavefront") {
  const Program runnable = cpu_runnable(p);
  const SectionGraph graph = build_graph(runnable);
  const StepInputs inputs(graph, runnable.data, runnable.train.global_batch);
  const Plan plan = plan_cpu_run(graph, 2, inputs.step(0)->batch);
  TrainOptions opt;
  opt.schedule = schedule;
  opt.threads = 2;
  return train(graph, plan, inputs, runnable.train, opt);
}

}  // namespace

BOOST_AUTO_TEST_CASE(trains_through_the_actors_deterministically) {
  const Program p = parse(small_mllm("parallel { dp = 1; }"));
  const TrainResult a = run(p), b = run(p);
  BOOST_TEST_REQUIRE(a.exit_code == 0, a.error);
  BOOST_TEST_REQUIRE(a.losses.size() == 3u);
  BOOST_TEST(a.samples == 24);
  for (double l : a.losses) BOOST_TEST(std::isfinite(l));
  BOOST_TEST(std::abs(a.losses[0] - std::log(64.0)) < 0.5);  // a fresh model is near uniform
  BOOST_TEST(a.losses == b.losses);                           // bitwise, whatever the arrival order
}

BOOST_AUTO_TEST_CASE(data_parallel_and_monolithic_agree_with_the_default) {
  const TrainResult base = run(parse(small_mllm("parallel { dp = 1; }")));
  const TrainResult dp2 = run(parse(small_mllm("parallel { dp = 2; }")));
  const TrainResult mono = run(parse(small_mllm("parallel { dp = 1; }")), "monolithic");
  BOOST_TEST_REQUIRE(dp2.exit_code == 0, dp2.error);
  BOOST_TEST_REQUIRE(mono.exit_code == 0, mono.error);
  for (size_t i = 0; i < base.losses.size(); ++i) {
    BOOST_TEST(std::abs(dp2.losses[i] - base.losses[i]) <= 1e-5 * std::abs(base.losses[i]));
    BOOST_TEST(std::abs(mono.losses[i] - base.losses[i]) <= 1e-5 * std::abs(base.losses[i]));
  }
}

// ZeRO-1: the same rank-order gradient sums and an elementwise AdamW, so the
// same losses bitwise; each llm replica holds half of the AdamW state.
BOOST_AUTO_TEST_CASE(a_sharded_optimizer_gives_the_unsharded_losses) {
  const std::string text = small_mllm("parallel { dp = 2; }");
  Program sharded = parse(text);
  sharded.train.optimizer.shard = true;
  const TrainResult off = run(parse(text)), on = run(sharded);
  BOOST_TEST_REQUIRE(on.exit_code == 0, on.error);
  BOOST_TEST(on.losses == off.losses);
  bool llm_sharded = false;
  for (const TrainResult::OptimizerMemory& m : on.optimizer_memory) {
    BOOST_TEST(m.sharded == (m.dp > 1), m.part << " dp " << m.dp);  // every train part the plan gives dp > 1
    if (m.sharded) BOOST_TEST(m.bytes_per_replica <= m.unsharded_bytes / 2 + sizeof(float));
    llm_sharded |= m.part == "llm" && m.sharded;
  }
  BOOST_TEST(llm_sharded);
}

BOOST_AUTO_TEST_CASE(errors_name_the_section_and_set_the_exit_status) {
  Program p = parse(small_mllm("parallel { dp = 1; }"));
  p.sections[1].weights = "/nonexistent/proj.safetensors";
  const TrainResult missing = run(p);
  BOOST_TEST(missing.exit_code == 1);
  BOOST_TEST(missing.error.find("proj") != std::string::npos, missing.error);
  try {
    cpu_runnable(parse(small_mllm("parallel { dp = 1; pp = 2; }")));  // one layer
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'llm'") != std::string::npos, e.what());
  }
  const TrainResult bad = run(parse(small_mllm("parallel { dp = 1; }")), "zigzag");
  BOOST_TEST(bad.exit_code == 2);
}

