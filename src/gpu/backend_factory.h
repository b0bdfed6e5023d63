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
// CUDA backends go on the device the caller names (the runtime: the plan's
// device of the replica, gpu/nccl_layout.h) or round-robin over the devices
// (each replica's compute worker owns one device and its own stream); the
// first backend on a device runs the start-up self-check
// (gpu/cuda/self_check.h) unless GpuSettings::self_check is off
// (`--gpu-selfcheck=off`).
//
// make_dp_group gives a section stage's dp replicas their Communicator
// (transport/collectives.h): the in-process group on the CPU backend
// (host memory), NCCL over the plan's devices on the CUDA backend (device
// memory; gpu/cuda/nccl_communicator.h). A dp group spanning processes
// can be, on the CUDA backend, one NCCL communicator across them:
// nccl_unique_id, make_peer_dp_ranks and connect_peer_dp_ranks (the run
// over processes hands the id round and chooses, actors/processes.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "dsl/program.h"
#include "gpu/launch_plan.h"
#include "gpu/nccl_layout.h"
#include "nn/backend.h"
#include "plan/plan.h"
#include "transport/collectives.h"

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
// A worker's backend in a run over processes: the coordinator's resolved
// one (backend_kind_name: "cpu" or "cuda") on this build and machine.
// Throws std::invalid_argument naming the coordinator's backend and why this
// worker cannot run it (a worker refuses its share with status 2).
BackendKind worker_backend(const std::string& coordinator_backend, bool cuda_built, int devices);

// Process-wide settings of the CUDA backends made from here on (the CLI sets
// them once, before the run builds its replicas).
struct GpuSettings {
  bool self_check = true;  // --gpu-selfcheck=on|off
  bool bf16_gemm = true;   // train.precision = bf16 (fp32: plain fp32 GEMMs)
  bool tensor_parallel = false;  // the plan has tp > 1: the self-check runs the tp-only kernels too
  AttentionPath attention = AttentionPath::Auto;  // --gpu-attention (gpu/launch_plan.h)
};
// Why a run cannot take `--gpu-attention` (exit status 2), or "": tiled or
// flash with a section whose attention head is over the kernel's maximum
// (kFastAttentionMaxHead, kFlashMaxHead); tensorcore or flash (bf16
// operands) with train.precision = fp32.
std::string gpu_attention_refusal(AttentionPath path, const Program& program);
void set_gpu_settings(const GpuSettings& s);

// A backend of that kind; threads: the CPU pool's size (0 = all cores).
// Cuda: throws BackendUnavailable when not built, CudaError for a device
// fault, GpuSelfCheckFailed when the self-check refuses the device.
// device: the CUDA device (< 0: round-robin); ignored by the CPU backend.
std::unique_ptr<Backend> make_backend(BackendKind kind, int threads, int device = -1);

// Whether this binary has the NCCL communicators.
bool nccl_built();
// The CUDA device of tp rank `tp_rank` of a replica of section `section`,
// stage `stage` (physical_device of the plan's device); -1 for the CPU backend.
int replica_device(BackendKind kind, const Plan& plan, int section, int64_t stage, int64_t replica,
                   int64_t tp_rank = 0);
// The dp group of tp rank `tp_rank` of section `section`, stage `stage`:
// plan.sections[section].dp communicators, [replica]. Cuda: NCCL over
// dp_group_devices (the caller has checked nccl_refusal); throws
// BackendUnavailable without NCCL.
std::vector<std::shared_ptr<Communicator>> make_dp_group(BackendKind kind, const Plan& plan, int section,
                                                         int64_t stage, int64_t tp_rank = 0);
// The tp group of replica `replica` of that stage: plan.sections[section].tp
// communicators, [tp rank] — in process on the CPU, NCCL over
// tp_group_devices on cuda (likewise checked; BackendUnavailable without NCCL).
std::vector<std::shared_ptr<Communicator>> make_tp_group(BackendKind kind, const Plan& plan, int section,
                                                         int64_t stage, int64_t replica);
// A dp group spanning processes, on the CUDA backend (nccl_communicator.h's
// make_nccl_unique_id, make_nccl_ranks, connect_nccl_ranks): each throws
// BackendUnavailable in a build without NCCL.
std::vector<uint8_t> nccl_unique_id();
std::vector<std::shared_ptr<Communicator>> make_peer_dp_ranks(int size, const std::vector<int>& ranks,
                                                              const std::vector<int>& devices);
void connect_peer_dp_ranks(const std::vector<NcclConnection>& ranks, std::chrono::milliseconds timeout);
// Makes `rank` (an NCCL rank of make_dp_group, make_tp_group or
// make_peer_dp_ranks) wait,
// before each collective, for the work `backend` (its replica's, on the
// rank's device) has queued up to the call — an event of the backend's
// stream — rather than for all of the device's streams. Returns whether it
// did: false for a rank that is not NCCL's or a backend that is not CUDA's.
bool order_collectives_after(Communicator& rank, Backend& backend);

}  // namespace maestro
