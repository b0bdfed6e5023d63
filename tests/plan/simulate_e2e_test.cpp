// End to end: the real maestro-run --simulate --json on every example model
// (found as binary() says): the summary's fields, utilization in (0, 1], iteration ≥ lower
// bound, speedup = baseline / iteration, the simulated peak memory within the
// device; and an infeasible plan exits 2 with
// a message naming the section and the device.
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "support/sanitized.h"

namespace maestro {
namespace {

// The MAESTRO_RUN variable, else the compiled-in path, else the build
// tree's layout: BUILD/tests/plan/test_plan next to BUILD/maestro-run.
std::string binary() {
  if (const char* env = std::getenv("MAESTRO_RUN")) return env;
#ifdef MAESTRO_RUN
  return MAESTRO_RUN;
#else
  const auto beside = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "../../maestro-run";
  BOOST_REQUIRE_MESSAGE(std::filesystem::exists(beside), "maestro-run not found at " + beside.string() +
                                                             " (build it, or set MAESTRO_RUN)");
  return beside.lexically_normal().string();
#endif
}

struct Run {
  int status = -1;
  std::string out;  // stdout and stderr together
};

Run run(const std::string& args) {
  Run r;
  FILE* pipe = popen((binary() + " " + args + " 2>&1").c_str(), "r");
  BOOST_REQUIRE(pipe);
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

nlohmann::json last_line_json(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end - start));
}

void check_summary(const std::string& model, const std::string& config) {
  const Run r = run(model + " --simulate --json --baseline megatron --steps 2 --config " + config);
  BOOST_TEST_CONTEXT(model << " on " << config << ":\n" << r.out) {
    BOOST_REQUIRE(r.status == 0);
    const nlohmann::json j = last_line_json(r.out);
    for (const char* key : {"mode", "devices", "iteration_s", "lower_bound_s", "utilization", "plan", "baseline", "speedup"})
      BOOST_TEST(j.contains(key), key);
    BOOST_TEST(j["mode"] == "simulate");
    const double iteration = j["iteration_s"], lower = j["lower_bound_s"], util = j["utilization"];
    BOOST_TEST(util > 0.0);
    BOOST_TEST(util <= 1.0);
    BOOST_TEST(iteration >= lower);
    BOOST_TEST(j["baseline"]["name"] == "megatron");
    BOOST_TEST(double(j["speedup"]) == double(j["baseline"]["iteration_s"]) / iteration,
               boost::test_tools::tolerance(1e-9));
    // The simulated peak of parameter state and in-flight activations fits
    // the device on every simulated step (the planner fits steps 0-3;
    // omni_whisper_7b on 64 H100 needed 84.6 GB on step 1 before it did).
    BOOST_TEST(int64_t(j["peak_memory_bytes"]) > 0);
    BOOST_TEST(int64_t(j["peak_memory_step"]) >= 0);
    BOOST_TEST(int64_t(j["peak_memory_step"]) < 2);
    BOOST_TEST(j["fits_memory"] == true);
    BOOST_TEST(r.out.find("GB peak on a device (step ") != std::string::npos);
    BOOST_TEST(r.out.find("does not fit") == std::string::npos);
    for (const auto& [name, p] : j["plan"].items()) {
      BOOST_TEST(int64_t(p["devices"]) == int64_t(p["tp"]) * int64_t(p["pp"]) * int64_t(p["dp"]), name);
      BOOST_TEST(int64_t(p["micro_batch"]) >= 1);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulate_e2e)

BOOST_AUTO_TEST_CASE(every_example_on_h100x64) {
  for (const char* m : {"llava15_7b", "omni_7b", "tiny_mllm", "tiny_kd"})
    check_summary(std::string("models/") + m + ".sect", "configs/h100x64.toml");
  // The 70B→8B distillation trains an 8B student with tp=2, pp=1 and no
  // recompute: 72 GB of parameter state per device before activations, so
  // it needs H200s (see the infeasible case below for H100s).
  check_summary("models/kd_70b_to_8b.sect", "configs/h200x64.toml");
}

// A toy chain far below the GEMM curve's half-size, where attention's
// FLOPs per token weigh most: its utilization came out at 108 % when the
// cost model could make a micro-batch cheaper than a sample in it.
BOOST_AUTO_TEST_CASE(a_toy_program_stays_above_its_lower_bound) {
  const std::string model = (std::filesystem::temp_directory_path() / "maestro_toy_chain.sect").string();
  std::ofstream(model) << R"(
section enc {
  model = transformer(layers: 2, hidden: 32, heads: 4, ffn: 64, vocab: 64, max_seq: 256);
  consumes = [text];
}
section proj { model = mlp(in: 32, out: 32); }
section llm {
  model = transformer(layers: 2, hidden: 32, heads: 4, ffn: 64, vocab: 64, max_seq: 256);
  consumes = [text];
  loss = cross_entropy;
}
flow enc -> proj -> llm;
data {
  source = synthetic(seed: 3);
  mix { text = 1.0; }
  text_tokens = lognormal(median: 48, sigma: 0.6, max: 200);
}
train { global_batch = 16; steps = 4; }
)";
  check_summary(model, "configs/h100x64.toml");
  std::filesystem::remove(model);
}

// Issue 18's workloads, each on 64 and on 1,024 H100s (under a sanitizer,
// the longest searches are left to the plain build: support/sanitized.h).
BOOST_AUTO_TEST_CASE(issue18_workloads_on_64_and_1024_h100) {
  for (const char* m : {"internvl_26b", "video_7b", "omni_whisper_7b", "kd_32b_to_1_5b", "kd_70b_to_8b"})
    for (const char* config : {"configs/h100x64.toml", "configs/h100x1024.toml"})
      if (!test::left_to_the_plain_build(m, config)) check_summary(std::string("models/") + m + ".sect", config);
}

BOOST_AUTO_TEST_CASE(sequential_baseline_and_trace) {
  const std::string trace = (std::filesystem::temp_directory_path() / "maestro_simulate_e2e_trace.json").string();
  const Run r = run("models/tiny_mllm.sect --simulate --json --baseline sequential --steps 1 --trace " + trace);
  BOOST_TEST_CONTEXT(r.out) {
    BOOST_REQUIRE(r.status == 0);
    const nlohmann::json j = last_line_json(r.out);
    BOOST_TEST(j["baseline"]["name"] == "sequential");
    std::ifstream in(trace);
    const nlohmann::json t = nlohmann::json::parse(in);
    BOOST_TEST(!t["traceEvents"].empty());
  }
  std::filesystem::remove(trace);
}

// --baseline all: the ladder sequential → sequential-ideal → megatron → megatron-ideal → mimo →
// maestro, each rung's speedup its time over Maestro's; `baseline` and
// `speedup` stay the megatron rung's.
BOOST_AUTO_TEST_CASE(ladder_of_every_baseline) {
  const Run r = run("models/tiny_mllm.sect --simulate --json --baseline all --steps 1");
  BOOST_TEST_CONTEXT(r.out) {
    BOOST_REQUIRE(r.status == 0);
    const nlohmann::json j = last_line_json(r.out);
    BOOST_REQUIRE(j["ladder"].is_array());
    std::vector<std::string> names;
    for (const auto& rung : j["ladder"]) {
      names.push_back(rung["name"]);
      BOOST_TEST(double(rung["iteration_s"]) > 0.0);
      BOOST_TEST(double(rung["speedup"]) == double(rung["iteration_s"]) / double(j["iteration_s"]),
                 boost::test_tools::tolerance(1e-9));
    }
    BOOST_TEST(names == (std::vector<std::string>{"sequential", "sequential-ideal", "megatron", "megatron-ideal", "mimo",
                                                  "maestro"}),
               boost::test_tools::per_element());
    BOOST_TEST(j["baseline"]["name"] == "megatron");
    BOOST_TEST(double(j["speedup"]) == double(j["ladder"][2]["speedup"]), boost::test_tools::tolerance(1e-12));
    BOOST_TEST(std::string(j["ladder"][4]["config"]).find("micro_batch=") != std::string::npos);
  }
  const Run one = run("models/tiny_mllm.sect --simulate --json --baseline mimo --steps 1");
  BOOST_TEST(one.status == 0, one.out);
  BOOST_TEST(last_line_json(one.out)["baseline"]["name"] == "mimo", one.out);
}

// A baseline that fits no device is reported, not an error: kd_70b_to_8b on
// 8 H100 plans and simulates, but a sequential step cannot hold the
// teacher's logits for all 1,024 samples beside both sections' state.
BOOST_AUTO_TEST_CASE(a_baseline_that_does_not_fit_is_reported) {
  const std::string args = "models/kd_70b_to_8b.sect --simulate --json --steps 1 --config configs/h100x8.toml";
  const Run all = run(args + " --baseline all");
  BOOST_TEST_CONTEXT(all.out) {
    BOOST_REQUIRE(all.status == 0);
    BOOST_TEST(all.out.find("sequential       does not fit: sequential baseline: ") != std::string::npos);
    const nlohmann::json j = last_line_json(all.out);
    BOOST_REQUIRE(j["ladder"].size() == 6u);
    BOOST_TEST(j["ladder"][0]["name"] == "sequential");
    BOOST_TEST(j["ladder"][0].contains("error"));
    BOOST_TEST(!j["ladder"][0].contains("speedup"));
    for (size_t k = 1; k < 6; ++k) BOOST_TEST(j["ladder"][k].contains("speedup"), j["ladder"][k]["name"]);
    BOOST_TEST(j["baseline"]["name"] == "megatron");  // `all` reports megatron's speedup
    BOOST_TEST(j.contains("speedup"));
  }
  const Run one = run(args + " --baseline sequential");
  BOOST_TEST_CONTEXT(one.out) {
    BOOST_REQUIRE(one.status == 0);
    const nlohmann::json j = last_line_json(one.out);
    BOOST_TEST(std::string(j["baseline"]["error"]).find("do not fit one h100 (80 GB) together") != std::string::npos);
    BOOST_TEST(!j.contains("speedup"));
  }
}

BOOST_AUTO_TEST_CASE(kd_70b_fits_64_h100s_with_the_sharded_optimizer) {
  // Unsharded the student's 18 B per parameter over tp = 2 is 72.3 GB per
  // device; the planner shards its optimizer state over its dp replicas.
  const Run r = run("models/kd_70b_to_8b.sect --simulate --json --steps 1 --config configs/h100x64.toml");
  BOOST_REQUIRE(r.status == 0);
  const nlohmann::json j = last_line_json(r.out);
  BOOST_TEST(j["plan"]["student"]["shard_optimizer"] == true);
  BOOST_TEST(j["plan"]["teacher"]["shard_optimizer"] == false);  // frozen: no optimizer state
}

// With a baseline, the sections whose tp or pp the program fixes (which
// every baseline tunes freely) are named: omni_7b's LLM (written tp 4, pp
// 2) and its encoders and projectors (the defaults tp 1, pp 1); none of
// kd_32b_to_1_5b's (every degree auto).
BOOST_AUTO_TEST_CASE(a_baseline_names_the_pinned_degrees) {
  const Run r = run("models/omni_7b.sect --simulate --json --steps 1 --baseline megatron --config configs/h100x64.toml");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  BOOST_TEST(r.out.find("\npinned     vision tp 1 pp 1, audio tp 1 pp 1, vision_proj tp 1 pp 1, audio_proj tp 1 pp 1, "
                        "llm tp 4 pp 2: ") != std::string::npos, r.out);
  const nlohmann::json j = last_line_json(r.out);
  BOOST_TEST(j["pinned"]["llm"]["tp"] == 4);
  BOOST_TEST(j["pinned"]["llm"]["pp"] == 2);
  BOOST_TEST(j["pinned"].size() == 5u);
  const Run plain = run("models/omni_7b.sect --simulate --steps 1 --config configs/h100x64.toml");
  BOOST_TEST(plain.out.find("pinned") == std::string::npos, plain.out);  // no baseline: nothing to compare
  const Run free = run("models/kd_32b_to_1_5b.sect --simulate --json --steps 1 --baseline megatron --config configs/h100x64.toml");
  BOOST_REQUIRE_MESSAGE(free.status == 0, free.out);
  BOOST_TEST(free.out.find("\npinned") == std::string::npos, free.out);
  BOOST_TEST(last_line_json(free.out)["pinned"].empty());
}

// `recompute = auto` (internvl_20b's ViT and LLM, written; the projector,
// a trained section feeding the LLM, by default): on 64 H100 the planner
// recomputes the ViT — its 25 heads split over no tp > 1, so its 6B
// parameters sit at tp 1 — each pipeline stage whole (it holds one layer
// input per micro-batch in flight, not one per layer), whose freed memory
// lets the LLM run at tp 4, and not the LLM (docs/planner.md); `--print
// json` keeps "auto". Left to the plain build under a sanitizer
// (support/sanitized.h).
BOOST_AUTO_TEST_CASE(internvl_20b_recomputes_its_vit_on_64_h100s) {
  if (test::left_to_the_plain_build("internvl_20b", "h100x64")) {
    BOOST_TEST_MESSAGE("sanitized: left to the plain build");
    return;
  }
  const Run r = run("models/internvl_20b.sect --simulate --json --steps 1 --config configs/h100x64.toml");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  const nlohmann::json j = last_line_json(r.out);
  BOOST_TEST(j["plan"]["vision"]["tp"] == 1, r.out);
  BOOST_TEST(j["plan"]["vision"]["recompute_stage"] == true, r.out);
  BOOST_TEST(j["plan"]["vision"]["recompute"] == 0, r.out);  // no layer keeps its own input
  BOOST_TEST(j["plan"]["llm"]["recompute"] == 0, r.out);
  BOOST_TEST(j["plan"]["llm"]["recompute_stage"] == false, r.out);
  BOOST_TEST(j["plan"]["llm"]["tp"] == 4, r.out);
  const Run p = run("models/internvl_20b.sect --print json");
  BOOST_REQUIRE(p.status == 0);
  const nlohmann::json program = nlohmann::json::parse(p.out);
  for (const auto& s : program["sections"])
    BOOST_TEST(s["recompute"] == "auto", p.out);
}

// `recompute` not written on a trained section that feeds another is
// `auto` (docs/language.md): omni_7b's ViT on one node of 8 H100 holds
// 47 GB of activations per device waiting for the LLM's backward unless it
// recomputes; by default the planner recomputes it, and the step is faster
// than with `recompute = false` written (19.40 against 20.38 s).
BOOST_AUTO_TEST_CASE(a_trained_encoder_recomputes_by_default_on_8_h100s) {
  const Run r = run("models/omni_7b.sect --simulate --json --steps 1 --config configs/h100x8.toml");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  const nlohmann::json j = last_line_json(r.out);
  BOOST_TEST(j["plan"]["vision"]["recompute"].get<int64_t>() > 0, r.out);
  BOOST_TEST(j["plan"]["llm"]["recompute"] == 0, r.out);  // a sink: off unless written

  std::ifstream in("models/omni_7b.sect");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"import \"common/encoders.sect\";",
                                                                     "import \"" +
                                                                         std::filesystem::absolute("models/common/encoders.sect").string() +
                                                                         "\";"},
                                 {"  consumes = [image];", "  consumes = [image];\n  recompute = false;"}}) {
    BOOST_REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
  }
  const std::string model = (std::filesystem::temp_directory_path() / "maestro_omni_vit_no_recompute.sect").string();
  std::ofstream(model) << text;
  const Run off = run(model + " --simulate --json --steps 1 --config configs/h100x8.toml");
  std::filesystem::remove(model);
  BOOST_REQUIRE_MESSAGE(off.status == 0, off.out);
  const nlohmann::json k = last_line_json(off.out);
  BOOST_TEST(k["plan"]["vision"]["recompute"] == 0, off.out);
  BOOST_TEST(k["iteration_s"].get<double>() > 1.02 * j["iteration_s"].get<double>(), r.out + off.out);
}

BOOST_AUTO_TEST_CASE(infeasible_plans_exit_2_with_the_reason) {
  // The student pinned to one replica cannot shard its optimizer state.
  std::ifstream in("models/kd_70b_to_8b.sect");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "parallel { tp = 2; dp = auto; }";
  BOOST_REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "parallel { tp = 2; dp = 1; }");
  const std::string model = (std::filesystem::temp_directory_path() / "maestro_kd_one_replica.sect").string();
  std::ofstream(model) << text;
  const Run r = run(model + " --simulate --json --config configs/h100x64.toml");
  BOOST_TEST(r.status == 2, r.out);
  BOOST_TEST(r.out.find("section 'student': 72.3 GB of weights") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("exceeds h100's 80 GB") != std::string::npos, r.out);
  const Run p = run(model + " --print plan --config configs/h100x64.toml");
  BOOST_TEST(p.status == 2, p.out);
  std::filesystem::remove(model);
}

BOOST_AUTO_TEST_CASE(print_plan_and_schedule) {
  const Run plan = run("models/llava15_7b.sect --print plan --config configs/h100x64.toml");
  BOOST_TEST(plan.status == 0, plan.out);
  BOOST_TEST(plan.out.find("llm") != std::string::npos);
  const Run sch = run("models/tiny_mllm.sect --print schedule");
  BOOST_TEST(sch.status == 0, sch.out);
  BOOST_TEST(sch.out.find("wave 0:") != std::string::npos, sch.out);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
