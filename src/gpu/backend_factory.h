// The backend factory: the one place that turns `[runtime] backend` (auto |
// cpu | cuda, runtime-config.md) into a Backend (nn/backend.h). The runtime
// asks it once per section replica and injects the result into the
// replica's SectionRunner, so nothing else names a concrete backend.
//
// Today only the CPU backend exists: "auto" resolves to "cpu" (on a machine
// with a GPU too — it says so in `reason`), and "cuda" is refused with
// BackendUnavailable (exit status 2 at the CLI), never run on the CPU.
// Lives beside device detection because the CUDA backend will join here.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "nn/backend.h"

namespace maestro {

enum class BackendKind { Cpu, Cuda };

const char* backend_kind_name(BackendKind k);  // "cpu", "cuda"

// A backend this build or machine cannot provide; what() names the key and why.
struct BackendUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct BackendChoice {
  BackendKind kind = BackendKind::Cpu;
  std::string reason;  // why, for "auto" ("no CUDA device", ...)
};

// Resolves the config value; throws BackendUnavailable for "cuda" and
// std::invalid_argument for a value that is none of auto, cpu, cuda.
BackendChoice choose_backend(const std::string& configured);

// A backend of that kind; threads: the CPU pool's size (0 = all cores).
std::unique_ptr<Backend> make_backend(BackendKind kind, int threads);

}  // namespace maestro
