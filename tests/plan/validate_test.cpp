// validate() checks the dependency rules on its own (schedule.cpp,
// missing_dependencies), not with the builders' rule helpers: a schedule
// with any single rule dependency removed, or one pointing at the wrong
// pipeline stage (the bugs a builder could have), is reported, naming the
// task and what it lacks.
#include <boost/test/unit_test.hpp>

#include <fmt/format.h>

#include "data/sampler.h"
#include "plan/schedule.h"
#include "support/test_programs.h"
#include "staged_plan.h"
#include "token_cost.h"

namespace maestro {
namespace {

bool mentions(const std::vector<std::string>& bad, const std::string& what) {
  for (const std::string& line : bad)
    if (line.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

// The wavefront builder adds exactly the rules' dependencies, so dropping
// any one of them must be caught.
BOOST_AUTO_TEST_CASE(every_removed_dependency_is_reported) {
  for (const char* file : {"models/tiny_mllm.sect", "models/tiny_kd.sect"}) {
    BOOST_TEST_CONTEXT(file) {
      const Program p = test::load(file);
      const SectionGraph g = build_graph(p);
      const Plan plan = test::staged_plan(p, 3, 0);
      const test::TokenCost cost(g);
      const Schedule good = wavefront_schedule(g, plan, cost, Sampler(p.data, 24).batch(1));
      BOOST_REQUIRE(validate(g, plan, good).empty());
      int64_t removed = 0;
      for (const Task& t : good.tasks)
        for (size_t k = 0; k < t.deps.size(); ++k) {
          Schedule broken = good;
          const int64_t dropped = broken.tasks[size_t(t.id)].deps[k];
          broken.tasks[size_t(t.id)].deps.erase(broken.tasks[size_t(t.id)].deps.begin() + std::ptrdiff_t(k));
          broken.waves = compute_waves(broken.tasks);
          const auto bad = validate(g, plan, broken);
          BOOST_TEST_REQUIRE(!bad.empty(), "task " << t.id << " without dependency " << dropped << " passed");
          BOOST_TEST(mentions(bad, fmt::format("task {} (", t.id)));
          BOOST_TEST(mentions(bad, fmt::format(": task {}", dropped)));
          ++removed;
        }
      BOOST_TEST(removed > 20);
    }
  }
}

// A builder bug of the other kind: a consumer's forward (the vision
// projector's) waiting on the producer's first stage instead of its last (an earlier task, so every
// other check passes).
BOOST_AUTO_TEST_CASE(a_dependency_on_the_wrong_stage_is_reported) {
  const Program p = test::load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(p);
  const Plan plan = test::staged_plan(p, 3, 0);
  const test::TokenCost cost(g);
  Schedule sch = wavefront_schedule(g, plan, cost, Sampler(p.data, 24).batch(1));
  bool changed = false;
  for (Task& t : sch.tasks) {
    if (changed || t.kind != Task::Kind::Forward || t.stage != 0) continue;
    for (int64_t& d : t.deps) {
      const Task& producer = sch.tasks[size_t(d)];
      if (producer.section == t.section || plan.sections[size_t(producer.section)].pp < 2) continue;
      for (const Task& first : sch.tasks)
        if (first.section == producer.section && first.micro_batch == producer.micro_batch && first.stage == 0 &&
            first.kind == Task::Kind::Forward)
          d = first.id;
      changed = true;
      break;
    }
  }
  BOOST_REQUIRE(changed);
  sch.waves = compute_waves(sch.tasks);
  const auto bad = validate(g, plan, sch);
  BOOST_TEST(mentions(bad, "lacks its dependency on the forward of sample"), (bad.empty() ? "" : bad.front()));
}

}  // namespace maestro
