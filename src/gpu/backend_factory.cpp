// The backend factory (see backend_factory.h).
#include "gpu/backend_factory.h"

#include <fmt/format.h>

#include "cpu/cpu_backend.h"
#include "gpu/device_query.h"

namespace maestro {

const char* backend_kind_name(BackendKind k) { return k == BackendKind::Cpu ? "cpu" : "cuda"; }

BackendChoice choose_backend(const std::string& configured) {
  if (configured == "cpu") return {BackendKind::Cpu, "configured"};
  if (configured == "cuda") {
    const int devices = cuda_device_count();
    throw BackendUnavailable(fmt::format(
        "runtime.backend = \"cuda\": the CUDA backend is not supported yet ({}); use \"cpu\" or \"auto\"",
        devices > 0 ? fmt::format("{} CUDA device(s) found, but this build has no CUDA backend", devices)
                    : std::string("and no CUDA device was found")));
  }
  if (configured == "auto") {
    const int devices = cuda_device_count();
    return {BackendKind::Cpu, devices > 0 ? fmt::format("{} CUDA device(s) found, but the CUDA backend is not "
                                                        "supported yet",
                                                        devices)
                                          : std::string("no CUDA device")};
  }
  throw std::invalid_argument(fmt::format("runtime.backend = \"{}\": expected auto, cpu or cuda", configured));
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads) {
  if (kind == BackendKind::Cuda) throw BackendUnavailable("the CUDA backend is not supported yet");
  return make_cpu_backend(threads);
}

}  // namespace maestro
