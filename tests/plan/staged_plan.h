// A plan for the plan tests: every section dp 2 and, where it has layers to
// split (not an mlp), two pipeline stages; micro-batch `micro_batch`;
// co-located on one device range. Header-only.
#pragma once

#include "dsl/program.h"
#include "plan/plan.h"

namespace maestro::test {

inline Plan staged_plan(const Program& p, int64_t micro_batch, int64_t in_flight_cap) {
  Plan plan;
  for (const Section& s : p.sections) {
    const int64_t pp = std::holds_alternative<MlpSpec>(s.model.spec) ? 1 : 2;
    plan.sections.push_back(SectionPlan{0, 2 * pp, 1, pp, 2, micro_batch});
  }
  plan.in_flight_cap = in_flight_cap;
  return plan;
}

}  // namespace maestro::test
