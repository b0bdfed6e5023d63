// plan_comm_groups (nccl_layout.h).
#include "gpu/nccl_layout.h"

#include <fmt/format.h>

#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

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

std::vector<int> dp_group_devices(const Plan& plan, int section, int64_t stage, int gpus, int64_t tp_rank) {
  const SectionPlan& s = plan.sections.at(size_t(section));
  std::vector<int> devices;
  for (int64_t r = 0; r < s.dp; ++r) devices.push_back(physical_device(section_device(s, stage, r, tp_rank), gpus));
  return devices;
}

std::vector<int> tp_group_devices(const Plan& plan, int section, int64_t stage, int64_t replica, int gpus) {
  const SectionPlan& s = plan.sections.at(size_t(section));
  std::vector<int> devices;
  for (int64_t t = 0; t < s.tp; ++t) devices.push_back(physical_device(section_device(s, stage, replica, t), gpus));
  return devices;
}

namespace {

bool distinct(const std::vector<int>& devices) { return std::set<int>(devices.begin(), devices.end()).size() == devices.size(); }

}  // namespace

std::string nccl_group_refusal(const Plan& plan, int section, int64_t stage, const std::string& name, int gpus,
                               bool nccl_built) {
  const SectionPlan& s = plan.sections.at(size_t(section));
  // tp first: once a tp group fits, gpus / tp >= 1 replicas can
  for (const auto& [kind, size] : {std::pair{"tp", s.tp}, std::pair{"dp", s.dp}}) {
    if (size <= 1) continue;
    if (!nccl_built)
      return fmt::format("section '{}': {} = {} on the CUDA backend needs NCCL, and this build has none (nccl.h and "
                         "libnccl not found in the CUDA prefix); use {} = 1",
                         name, kind, size, kind);
    const bool dp = std::string_view(kind) == "dp";
    for (int64_t i = 0; i < (dp ? s.tp : s.dp); ++i)
      if (!distinct(dp ? dp_group_devices(plan, section, stage, gpus, i) : tp_group_devices(plan, section, stage, i, gpus)))
        return fmt::format("section '{}': {} = {} on the CUDA backend needs {} distinct GPUs for each {} group (one "
                           "NCCL rank per GPU), {} CUDA device(s) found; use {} <= {}",
                           name, kind, size, size, kind, gpus, kind, gpus / (dp ? s.tp : 1));
  }
  return "";
}

std::string nccl_tp_refusal(const Plan& plan, const std::vector<std::string>& section_names) {
  for (size_t si = 0; si < plan.sections.size(); ++si)
    if (plan.sections[si].tp > 1)
      return fmt::format("section '{}': tp = {} on the CUDA backend over processes is not built yet (a replica's tp "
                         "group is NCCL within one process); use one process or tp = 1",
                         section_names.at(si), plan.sections[si].tp);
  return "";
}

std::string nccl_refusal(const Plan& plan, const std::vector<std::string>& section_names, int gpus, bool nccl_built) {
  for (size_t si = 0; si < plan.sections.size(); ++si)
    for (int64_t k = 0; k < plan.sections[si].pp; ++k)
      if (std::string why = nccl_group_refusal(plan, int(si), k, section_names.at(si), gpus, nccl_built); !why.empty())
        return why;
  return "";
}

std::string shared_gpu(const std::vector<std::string>& gpu_of_rank) {
  for (size_t a = 0; a < gpu_of_rank.size(); ++a)
    for (size_t b = a + 1; b < gpu_of_rank.size(); ++b)
      if (gpu_of_rank[a] == gpu_of_rank[b]) return fmt::format("ranks {} and {} share the GPU {}", a, b, gpu_of_rank[a]);
  return "";
}

}  // namespace maestro
