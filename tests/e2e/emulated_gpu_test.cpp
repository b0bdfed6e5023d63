// maestro-run on emulated GPUs (tests/gpu_kernels: maestro-run-emulated is
// maestro-run with the CUDA backend's sources over the kernel emulator):
// the GPU paths of a real run, end to end, on a machine without a GPU —
// the start-up self-check, the plan on the GPUs, hand-offs held in device
// memory and copied between devices, the attention paths, the refusal of a
// dp group without NCCL. The checks are bench/gpu/run.sh's, on fewer steps;
// what the emulator cannot show (speed, concurrency, NCCL, the tensor cores'
// rounding) stays there. Runs as `e2e.emulated_gpu` (slow: every CUDA
// thread is a fiber).
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_process.h"

using namespace maestro::e2e;

namespace {

constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";  // a name in the device table (plan/devices.h)

namespace fs = std::filesystem;

// The suite's models and configurations: a folder of this process's,
// removed when the suite ends.
const fs::path kScratch = fs::temp_directory_path() / ("maestro_emulated_gpu_" + std::to_string(::getpid()));
struct Scratch {
  Scratch() { fs::create_directories(kScratch); }
  ~Scratch() { fs::remove_all(kScratch); }
};

std::string temp_path(const std::string& name) { return (kScratch / name).string(); }

std::string config(const std::string& backend) {
  const std::string path = temp_path(backend + ".toml");
  std::ofstream(path) << "[runtime]\nthreads = 2\nbackend = \"" << backend << "\"\n";
  return path;
}

// models/tiny_mllm.sect made small enough for the emulator (a step of 8
// samples, shorter texts and audio: about 2 s a step, not 30), with each
// `from` replaced by its `to` too; written to a file of its own.
std::string small_mllm(const std::string& name, std::vector<std::pair<std::string, std::string>> edits = {}) {
  std::ifstream in("models/tiny_mllm.sect");
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  edits.insert(edits.begin(), {{"global_batch = 32;", "global_batch = 8;"},
                               {"median: 48, sigma: 0.6, max: 256", "median: 16, sigma: 0.6, max: 64"},
                               {"uniform(min: 32, max: 128)", "uniform(min: 16, max: 48)"}});
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    BOOST_TEST_REQUIRE(at != std::string::npos, "models/tiny_mllm.sect no longer has '" << from << "'");
    text.replace(at, from.size(), to);
  }
  const std::string path = temp_path(name + ".sect");
  std::ofstream(path) << text;
  return path;
}

// maestro-run-emulated over `gpus` emulated GPUs called `name`.
ProcessResult run_emulated(int gpus, const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env", "MAESTRO_EMULATED_GPUS=" + std::to_string(gpus),
                                   "MAESTRO_EMULATED_GPU_NAME=" + name, MAESTRO_RUN_EMULATED};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

nlohmann::json summary(const ProcessResult& r) {
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return nlohmann::json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1));
}

// The largest per-step relative difference of a's losses from b's.
double loss_error(const nlohmann::json& a, const nlohmann::json& b) {
  const auto& x = a.at("losses");
  const auto& y = b.at("losses");
  BOOST_TEST_REQUIRE(x.size() == y.size());
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i)
    err = std::max(err, std::abs(x[i].get<double>() - y[i].get<double>()) / std::abs(y[i].get<double>()));
  return err;
}

// A run's summary, the run required to succeed on the backend named.
nlohmann::json trained(const ProcessResult& r, const std::string& backend) {
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  const nlohmann::json j = summary(r);
  BOOST_TEST_REQUIRE(j.at("backend") == backend, j.dump());
  return j;
}

nlohmann::json cpu_run(const std::string& model, const std::string& steps) {
  return trained(maestro_run({model, "--config", config("cpu"), "--steps", steps, "--json", "--quiet"}), "cpu");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulated_gpu, *boost::unit_test::label("emulated_gpu") * boost::unit_test::fixture<Scratch>())

// One GPU whose name the device table lacks: every section on it, the
// start-up self-check first (the one case that runs it: 13 s here); fp32
// losses as the CPU's, the second after an AdamW step (sums in other
// orders).
BOOST_AUTO_TEST_CASE(one_gpu_trains_like_the_cpu) {
  const std::string model = small_mllm("one");
  const ProcessResult r =
      run_emulated(1, "Maestro emulated GPU", {model, "--config", config("cuda"), "--steps", "2", "--json", "--quiet"});
  const nlohmann::json gpu = trained(r, "cuda");
  BOOST_TEST(r.err.find("the GPU 'Maestro emulated GPU' is not in the planner's device table") != std::string::npos, r.err);
  const double err = loss_error(gpu, cpu_run(model, "2"));
  BOOST_TEST_MESSAGE("one emulated GPU against the CPU: per-step loss rel err " << err);
  BOOST_TEST(err <= 1e-4);
}

// Four GPUs with an H100's name: the run is planned on them and the llm
// split in two pipeline stages on GPUs 0 and 1, so its hand-offs between
// stages cross devices (every section at dp 1: a dp group needs NCCL; the
// planner keeps the small sections on GPU 0). In GPU memory (peer copies)
// or through the host, the same bytes are handed on: the same losses, bit
// for bit, and the CPU's within fp32's sums.
BOOST_AUTO_TEST_CASE(four_gpus_planned_hand_offs_in_device_memory) {
  const std::string model = small_mllm("pp2", {{"parallel { dp = auto; }", "parallel { dp = 1; pp = 2; }"},
                                               {"section vision_proj {", "section vision_proj {\n  parallel { dp = 1; }"},
                                               {"section audio {", "section audio {\n  parallel { dp = 1; }"},
                                               {"section audio_proj {", "section audio_proj {\n  parallel { dp = 1; }"}});
  const std::vector<std::string> args = {model, "--config", config("cuda"), "--steps", "2", "--json", "--gpu-selfcheck=off"};
  std::vector<std::string> device_args = args, host_args = args;
  device_args.push_back("--gpu-handoffs=device");
  host_args.push_back("--gpu-handoffs=host");
  const ProcessResult device_run = run_emulated(4, kH100, device_args);
  const nlohmann::json device = trained(device_run, "cuda");
  BOOST_TEST(device_run.out.find("plan  planned on 4 GPUs as the device table's h100") != std::string::npos, device_run.out);
  BOOST_TEST(device_run.out.find("plan  llm: dp 1, pp 2, micro_batch 8, GPUs 0-1") != std::string::npos, device_run.out);
  const nlohmann::json host = trained(run_emulated(4, kH100, host_args), "cuda");
  BOOST_TEST(device.at("losses") == host.at("losses"), device.dump() << "\n" << host.dump());
  const double err = loss_error(device, cpu_run(model, "2"));
  BOOST_TEST_MESSAGE("four emulated H100s, the llm over two, against the CPU: per-step loss rel err " << err);
  BOOST_TEST(err <= 1e-4);
}

// The attention paths end to end, causal (the llm) and bidirectional (the
// encoders): fp32 tiled against the reference path; bf16 flash against the
// tensor-core path (bench/gpu/run.sh's bounds).
BOOST_AUTO_TEST_CASE(attention_paths_agree) {
  const auto run = [](const std::string& model, const std::string& attention) {
    return trained(run_emulated(1, kH100, {model, "--config", config("cuda"), "--steps", "2", "--json", "--quiet",
                                           "--gpu-selfcheck=off", "--gpu-attention=" + attention}),
                   "cuda");
  };
  const std::string fp32 = small_mllm("fp32");
  const double fp32_err = loss_error(run(fp32, "tiled"), run(fp32, "reference"));
  BOOST_TEST_MESSAGE("tiled against reference (fp32): per-step loss rel err " << fp32_err);
  BOOST_TEST(fp32_err <= 1e-4);

  const std::string bf16 = small_mllm("bf16", {{"precision = fp32;", "precision = bf16;"}});
  const double bf16_err = loss_error(run(bf16, "flash"), run(bf16, "tensorcore"));
  BOOST_TEST_MESSAGE("flash against tensorcore (bf16): per-step loss rel err " << bf16_err);
  BOOST_TEST(bf16_err <= 5e-2);
}

// A dp group over GPUs needs NCCL, which the emulator does not have: the
// run names the first section whose group needs it and exits 2, before any
// step.
BOOST_AUTO_TEST_CASE(dp_group_without_nccl_is_refused) {
  const std::string model = small_mllm("dp2", {{"parallel { dp = auto; }", "parallel { dp = 2; }"}});
  const ProcessResult r = run_emulated(2, kH100, {model, "--config", config("cuda"), "--steps", "1", "--json", "--quiet",
                                                  "--gpu-selfcheck=off"});
  BOOST_TEST(r.status == 2, r.err);
  BOOST_TEST(r.err.find("on the CUDA backend needs NCCL, and this build has none") != std::string::npos, r.err);
  BOOST_TEST(r.out.find("\"losses\"") == std::string::npos, r.out);
}

BOOST_AUTO_TEST_SUITE_END()
