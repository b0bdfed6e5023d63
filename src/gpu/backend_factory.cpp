// The backend factory (see backend_factory.h).
#include "gpu/backend_factory.h"

#include <fmt/format.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <type_traits>
#include <variant>

#include "cpu/cpu_backend.h"
#include "gpu/device_query.h"
#include "gpu/nccl_layout.h"

#if MAESTRO_HAVE_CUDA_BACKEND
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/self_check.h"
#endif
#if MAESTRO_HAVE_NCCL
#include "gpu/cuda/nccl_communicator.h"
#endif

namespace maestro {

const char* backend_kind_name(BackendKind k) { return k == BackendKind::Cpu ? "cpu" : "cuda"; }

bool cuda_backend_built() {
#if MAESTRO_HAVE_CUDA_BACKEND
  return true;
#else
  return false;
#endif
}

namespace {

// "2 CUDA device(s) found", "no CUDA device found", "this build cannot see
// CUDA devices" (devices < 0).
std::string devices_seen(int devices) {
  if (devices < 0) return "this build cannot see CUDA devices";
  return devices > 0 ? fmt::format("{} CUDA device(s) found", devices) : std::string("no CUDA device found");
}

std::mutex g_mu;
GpuSettings g_settings;
std::set<int> g_checked_devices;  // devices whose self-check passed
#if MAESTRO_HAVE_CUDA_BACKEND
std::atomic<int> g_next_device{0};
#endif

}  // namespace

void set_gpu_settings(const GpuSettings& s) {
  std::lock_guard lock(g_mu);
  g_settings = s;
}

BackendChoice choose_backend(const std::string& configured) {
  return resolve_backend(configured, cuda_backend_built(), cuda_device_count().value_or(-1));
}

BackendChoice resolve_backend(const std::string& configured, bool cuda_built, int devices) {
  const std::string seen = devices_seen(devices);
  if (configured == "cpu") return {BackendKind::Cpu, "configured"};
  if (configured == "cuda") {
    if (!cuda_built)
      throw BackendUnavailable(fmt::format(
          "runtime.backend = \"cuda\": this build has no CUDA backend (built without nvcc; {}); use \"cpu\" or \"auto\"",
          seen));
    if (devices <= 0) throw BackendUnavailable(fmt::format("runtime.backend = \"cuda\": {}; use \"cpu\" or \"auto\"", seen));
    return {BackendKind::Cuda, "configured"};
  }
  if (configured == "auto") {
    if (cuda_built && devices > 0) return {BackendKind::Cuda, seen};
    return {BackendKind::Cpu, cuda_built ? seen : seen + "; this build has no CUDA backend"};
  }
  throw std::invalid_argument(fmt::format("runtime.backend = \"{}\": expected auto, cpu or cuda", configured));
}

BackendKind worker_backend(const std::string& coordinator_backend, bool cuda_built, int devices) {
  if (coordinator_backend != "cpu" && coordinator_backend != "cuda")
    throw std::invalid_argument(fmt::format("the coordinator names backend \"{}\"; expected cpu or cuda",
                                            coordinator_backend));
  try {
    return resolve_backend(coordinator_backend, cuda_built, devices).kind;
  } catch (const BackendUnavailable& e) {
    throw std::invalid_argument(fmt::format("the coordinator runs the {} backend: {}", coordinator_backend, e.what()));
  }
}

bool nccl_built() {
#if MAESTRO_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int replica_device(BackendKind kind, const Plan& plan, int section, int64_t stage, int64_t replica, int64_t tp_rank) {
  if (kind == BackendKind::Cpu) return -1;
  const int devices = cuda_device_count().value_or(0);
  if (devices <= 0) throw BackendUnavailable(fmt::format("the CUDA backend needs a CUDA device: {}", devices_seen(devices)));
  return physical_device(section_device(plan.sections.at(size_t(section)), stage, replica, tp_rank), devices);
}

namespace {

// One group's communicators: in process on the CPU (or for one rank:
// nothing is ever sent), NCCL over `devices` on cuda.
std::vector<std::shared_ptr<Communicator>> make_group(BackendKind kind, int size, const char* what,
                                                      const std::function<std::vector<int>(int gpus)>& devices) {
  if (kind == BackendKind::Cpu || size == 1) return make_local_group(size);
#if MAESTRO_HAVE_NCCL
  return make_nccl_group(devices(cuda_device_count().value_or(0)));
#else
  (void)devices;
  throw BackendUnavailable(fmt::format("{} = {} on the CUDA backend: this build has no NCCL", what, size));
#endif
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_dp_group(BackendKind kind, const Plan& plan, int section,
                                                         int64_t stage, int64_t tp_rank) {
  return make_group(kind, int(plan.sections.at(size_t(section)).dp), "dp",
                    [&](int gpus) { return dp_group_devices(plan, section, stage, gpus, tp_rank); });
}

std::vector<std::shared_ptr<Communicator>> make_tp_group(BackendKind kind, const Plan& plan, int section,
                                                         int64_t stage, int64_t replica) {
  return make_group(kind, int(plan.sections.at(size_t(section)).tp), "tp",
                    [&](int gpus) { return tp_group_devices(plan, section, stage, replica, gpus); });
}

#if MAESTRO_HAVE_NCCL
std::vector<uint8_t> nccl_unique_id() { return make_nccl_unique_id(); }
std::vector<std::shared_ptr<Communicator>> make_peer_dp_ranks(int size, const std::vector<int>& ranks,
                                                              const std::vector<int>& devices) {
  return make_nccl_ranks(size, ranks, devices);
}
void connect_peer_dp_ranks(const std::vector<NcclConnection>& ranks, std::chrono::milliseconds timeout) {
  connect_nccl_ranks(ranks, timeout);
}
bool order_collectives_after(Communicator& rank, Backend& backend) {
  return order_nccl_after(rank, cuda_backend_stream(backend));
}
#else
namespace {
constexpr const char* kNoNccl = "a dp group over processes on CUDA: this build has no NCCL";
}
std::vector<uint8_t> nccl_unique_id() { throw BackendUnavailable(kNoNccl); }
std::vector<std::shared_ptr<Communicator>> make_peer_dp_ranks(int, const std::vector<int>&, const std::vector<int>&) {
  throw BackendUnavailable(kNoNccl);
}
void connect_peer_dp_ranks(const std::vector<NcclConnection>& ranks, std::chrono::milliseconds) {
  if (!ranks.empty()) throw BackendUnavailable(kNoNccl);
}
bool order_collectives_after(Communicator&, Backend&) { return false; }  // no NCCL rank exists
#endif

std::string gpu_attention_refusal(AttentionPath path, const Program& program) {
  const bool bf16_operands = path == AttentionPath::TensorCore || path == AttentionPath::Flash;
  if (bf16_operands && program.train.precision != Precision::BF16)
    return fmt::format("--gpu-attention={} rounds the attention's operands to bf16; train.precision = fp32 wants fp32 "
                       "(take reference or tiled)",
                       attention_path_name(path));
  if (path != AttentionPath::Fast && path != AttentionPath::Flash) return "";
  const int64_t max_head = path == AttentionPath::Fast ? kFastAttentionMaxHead : kFlashMaxHead;
  for (const Section& sec : program.sections) {
    const int64_t head = std::visit(
        [](const auto& m) -> int64_t {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, MlpSpec>) return 0;  // no attention
          else return m.heads > 0 ? m.hidden / m.heads : 0;
        },
        sec.model.spec);
    if (head > max_head)
      return fmt::format("--gpu-attention={}: section {} has attention heads of {}; the {} kernel takes up to {} "
                         "(take auto, tensorcore or reference)",
                         attention_path_name(path), sec.name, head, attention_path_name(path), max_head);
  }
  return "";
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int threads, int device) {
  if (kind == BackendKind::Cpu) return make_cpu_backend(threads);
#if MAESTRO_HAVE_CUDA_BACKEND
  const int devices = cuda_device_count().value_or(0);
  if (devices == 0) throw BackendUnavailable(fmt::format("the CUDA backend needs a CUDA device: {}", devices_seen(0)));
  if (device < 0) device = g_next_device.fetch_add(1) % devices;
  GpuSettings s;
  {
    std::lock_guard lock(g_mu);
    s = g_settings;
    if (s.self_check && !g_checked_devices.count(device)) {
      gpu_self_check(device, s.bf16_gemm, s.tensor_parallel, s.attention);  // throws GpuSelfCheckFailed
      g_checked_devices.insert(device);
    }
  }
  CudaBackendOptions o;
  o.device = device;
  o.bf16_gemm = s.bf16_gemm;
  o.attention = s.attention;
  return make_cuda_backend(o);
#else
  (void)device;
  throw BackendUnavailable("this build has no CUDA backend (built without nvcc)");
#endif
}

}  // namespace maestro
