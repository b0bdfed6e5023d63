// plan_comm_groups (nccl_layout.h).
#include "gpu/nccl_layout.h"

#include <fmt/format.h>

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

}  // namespace maestro
