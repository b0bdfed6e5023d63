// maestro-run end to end: every example model through --check and --print,
// the whole invalid corpus, and bad command lines and config files. Runs
// from the repository root (ctest's working directory).
#define BOOST_TEST_MODULE e2e
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include <fmt/format.h>

#include "run_process.h"

using namespace maestro::e2e;
namespace fs = std::filesystem;

namespace {

// models/*.sect as repository-relative paths, sorted.
std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) files.push_back(dir + "/" + e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = (fs::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(command_line)

BOOST_AUTO_TEST_CASE(help_lists_the_flags) {
  const ProcessResult r = maestro_run({"--help"});
  BOOST_TEST(r.status == 0);
  for (const char* flag : {"--config", "--check", "--print", "--simulate", "--baseline", "--schedule", "--steps",
                           "--stop-after", "--resume", "--trace", "--repl", "--json", "--quiet", "--calibrate",
                           "--version"})
    BOOST_TEST(r.out.find(flag) != std::string::npos, flag);
}

BOOST_AUTO_TEST_CASE(version) {
  const ProcessResult r = maestro_run({"--version"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.out == "maestro-run 0.1.0\n");
}

BOOST_AUTO_TEST_CASE(bad_command_lines_exit_2_with_usage) {
  const std::vector<std::vector<std::string>> bad = {
      {"models/tiny_mllm.sect", "--bogus"},
      {"models/tiny_mllm.sect", "--print", "graphs"},
      {"models/tiny_mllm.sect", "--baseline", "megatron"},
      {"models/tiny_mllm.sect", "--simulate", "--baseline", "fastest"},
      {"models/tiny_mllm.sect", "--schedule", "random"},
      {"models/tiny_mllm.sect", "--log-level", "verbose"},
      {"models/tiny_mllm.sect", "--steps", "0"},
      {"models/tiny_mllm.sect", "--steps", "ten"},
      {"models/tiny_mllm.sect", "--stop-after", "0"},
      {"models/tiny_mllm.sect", "--check", "--stop-after", "2"},
      {"models/tiny_mllm.sect", "--simulate", "--stop-after", "2"},
      {"models/tiny_mllm.sect", "--check", "--simulate"},
      {"models/tiny_mllm.sect", "extra.sect"},
      {"--check"},
  };
  for (const auto& args : bad) {
    const ProcessResult r = maestro_run(args);
    BOOST_TEST(r.status == 2, args.back());
    BOOST_TEST(r.out.empty(), args.back());
    BOOST_TEST(r.err.find("usage: maestro-run") != std::string::npos, args.back());
  }
}

BOOST_AUTO_TEST_CASE(missing_model_file) {
  const ProcessResult r = maestro_run({"models/no_such_model.sect", "--check"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.empty());
  BOOST_TEST(r.first_err_line().find("models/no_such_model.sect") == 0u, r.err);
}

BOOST_AUTO_TEST_CASE(bad_config_file) {
  const std::string path = write_temp("maestro_e2e_bad.toml", "[runtime]\nthreads = 2\nbackend = \"gpu\"\n");
  const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--config", path, "--check"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.empty());
  BOOST_TEST(r.first_err_line() == path + ":3:11: error: 'backend' must be one of auto, cpu, cuda, got \"gpu\"");
  const ProcessResult missing = maestro_run({"models/tiny_mllm.sect", "--config", "/nonexistent.toml", "--check"});
  BOOST_TEST(missing.status == 2);
  BOOST_TEST(missing.first_err_line().find("/nonexistent.toml: error:") == 0u, missing.err);
}

// Limits and mistakes of issue 11: each a plain or located message, status 2.
BOOST_AUTO_TEST_CASE(limits_and_mistakes_are_plain_errors) {
  struct Case {
    std::vector<std::string> args;
    std::string first_line;
  };
  const std::string threads = write_temp("maestro_e2e_threads.toml", "[runtime]\nthreads = 100000\n");
  const std::string devices = write_temp("maestro_e2e_devices.toml", "[cluster]\ndevices = 1000000000\n");
  const std::string profile = write_temp("maestro_e2e_profile.toml", "[cluster]\ndevice = \"no_such_gpu.toml\"\n");
  const std::string big = write_temp("maestro_e2e_big.sect", "// " + std::string(size_t(1) << 20, 'x') + "\n");
  const std::string tmp = fs::temp_directory_path().string();
  const std::string half = "// " + std::string(size_t(600) << 10, 'x') + "\n";  // two of them pass 1 MiB together
  write_temp("maestro_e2e_half_a.sect", half);
  write_temp("maestro_e2e_half_b.sect", half);
  const std::string imports = write_temp(
      "maestro_e2e_imports.sect", "import \"maestro_e2e_half_a.sect\";\nimport \"maestro_e2e_half_b.sect\";\n");
  const std::string profile_path = (fs::path(profile).parent_path() / "no_such_gpu.toml").string();
  const std::vector<Case> cases = {
      {{"models/tiny_mllm.sect", "--steps", "0"},
       "maestro-run: error: --steps: must be a whole number from 1 to 1000000000, not '0'"},
      {{"models/tiny_mllm.sect", "--steps", "1e20"},
       "maestro-run: error: --steps: must be a whole number from 1 to 1000000000, not '1e20'"},
      {{"models/tiny_mllm.sect", "--config", tmp, "--check"}, tmp + ": error: is a folder, not a config file"},
      {{"models/tiny_mllm.sect", "--config", threads, "--check"},
       threads + ":2:11: error: 'threads' must be at most 256, got 100000"},
      {{"models/tiny_mllm.sect", "--config", devices, "--print", "plan"},
       devices + ":2:11: error: 'devices' must be at most 65536, got 1000000000"},
      {{"models/tiny_mllm.sect", "--config", profile, "--print", "plan"},
       profile + ":2:10: error: the device profile '" + profile_path +
           "' does not exist (a path is relative to this file; write one with --calibrate)"},
      {{"models/tiny_mllm.sect", "--config", profile, "--steps", "1"},
       profile + ":2:10: error: the device profile '" + profile_path +
           "' does not exist (a path is relative to this file; write one with --calibrate)"},
      {{big, "--check"},
       big + ": error: cannot read this file (it is 1048580 bytes; a source file may be at most 1 MiB (1048576 bytes))"},
  };
  for (const Case& c : cases) {
    const ProcessResult r = maestro_run(c.args);
    BOOST_TEST(r.status == 2, c.args.back() << ": " << r.err);
    BOOST_TEST(r.out.empty(), c.args.back());
    BOOST_TEST(r.first_err_line() == c.first_line);
  }
  const ProcessResult r = maestro_run({imports, "--check"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err.find(imports + ":2:8: error: cannot read imported file \"maestro_e2e_half_b.sect\": the program's "
                        "files would be 1228876 bytes; together they may be at most 1 MiB (1048576 bytes)\n") !=
                 std::string::npos,
             r.err);
}

// configs/default.toml is every default: --print plan without a config plans
// for the same cluster (8 × h100, docs/planner.md) as with it.
BOOST_AUTO_TEST_CASE(print_plan_default_config_agrees) {
  const ProcessResult bare = maestro_run({"models/tiny_mllm.sect", "--print", "plan"});
  const ProcessResult with = maestro_run({"models/tiny_mllm.sect", "--config", "configs/default.toml", "--print", "plan"});
  BOOST_TEST(bare.status == 0, bare.err);
  BOOST_TEST(bare.out == with.out);
  BOOST_TEST(bare.out.find(" on 8 × h100 ") != std::string::npos, bare.out);
}

// The schedule levers the planner chose: --print plan names them on and
// off, --simulate --json gives each with the in-flight cap; tiny_mllm on
// 64 H100 is planned with consumer groups (docs/scheduler.md step 4).
BOOST_AUTO_TEST_CASE(the_plans_schedule_levers_are_shown) {
  const ProcessResult plan = maestro_run({"models/tiny_mllm.sect", "--config", "configs/h100x64.toml", "--print", "plan"});
  BOOST_TEST_REQUIRE(plan.status == 0, plan.err);
  std::smatch m;
  BOOST_TEST_REQUIRE(std::regex_search(plan.out, m, std::regex("\\nschedule levers: on ([a-z_, ]+); off ([a-z_, ]+)\\n")),
                     plan.out);
  const std::string on = ", " + m[1].str() + ",", off = ", " + m[2].str() + ",";
  BOOST_TEST(on.find(", consumer_groups,") != std::string::npos, plan.out);
  BOOST_TEST(off.find(", overlap_grad_sync,") != std::string::npos, plan.out);
  const ProcessResult sim =
      maestro_run({"models/tiny_mllm.sect", "--config", "configs/h100x64.toml", "--simulate", "--json", "--steps", "1"});
  BOOST_TEST_REQUIRE(sim.status == 0, sim.err);
  const nlohmann::json j = nlohmann::json::parse(last_line(sim.out));
  BOOST_TEST_REQUIRE(j["levers"].size() == 7u, sim.out);
  for (const auto& [name, set] : j["levers"].items())
    BOOST_TEST((set.get<bool>() ? on : off).find(", " + name + ",") != std::string::npos, name);
  BOOST_TEST(plan.out.find(fmt::format("in-flight cap: {} micro-batches", j["in_flight_cap"].get<int64_t>())) !=
                 std::string::npos,
             plan.out);
}

// [cluster] hosts name the nodes: --print plan lists them and each
// section's hosts, --simulate --json gives each section's host list; hosts
// that disagree with nodes are an error at the key.
BOOST_AUTO_TEST_CASE(cluster_hosts_name_each_sections_nodes) {
  const std::string hosts = write_temp("maestro_e2e_hosts.toml",
                                       "[cluster]\ndevice = \"h100\"\ndevices_per_node = 8\n"
                                       "hosts = [\"gpu01\", \"gpu02\", \"gpu03\", \"gpu04\"]\n");
  const ProcessResult plan = maestro_run({"models/llava15_7b.sect", "--config", hosts, "--print", "plan"});
  BOOST_TEST_REQUIRE(plan.status == 0, plan.err);
  BOOST_TEST(plan.out.find(" on 32 × h100 (4 nodes of 8: gpu01, gpu02, gpu03, gpu04; ") != std::string::npos, plan.out);
  BOOST_TEST(std::regex_search(plan.out, std::regex("\\n(section .* step est\\.)   hosts\\n")), plan.out);
  BOOST_TEST(std::regex_search(plan.out, std::regex("\\nllm .* 0-31 .* gpu01\\.\\.gpu04")), plan.out);
  const ProcessResult sim = maestro_run({"models/llava15_7b.sect", "--config", hosts, "--simulate", "--json"});
  BOOST_TEST_REQUIRE(sim.status == 0, sim.err);
  const nlohmann::json j = nlohmann::json::parse(last_line(sim.out));
  BOOST_TEST(j["devices"] == 32);
  for (const auto& [section, sp] : j["plan"].items()) BOOST_TEST(!sp.value("hosts", nlohmann::json::array()).empty(), section);
  BOOST_TEST((j["plan"]["llm"]["hosts"] == nlohmann::json({"gpu01", "gpu02", "gpu03", "gpu04"})), sim.out);
  const std::string mismatch = write_temp("maestro_e2e_hosts_bad.toml", "[cluster]\nnodes = 2\nhosts = [\"a\"]\n");
  const ProcessResult bad = maestro_run({"models/llava15_7b.sect", "--config", mismatch, "--print", "plan"});
  BOOST_TEST(bad.status == 2);
  BOOST_TEST(bad.out.empty());
  BOOST_TEST(bad.first_err_line() == mismatch + ":2:9: error: 'nodes' = 2 but 'hosts' names 1 (one per node)");
}

// The status line (cli/status_line.h): on a terminal's stderr while the
// plan commands work, erased before the output, which is byte for byte the
// output without a terminal; nothing on stderr that is not a terminal, and
// nothing with --quiet. `script` (util-linux, in every Debian) runs the
// command on a terminal and records what it wrote there.
BOOST_AUTO_TEST_CASE(status_line_on_a_terminal_only) {
  const std::string script = find_on_path("script");
  BOOST_TEST_REQUIRE(!script.empty(), "script (util-linux) is not on PATH");
  const std::vector<std::string> args = {"models/llava15_7b.sect", "--simulate", "--baseline", "megatron"};
  const ProcessResult plain = maestro_run(args);
  BOOST_TEST_REQUIRE(plain.status == 0, plain.err);
  BOOST_TEST(plain.err.empty(), plain.err);
  auto on_terminal = [&](const std::string& extra, std::string& out) {
    const std::string dir = (fs::temp_directory_path() / "maestro_e2e_status").string();
    fs::create_directories(dir);
    std::string command = "'" + maestro_run_path() + "'";
    for (const std::string& a : args) command += " '" + a + "'";
    command += extra + " > '" + dir + "/out'";
    const ProcessResult r = run_process({script, "-qec", command, dir + "/terminal"});
    BOOST_TEST(r.status == 0, r.out + r.err);
    std::ifstream o(dir + "/out"), t(dir + "/terminal");
    out.assign(std::istreambuf_iterator<char>(o), {});
    return std::string(std::istreambuf_iterator<char>(t), {});
  };
  std::string out;
  const std::string terminal = on_terminal("", out);
  BOOST_TEST(out == plain.out);
  for (const char* phase : {"maestro-run: planning on 8 devices (", "maestro-run: simulating step 4 of 4 (",
                            "maestro-run: baseline megatron ("})
    BOOST_TEST(terminal.find(phase) != std::string::npos, phase << " not in " << terminal);
  const size_t last = terminal.rfind("maestro-run: ");
  BOOST_TEST((last != std::string::npos && terminal.find("\r\033[K", last) != std::string::npos), terminal);
  const std::string quiet = on_terminal(" --quiet", out);
  BOOST_TEST(out == plain.out);
  BOOST_TEST(quiet.find("maestro-run: ") == std::string::npos, quiet);
}

// One error format: a located error of the planner reads FILE:LINE:COL: error:.
BOOST_AUTO_TEST_CASE(located_runtime_errors_use_the_one_format) {
  std::ifstream in("models/tiny_mllm.sect");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "parallel { dp = auto; }";
  BOOST_TEST_REQUIRE(text.find(from) != std::string::npos);
  const size_t at = text.find(from);
  text.replace(at, from.size(), "parallel { dp = auto; pp = 3; }");  // 2 layers
  const std::string path = write_temp("maestro_e2e_pp.sect", text);
  const ProcessResult r = maestro_run({path, "--steps", "1", "--quiet"});
  BOOST_TEST(r.status == 2, r.err);
  const std::string rest = r.first_err_line().substr(std::min(r.err.size(), path.size()));
  BOOST_TEST(r.first_err_line().find(path) == 0u, r.err);
  BOOST_TEST(std::regex_match(rest, std::regex(R"(:\d+:\d+: error: section 'llm': pp = 3: .+)")), r.err);
}

// A pixel-shuffled vit and synthetic video frames train for real: tiny_mllm
// with pixel_shuffle 0.5 (16 px images of 4 px patches: 4 tokens of 4·64)
// and a video_text share of 2–4 frames.
BOOST_AUTO_TEST_CASE(pixel_shuffle_and_video_frames_train) {
  std::ifstream in("models/tiny_mllm.sect");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"patch: 4, image: 16);", "patch: 4, image: 16, pixel_shuffle: 0.5);"},
      {"section vision_proj {\n  model = mlp(in: 64,", "section vision_proj {\n  model = mlp(in: 256,"},
      {"mix { image_text = 0.5;", "mix { video_text = 0.1; image_text = 0.4;"},
      {"  images       = 1;", "  images       = 1;\n  video_frames = uniform(min: 2, max: 4);"}};
  for (const auto& [from, to] : edits) {
    BOOST_TEST_REQUIRE(text.find(from) != std::string::npos, from);
    text.replace(text.find(from), from.size(), to);
  }
  const std::string path = write_temp("maestro_e2e_shuffle.sect", text);
  const ProcessResult check = maestro_run({path, "--print", "graph"});
  BOOST_TEST(check.out.find("shuffle 1/2 -> 4 tokens x 256") != std::string::npos, check.out);
  const ProcessResult r = maestro_run({path, "--steps", "2"});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.find("trained 2 steps") != std::string::npos, r.out);
}

// `recompute = N` trains for real, through the planner's CPU plan and the
// section runners: tiny_mllm with 1 of its LLM's 2 layers recomputed, and
// with all of them (true), gives the plain run's losses exactly (the same
// ops on the same inputs); `--print graph` shows the count.
BOOST_AUTO_TEST_CASE(recomputing_some_or_all_layers_trains_to_the_same_losses) {
  std::ifstream in("models/tiny_mllm.sect");
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "vocab: 256, max_seq: 512);";
  BOOST_TEST_REQUIRE(base.find(from) != std::string::npos);
  auto losses = [&](const std::string& value) {
    std::string text = base;
    if (!value.empty()) text.replace(text.find(from), from.size(), from + "\n  recompute = " + value + ";");
    const std::string path = write_temp("maestro_e2e_recompute.sect", text);
    if (value == "1") {
      const ProcessResult graph = maestro_run({path, "--print", "graph"});
      BOOST_TEST(graph.out.find("(recompute 1/2)") != std::string::npos, graph.out);
    }
    const ProcessResult r = maestro_run({path, "--steps", "2", "--json", "--quiet"});
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    return nlohmann::json::parse(last_line(r.out)).at("losses").get<std::vector<double>>();
  };
  const std::vector<double> plain = losses("");
  BOOST_TEST(plain.size() == 2u);
  BOOST_TEST(losses("1") == plain, boost::test_tools::per_element());
  BOOST_TEST(losses("true") == plain, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(good_config_file) {
  const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--config", "configs/default.toml", "--check"});
  BOOST_TEST(r.status == 0, r.err);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(examples)

BOOST_AUTO_TEST_CASE(check_every_model) {
  const auto models = files_in("models", ".sect");
  BOOST_TEST(models.size() >= 5u);
  for (const auto& model : models) {
    const ProcessResult r = maestro_run({model, "--check"});
    BOOST_TEST(r.status == 0, model << ": " << r.err);
    BOOST_TEST(r.err.empty(), model);
    BOOST_TEST(r.out.find("ok: " + model + " — ") == 0u, r.out);
    BOOST_TEST(std::count(r.out.begin(), r.out.end(), '\n') == 1, r.out);
  }
}

// The README's "language in 30 seconds" program is what a new user copies
// first: it must pass --check as printed (its comment once showed a
// files("...") call that the checker refuses).
BOOST_AUTO_TEST_CASE(the_readme_program_checks) {
  std::ifstream in("README.md");
  const std::string readme{std::istreambuf_iterator<char>(in), {}};
  const size_t heading = readme.find("## The language in 30 seconds");
  BOOST_REQUIRE(heading != std::string::npos);
  const size_t begin = readme.find("```\n", heading);
  BOOST_REQUIRE(begin != std::string::npos);
  const size_t end = readme.find("```", begin + 4);
  BOOST_REQUIRE(end != std::string::npos);
  const std::string program = readme.substr(begin + 4, end - begin - 4);
  const ProcessResult r = maestro_run({write_temp("readme.sect", program), "--check"});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.find("3 sections, 2 flows") != std::string::npos, r.out);
  // the alternative its comment names checks too
  const size_t synthetic = program.find("source = synthetic(seed: 7);");
  const size_t files = program.find("// or files(manifest: \"train.jsonl\")");
  BOOST_REQUIRE(synthetic != std::string::npos);
  BOOST_REQUIRE(files != std::string::npos);
  std::string with_files = program;
  with_files.replace(synthetic, std::string("source = synthetic(seed: 7);").size(),
                     "source = files(manifest: \"train.jsonl\");");  // --check does not read the manifest
  const ProcessResult f = maestro_run({write_temp("readme_files.sect", with_files), "--check"});
  BOOST_TEST(f.status == 0, f.err);
}

BOOST_AUTO_TEST_CASE(check_json_on_every_model) {
  for (const auto& model : files_in("models", ".sect")) {
    const ProcessResult r = maestro_run({model, "--check", "--json"});
    BOOST_TEST(r.status == 0, model);
    const auto j = nlohmann::json::parse(last_line(r.out));
    BOOST_TEST(j["mode"] == "check");
    int64_t sum = 0;
    for (const auto& [name, n] : j["params"].items()) sum += n.get<int64_t>();
    BOOST_TEST(j["total_params"].get<int64_t>() == sum, model);
    BOOST_TEST(j["sections"].get<size_t>() == j["params"].size(), model);
  }
}

BOOST_AUTO_TEST_CASE(check_json_values) {
  ProcessResult r = maestro_run({"models/llava15_7b.sect", "--check", "--json"});
  auto j = nlohmann::json::parse(last_line(r.out));
  BOOST_TEST(j["sections"] == 3);
  BOOST_TEST(j["flows"] == 2);
  BOOST_TEST(j["params"]["vision"] == 303'507'456);     // CLIP ViT-L/14-336
  BOOST_TEST(j["params"]["projector"] == 20'979'712);   // LLaVA-1.5 mm_projector
  BOOST_TEST(j["params"]["llm"] == 6'738'415'616);      // Llama-2-7B / Vicuna-7B
  BOOST_TEST(j["total_params"] == 303'507'456LL + 20'979'712LL + 6'738'415'616LL);
  BOOST_TEST((j["backend"] == "cpu" || j["backend"] == "cuda"));
  r = maestro_run({"models/kd_70b_to_8b.sect", "--check", "--json"});
  j = nlohmann::json::parse(last_line(r.out));
  BOOST_TEST(j["params"]["teacher"] == 70'553'706'496LL);  // Llama-3-70B
  BOOST_TEST(j["params"]["student"] == 8'030'261'248LL);   // Llama-3-8B
  // InternVL-Chat-V1.5 (26B), published 25.5 B: docs/graph.md
  r = maestro_run({"models/internvl_26b.sect", "--check", "--json"});
  j = nlohmann::json::parse(last_line(r.out));
  BOOST_TEST(j["params"]["vision"] == 5'536'649'600LL);   // InternViT-6B-448px-V1.5, published 5,540 M
  BOOST_TEST(j["params"]["llm"] == 19'861'149'696LL);     // InternLM2-20B
  BOOST_TEST(std::abs(j["total_params"].get<double>() - 25.5e9) / 25.5e9 <= 0.002);
  // the pixel shuffle shows in --print graph and --print json
  r = maestro_run({"models/internvl_26b.sect", "--print", "graph"});
  BOOST_TEST(r.out.find("shuffle 1/2 -> 256 tokens x 12800") != std::string::npos, r.out);
  r = maestro_run({"models/internvl_26b.sect", "--print", "json"});
  j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["sections"][0]["model"]["pixel_shuffle"] == 0.5);
  BOOST_TEST(j["sections"][0]["model"]["tokens_per_image"] == 256);
  r = maestro_run({"models/video_7b.sect", "--print", "json"});
  j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["data"]["video_frames"]["min"] == 8);
  BOOST_TEST(j["data"]["video_frames"]["max"] == 64);
}

BOOST_AUTO_TEST_CASE(print_graph_on_every_model) {
  for (const auto& model : files_in("models", ".sect")) {
    const ProcessResult r = maestro_run({model, "--print", "graph"});
    BOOST_TEST(r.status == 0, model << ": " << r.err);
    BOOST_TEST(r.out.find("section") == 0u, model);
    BOOST_TEST(r.out.find("flows (") != std::string::npos, model);
  }
  const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--print", "graph"});
  BOOST_TEST(r.out.find("has(image)") != std::string::npos);
  BOOST_TEST(r.out.find("vision_proj -> llm : activations") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(print_json_on_every_model) {
  for (const auto& model : files_in("models", ".sect")) {
    const ProcessResult r = maestro_run({model, "--print", "json"});
    BOOST_TEST(r.status == 0, model << ": " << r.err);
    const auto j = nlohmann::json::parse(r.out);
    BOOST_TEST(j["sections"].is_array(), model);
    BOOST_TEST(j["file"].get<std::string>() == fs::absolute(model).lexically_normal().string(), model);
    const auto check = nlohmann::json::parse(last_line(maestro_run({model, "--check", "--json"}).out));
    for (const auto& s : j["sections"]) BOOST_TEST(s["params"] == check["params"][s["name"].get<std::string>()]);
  }
  const auto j = nlohmann::json::parse(maestro_run({"models/tiny_kd.sect", "--print", "json"}).out);
  BOOST_TEST(j["flows"][0]["kind"] == "logits");
  BOOST_TEST(j["sections"][0]["mode"] == "frozen");
}

BOOST_AUTO_TEST_CASE(print_dot_on_every_model) {
  const std::string dot = find_on_path("dot");
  for (const auto& model : files_in("models", ".sect")) {
    const ProcessResult r = maestro_run({model, "--print", "dot"});
    BOOST_TEST(r.status == 0, model << ": " << r.err);
    BOOST_TEST(r.out.find("digraph maestro {") == 0u, model);
    if (dot.empty()) continue;
    const std::string path = write_temp("maestro_e2e_graph.dot", r.out);
    const ProcessResult svg = run_process({dot, "-Tsvg", path});
    BOOST_TEST(svg.status == 0, model << ": " << svg.err);
    BOOST_TEST(svg.out.find("<svg") != std::string::npos, model);
  }
  const ProcessResult kd = maestro_run({"models/tiny_kd.sect", "--print", "dot"});
  BOOST_TEST(kd.out.find("[style=dashed, label=\"logits\"]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(repl_needs_a_training_run) {
  // --repl with a command that does not train is refused, not ignored (the REPL itself: tests/repl/).
  for (const char* other : {"--check", "--simulate"}) {
    const ProcessResult r = maestro_run({"models/tiny_mllm.sect", other, "--repl"});
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.out.empty());
    BOOST_TEST(r.first_err_line().find("--repl") != std::string::npos, r.first_err_line());
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(invalid_corpus)

// Every tests/invalid/NAME.sect starts with `// expect: L:C: message`.
BOOST_AUTO_TEST_CASE(every_invalid_file_is_reported_where_expected) {
  const auto files = files_in("tests/invalid", ".sect");
  BOOST_TEST_MESSAGE(files.size() << " invalid files");
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string first;
    std::getline(in, first);
    const std::string tag = "// expect: ";
    BOOST_TEST_REQUIRE(first.find(tag) == 0u, file << " has no expect line");
    const std::string expected = file + ":" + first.substr(tag.size());
    const std::string where = expected.substr(0, expected.find(": ", file.size() + 1));
    const std::string message = expected.substr(where.size() + 2);

    const ProcessResult r = maestro_run({file, "--check"});
    BOOST_TEST(r.status == 2, file);
    BOOST_TEST(r.out.empty(), file);
    BOOST_TEST(r.first_err_line() == where + ": error: " + message);  // prints both lines when they differ
  }
}

BOOST_AUTO_TEST_SUITE_END()
