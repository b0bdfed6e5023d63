// The backend factory (gpu/backend_factory.h) and `[runtime] backend` at the
// CLI: "cpu" trains on the CPU backend, "auto" on the one it resolves to,
// and both say so in --json; without a CUDA device "cuda" is a clear error
// with exit status 2, never a silent CPU run (with one, the same cases train
// on the GPU); --gpu-selfcheck takes on or off only, --gpu-handoffs device
// or host.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "run_process.h"
#include "gpu/backend_factory.h"
#include "gpu/device_query.h"

using namespace maestro;
using namespace maestro::e2e;

namespace {

std::string config_file(const std::string& name, const std::string& backend) {
  const std::string path = "/tmp/" + name + "-" + std::to_string(::getpid()) + ".toml";
  std::ofstream(path) << "[runtime]\nthreads = 2\nbackend = \"" << backend << "\"\n";
  return path;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(backend_choice)

namespace {

// A machine where `cuda` can run: the backend is built and a device is seen.
// Without one (here) "cuda" is refused; with one, the same cases check that
// it trains on the GPU.
bool gpu_here() { return cuda_backend_built() && cuda_device_count().value_or(0) > 0; }

nlohmann::json last_json_line(const std::string& out) {
  std::string last = out;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  return nlohmann::json::parse(last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1));
}

}  // namespace

// cuBLAS(Lt) is loaded when a CUDA backend is made (gpu/cuda/cublas_library.h),
// not at start-up: mapping libcublasLt's 540 MB cost every invocation,
// --help included, ~0.1 s (docs/PERFORMANCE.md §3).
BOOST_AUTO_TEST_CASE(cublas_is_not_loaded_at_start_up) {
  const ProcessResult r = run_process({"/usr/bin/env", "LD_TRACE_LOADED_OBJECTS=1", maestro_run_path()});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.find("libc.so") != std::string::npos, r.out);  // the loader's listing
  BOOST_TEST(r.out.find("libcublas") == std::string::npos, r.out);
}

BOOST_AUTO_TEST_CASE(factory_resolves_the_config_value) {
  BOOST_TEST((choose_backend("cpu").kind == BackendKind::Cpu));
  BOOST_TEST((choose_backend("auto").kind == (gpu_here() ? BackendKind::Cuda : BackendKind::Cpu)));
  BOOST_CHECK_THROW(choose_backend("gpu"), std::invalid_argument);
  if (gpu_here()) {
    BOOST_TEST((choose_backend("cuda").kind == BackendKind::Cuda));
  } else {
    BOOST_CHECK_THROW(choose_backend("cuda"), BackendUnavailable);
    BOOST_CHECK_THROW(make_backend(BackendKind::Cuda, 1), BackendUnavailable);
  }
  const std::unique_ptr<Backend> cpu = make_backend(BackendKind::Cpu, 1);
  BOOST_TEST(std::string(cpu->name()) == "cpu");
  BOOST_TEST((cpu->device() == Device::Host));
}

BOOST_AUTO_TEST_CASE(cuda_trains_on_a_gpu_and_is_refused_with_status_2_without_one) {
  const std::string path = config_file("maestro_e2e_cuda", "cuda");
  const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--config", path, "--steps", "1", "--json"});
  if (gpu_here()) {
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    BOOST_TEST(last_json_line(r.out)["backend"] == "cuda");
    return;
  }
  BOOST_TEST(r.status == 2);
  const std::string why = cuda_backend_built() ? "no CUDA device found" : "this build has no CUDA backend";
  BOOST_TEST(r.first_err_line().find(path + ": runtime.backend = \"cuda\": " + why) != std::string::npos, r.err);
  BOOST_TEST(r.out.find("loss") == std::string::npos);  // nothing trained
}

BOOST_AUTO_TEST_CASE(cpu_and_auto_train_on_the_backend_they_resolve_to) {
  for (const char* backend : {"cpu", "auto"}) {
    const std::string path = config_file("maestro_e2e_backend", backend);
    const ProcessResult r = maestro_run({"models/tiny_mllm.sect", "--config", path, "--steps", "1", "--json"});
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const bool cuda = std::string(backend) == "auto" && gpu_here();
    BOOST_TEST(last_json_line(r.out)["backend"] == (cuda ? "cuda" : "cpu"), backend);
  }
}

BOOST_AUTO_TEST_CASE(calibrating_cuda_without_a_device_is_refused_with_status_2) {
  const std::string path = config_file("maestro_e2e_calibrate", "cuda");
  const std::string out = "/tmp/maestro_e2e_calibrate_" + std::to_string(::getpid()) + ".toml";
  const ProcessResult r = maestro_run({"--calibrate", out, "--config", path});
  if (gpu_here()) {  // a real profile of device 0
    BOOST_TEST(r.status == 0, r.err);
    BOOST_TEST(::access(out.c_str(), F_OK) == 0);
    ::unlink(out.c_str());
    return;
  }
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.first_err_line().find(path + ": runtime.backend = \"cuda\": ") != std::string::npos, r.err);
  BOOST_TEST(::access(out.c_str(), F_OK) != 0);  // no profile written
}

// On the CPU, --calibrate writes a profile whose attention curve the
// planner takes: the backend's attention timed at two lengths.
BOOST_AUTO_TEST_CASE(calibrating_the_cpu_writes_a_profile_with_an_attention_curve) {
  const std::string cpu = config_file("maestro_e2e_calibrate_cpu", "cpu");
  const std::string out = "/tmp/maestro_e2e_calibrate_cpu_" + std::to_string(::getpid()) + ".toml";
  const ProcessResult r = maestro_run({"--calibrate", out, "--config", cpu});
  BOOST_TEST_REQUIRE(r.status == 0, r.err);
  BOOST_TEST(r.out.find(" at 2048 tokens -> ") != std::string::npos, r.out);
  std::ifstream in(out);
  const std::string profile((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // [[64.0, e], [256.0, e], [1024.0, e], [2048.0, e]], efficiencies in (0, 1]
  const size_t at = profile.find("attention_efficiency = [");
  BOOST_TEST_REQUIRE(at != std::string::npos, profile);
  for (const char* tokens : {"[ 64.0, ", "[ 256.0, ", "[ 1024.0, ", "[ 2048.0, "}) {
    const size_t p = profile.find(tokens, at);
    BOOST_TEST_REQUIRE(p != std::string::npos, tokens << " in " << profile);
    const double e = std::stod(profile.substr(p + std::string(tokens).size()));
    BOOST_TEST((e > 0 && e <= 1), tokens << e);
  }
  // The planner reads it: a plan on a cluster of that device.
  const std::string cluster = "/tmp/maestro_e2e_calibrated_cluster_" + std::to_string(::getpid()) + ".toml";
  std::ofstream(cluster) << "[cluster]\ndevices = 2\ndevice = \"" << out << "\"\n";
  const ProcessResult plan = maestro_run({"models/tiny_mllm.sect", "--config", cluster, "--print", "plan"});
  BOOST_TEST(plan.status == 0, plan.err);
  ::unlink(out.c_str());
  ::unlink(cluster.c_str());
}

BOOST_AUTO_TEST_CASE(gpu_selfcheck_takes_on_or_off) {
  const ProcessResult bad = maestro_run({"models/tiny_mllm.sect", "--gpu-selfcheck=maybe", "--steps", "1", "--quiet"});
  BOOST_TEST(bad.status == 2);
  BOOST_TEST(bad.first_err_line().find("--gpu-selfcheck") != std::string::npos, bad.err);
  const std::string path = config_file("maestro_e2e_selfcheck", "cuda");
  const ProcessResult off = maestro_run({"models/tiny_mllm.sect", "--config", path, "--gpu-selfcheck=off", "--steps", "1", "--quiet"});
  BOOST_TEST(off.status == (gpu_here() ? 0 : 2));  // skipping the check does not make a GPU appear
}

// --gpu-handoffs takes device or host only; host trains on the CPU as
// device does (the CPU backend's hand-offs are host memory either way).
BOOST_AUTO_TEST_CASE(gpu_handoffs_takes_device_or_host) {
  const ProcessResult bad = maestro_run({"models/tiny_mllm.sect", "--gpu-handoffs=gpu", "--steps", "1", "--quiet"});
  BOOST_TEST(bad.status == 2);
  BOOST_TEST(bad.first_err_line().find("--gpu-handoffs") != std::string::npos, bad.err);
  const ProcessResult host = maestro_run({"models/tiny_mllm.sect", "--gpu-handoffs=host", "--steps", "1", "--quiet"});
  BOOST_TEST(host.status == 0, host.err);
}

BOOST_AUTO_TEST_CASE(gpu_attention_takes_a_path_name) {
  const ProcessResult bad = maestro_run({"models/tiny_mllm.sect", "--gpu-attention=fast", "--steps", "1", "--quiet"});
  BOOST_TEST(bad.status == 2);
  BOOST_TEST(bad.first_err_line().find("--gpu-attention") != std::string::npos, bad.err);
  const ProcessResult reference =
      maestro_run({"models/tiny_mllm.sect", "--gpu-attention=reference", "--steps", "1", "--quiet"});
  BOOST_TEST(reference.status == 0, reference.err);  // no effect on the CPU backend
  const ProcessResult flash = maestro_run({"models/tiny_mllm.sect", "--gpu-attention=flash", "--steps", "1", "--quiet"});
  BOOST_TEST(flash.status == 0, flash.err);  // a name it takes; refused on cuda for this fp32 model (unit.gpu)
}

BOOST_AUTO_TEST_SUITE_END()
