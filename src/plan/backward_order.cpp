// chain_replica_backwards (see backward_order.h).
#include "plan/backward_order.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace maestro {

void chain_replica_backwards(Schedule& schedule) {
  std::map<std::tuple<int, int64_t, int64_t>, int64_t> previous;  // (section, replica, stage) -> last backward
  for (Task& t : schedule.tasks) {
    if (t.kind != Task::Kind::Backward) continue;
    auto [it, first] = previous.try_emplace({t.section, t.replica, t.stage}, t.id);
    if (first) continue;
    if (std::find(t.deps.begin(), t.deps.end(), it->second) == t.deps.end()) {
      t.deps.insert(std::upper_bound(t.deps.begin(), t.deps.end(), it->second), it->second);
    }
    it->second = t.id;
  }
  schedule.waves = compute_waves(schedule.tasks);
}

}  // namespace maestro
