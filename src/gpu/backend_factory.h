// The backend factory: the one place that turns `[runtime] backend` (auto |
// cpu | cuda, runtime-config.md) into a Backend (nn/backend.h). The runtime
// asks it once per section replica and injects the result into the
// replica's SectionRunner, so nothing else names a concrete backend.
//
// "auto" picks cuda when this build has the CUDA backend (maestro_cuda,
// built when nvcc is found) and the machine has a CUDA device, else cpu
// (`reason` says why). "cuda" without either is BackendUnavailable (exit
// status 2 at the CLI), never a silent CPU run.
//
// CUDA backends go round-robin over the devices (each replica's compute
// worker owns one device and its own stream); the first backend on a
// device runs the start-up self-check (gpu/cuda/self_check.h) unless
// GpuSettings::self_check is off (`--gpu-selfcheck=off`).
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

// Whether this binary contains the CUDA backend.
bool cuda_backend_built();

// Resolves the config value; throws BackendUnavailable for "cuda" without a
// CUDA backend or device, and std::invalid_argument for a value that is
// none of auto, cpu, cuda.
BackendChoice choose_backend(const std::string& configured);
// The same decision for a build with or without the CUDA backend and a
// machine with `devices` CUDA devices (-1: this build cannot tell).
BackendChoice resolve_backend(const std::string& configured, bool cuda_built, int devices);

// Process-wide settings of the CUDA backends made from here on (the CLI sets
// them once, before the run builds its replicas).
struct GpuSettings {
  bool self_check = true;  // --gpu-selfcheck=on|off
  bool bf16_gemm = true;   // train.precision = bf16 (fp32: plain fp32 GEMMs)
};
void set_gpu_settings(const GpuSettings& s);

// A backend of that kind; threads: the CPU pool's size (0 = all cores).
// Cuda: throws BackendUnavailable when not built, CudaError for a device
// fault, GpuSelfCheckFailed when the self-check refuses the device.
std::unique_ptr<Backend> make_backend(BackendKind kind, int threads);

}  // namespace maestro
