// plan_comm_groups (nccl_layout.h).
#include "gpu/nccl_layout.h"

#include <fmt/format.h>

#include <set>
#include <stdexcept>

namespace maestro {

std::string CommGroup::name() const {
  return kind == Kind::DataParallel ? fmt::format("section {} stage {} dp group (tp rank {})", section, stage, index)
                                    : fmt::format("section {} stage {} tp group (replica {})", section, stage, index);
}

int64_t section_device(const SectionPlan& s, int64_t stage, int64_t replica, int64_t tp_rank) {
  return s.first_device + (stage * s.dp + replica) * s.tp + tp_rank;
}

std::vector<CommGroup> plan_comm_groups(const Plan& plan) {
  std::vector<CommGroup> groups;
  for (size_t si = 0; si < plan.sections.size(); ++si) {
    const SectionPlan& s = plan.sections[si];
    if (s.devices != s.tp * s.pp * s.dp)
      throw std::invalid_argument(fmt::format("section {}: {} devices for tp {} x pp {} x dp {}", si, s.devices, s.tp,
                                              s.pp, s.dp));
    for (int64_t k = 0; k < s.pp; ++k) {
      if (s.dp > 1)
        for (int64_t t = 0; t < s.tp; ++t) {
          CommGroup g{CommGroup::Kind::DataParallel, int(si), k, t, {}};
          for (int64_t r = 0; r < s.dp; ++r) g.devices.push_back(int(section_device(s, k, r, t)));
          groups.push_back(std::move(g));
        }
      if (s.tp > 1)
        for (int64_t r = 0; r < s.dp; ++r) {
          CommGroup g{CommGroup::Kind::TensorParallel, int(si), k, r, {}};
          for (int64_t t = 0; t < s.tp; ++t) g.devices.push_back(int(section_device(s, k, r, t)));
          groups.push_back(std::move(g));
        }
    }
  }
  return groups;
}

int physical_device(int64_t plan_device, int gpus) {
  if (gpus <= 0) throw std::invalid_argument("no CUDA device to place a rank on");
  return int(plan_device % gpus);
}

std::vector<int> dp_group_devices(const Plan& plan, int section, int64_t stage, int gpus) {
  const SectionPlan& s = plan.sections.at(size_t(section));
  std::vector<int> devices;
  for (int64_t r = 0; r < s.dp; ++r) devices.push_back(physical_device(section_device(s, stage, r, 0), gpus));
  return devices;
}

std::string nccl_group_refusal(const Plan& plan, int section, int64_t stage, const std::string& name, int gpus,
                               bool nccl_built) {
  const SectionPlan& s = plan.sections.at(size_t(section));
  if (s.dp <= 1) return "";
  if (!nccl_built)
    return fmt::format("section '{}': dp = {} on the CUDA backend needs NCCL, and this build has none (nccl.h and "
                       "libnccl not found in the CUDA prefix); use dp = 1",
                       name, s.dp);
  const std::vector<int> d = dp_group_devices(plan, section, stage, gpus);
  if (std::set<int>(d.begin(), d.end()).size() != d.size())
    return fmt::format("section '{}': dp = {} on the CUDA backend needs {} distinct GPUs for each dp group (one "
                       "NCCL rank per GPU), {} CUDA device(s) found; use dp <= {}",
                       name, s.dp, s.dp, gpus, gpus);
  return "";
}

std::string shared_gpu(const std::vector<std::string>& gpu_of_rank) {
  for (size_t a = 0; a < gpu_of_rank.size(); ++a)
    for (size_t b = a + 1; b < gpu_of_rank.size(); ++b)
      if (gpu_of_rank[a] == gpu_of_rank[b]) return fmt::format("ranks {} and {} share the GPU {}", a, b, gpu_of_rank[a]);
  return "";
}

std::string nccl_tp_refusal(const Plan& plan, const std::vector<std::string>& section_names) {
  for (size_t si = 0; si < plan.sections.size(); ++si)
    if (plan.sections[si].tp > 1)
      return fmt::format("section '{}': tp = {} on the CUDA backend is not built yet (a replica's tensor-parallel "
                         "ranks talk through host memory in one process, not NCCL); use tp = 1",
                         section_names.at(si), plan.sections[si].tp);
  return "";
}

std::string nccl_dp_refusal(const Plan& plan, const std::vector<std::string>& section_names, int gpus,
                            bool nccl_built) {
  if (std::string why = nccl_tp_refusal(plan, section_names); !why.empty()) return why;
  for (size_t si = 0; si < plan.sections.size(); ++si)
    for (int64_t k = 0; k < plan.sections[si].pp; ++k)
      if (std::string why = nccl_group_refusal(plan, int(si), k, section_names.at(si), gpus, nccl_built); !why.empty())
        return why;
  return "";
}

}  // namespace maestro
