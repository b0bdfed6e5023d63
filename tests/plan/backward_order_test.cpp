// chain_replica_backwards (plan/backward_order.h): on the example models'
// wavefront and monolithic schedules with dp 2 and pp 2, every section
// replica's backwards (per stage) finish in issue order whatever order the
// other tasks complete in, nothing else changes, and the schedule stays
// valid. Without the chain, the same random completions reorder them.
#include <boost/test/unit_test.hpp>

#include <map>
#include <random>
#include <tuple>

#include "data/sampler.h"
#include "plan/backward_order.h"
#include "plan/frontier.h"
#include "plan/schedule.h"
#include "support/test_programs.h"
#include "staged_plan.h"
#include "token_cost.h"

namespace maestro {
namespace {

// Completes running tasks in random order; per (section, replica, stage),
// whether the backwards finished in issue order on every one of `runs` runs.
bool backwards_finish_in_issue_order(const Schedule& sch, std::mt19937_64& rng, int runs) {
  for (int run = 0; run < runs; ++run) {
    Frontier f(sch);
    std::vector<int64_t> running;
    std::map<std::tuple<int, int64_t, int64_t>, int64_t> last_done;
    while (!f.finished()) {
      for (int64_t id : f.take_ready()) running.push_back(id);
      BOOST_REQUIRE(!running.empty());
      const size_t k = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
      const Task& t = sch.tasks[size_t(running[k])];
      running.erase(running.begin() + std::ptrdiff_t(k));
      if (t.kind == Task::Kind::Backward) {
        auto [it, first] = last_done.try_emplace({t.section, t.replica, t.stage}, t.id);
        if (!first && it->second > t.id) return false;
        it->second = t.id;
      }
      f.complete(t.id);
    }
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(chained_backwards_finish_in_issue_order) {
  std::mt19937_64 rng(11);
  for (const char* file : {"models/tiny_mllm.sect", "models/tiny_kd.sect"}) {
    BOOST_TEST_CONTEXT(file) {
      const Program p = test::load(file);
      const SectionGraph g = build_graph(p);
      const Plan plan = test::staged_plan(p, 2, 2);
      const test::TokenCost cost(g);
      const Batch batch = Sampler(p.data, 32).batch(0);
      for (const Schedule& built : {wavefront_schedule(g, plan, cost, batch), monolithic_schedule(g, plan, batch, 4)}) {
        Schedule chained = built;
        chain_replica_backwards(chained);
        const auto bad = validate(g, plan, chained);
        BOOST_TEST(bad.empty(), (bad.empty() ? "" : bad.front()));
        BOOST_TEST(backwards_finish_in_issue_order(chained, rng, 20));
        // Only backwards gain dependencies, one each at most: the previous
        // backward of their replica and stage.
        std::map<std::tuple<int, int64_t, int64_t>, int64_t> previous;
        for (const Task& t : chained.tasks) {
          const Task& before = built.tasks[size_t(t.id)];
          if (t.kind == Task::Kind::Forward) {
            BOOST_TEST(t.deps == before.deps);
            continue;
          }
          auto [it, first] = previous.try_emplace({t.section, t.replica, t.stage}, t.id);
          if (!first) {
            BOOST_TEST(std::count(t.deps.begin(), t.deps.end(), it->second) == 1);
            it->second = t.id;
          }
          BOOST_TEST(t.deps.size() <= before.deps.size() + 1);
          BOOST_TEST(std::is_sorted(t.deps.begin(), t.deps.end()));
        }
        BOOST_TEST(chained.waves == compute_waves(chained.tasks));
      }
    }
  }
}

// The test above can fail: the unchained wavefront schedule lets random
// completions reorder a replica's backwards.
BOOST_AUTO_TEST_CASE(unchained_backwards_do_reorder) {
  std::mt19937_64 rng(11);
  const Program p = test::load("models/tiny_mllm.sect");
  const SectionGraph g = build_graph(p);
  const Plan plan = test::staged_plan(p, 2, 2);
  const test::TokenCost cost(g);
  const Schedule built = wavefront_schedule(g, plan, cost, Sampler(p.data, 32).batch(0));
  BOOST_TEST(!backwards_finish_in_issue_order(built, rng, 20));
}

}  // namespace maestro
