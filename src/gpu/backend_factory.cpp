// The backend factory (see backend_factory.h).
#include "gpu/backend_factory.h"

#include <fmt/format.h>

#include "cpu/cpu_backend.h"
#include "gpu/device_query.h"

namespace maestro {

const char* backend_kind_name(BackendKind k) { return k == BackendKind::Cpu ? "cpu" : "cuda"; }

namespace {

// "2 CUDA device(s) found", "no CUDA device found", "this build cannot see CUDA devices".
std::string devices_seen() {
  const std::optional<int> n = cuda_device_count();
  if (!n) return "this build cannot see CUDA devices";
  return *n > 0 ? fmt::format("{} CUDA device(s) found", *n) : std::string("no CUDA device found");
}

}  // namespace

BackendChoice choose_backend(const std::string& configured) {
  if (configured == "cpu") return {BackendKind::Cpu, "configured"};
  if (configured == "cuda")
    throw BackendUnavailable(fmt::format(
        "runtime.backend = \"cuda\": the CUDA backend is not supported yet ({}); use \"cpu\" or \"auto\"",
        devices_seen()));
  if (configured == "auto") return {BackendKind::Cpu, devices_seen() + "; the CUDA backend is not supported yet"};
  throw std::invalid_argument(fmt::format("runtime.backend = \"{}\": expected auto, cpu or cuda", configured));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads) {
  if (kind == BackendKind::Cuda) throw BackendUnavailable("the CUDA backend is not supported yet");
  return make_cpu_backend(threads);
}

}  // namespace maestro
