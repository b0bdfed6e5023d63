// The backend factory (see backend_factory.h).
#include "gpu/backend_factory.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "cpu/cpu_backend.h"
#include "gpu/device_query.h"

namespace maestro {

const char* backend_kind_name(BackendKind k) { return k == BackendKind::Cpu ? "cpu" : "cuda"; }

namespace {
// What the machine has, for the messages: a count, or "unknown" in a build
// without the CUDA toolkit (device_query.h).
std::string devices_found() {
  const std::optional<int> devices = cuda_device_count();
  if (!devices) return "this build has no CUDA toolkit to look for a device";
  if (*devices == 0) return "no CUDA device was found";
  return fmt::format("{} CUDA device(s) found, but this build has no CUDA backend", *devices);
}
}  // namespace

BackendChoice choose_backend(const std::string& configured) {
  if (configured == "cpu") return {BackendKind::Cpu, "configured"};
  if (configured == "cuda")
    throw BackendUnavailable(fmt::format(
        "runtime.backend = \"cuda\": the CUDA backend is not supported yet ({}); use \"cpu\" or \"auto\"",
        devices_found()));
  if (configured == "auto") return {BackendKind::Cpu, devices_found()};
  throw std::invalid_argument(fmt::format("runtime.backend = \"{}\": expected auto, cpu or cuda", configured));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads) {
  if (kind == BackendKind::Cuda) throw BackendUnavailable("the CUDA backend is not supported yet");
  return make_cpu_backend(threads);
}

}  // namespace maestro
