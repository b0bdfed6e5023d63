// The planner's threads (PlannerOptions::threads): the search simulates its
// next candidates ahead on several threads and still takes them in its own
// order, so the plan is the one a single thread finds, for any number of
// threads. Its own small executable (unit.plan_threads), so that `make
// test-tsan` builds only this file of the planner's tests under
// ThreadSanitizer.
#define BOOST_TEST_MODULE plan_threads
#include <boost/test/unit_test.hpp>

#include <atomic>

#include "data/sampler.h"
#include "plan/modelled.h"
#include "plan/planner.h"

using namespace maestro;
using maestro::test::Modelled;

BOOST_AUTO_TEST_SUITE(planner_threads)

// Two searches that move (the coordinate search takes other shapes than its
// starts', and kd_32b_to_1_5b's best plan is swept again), with the later
// batches' memory checked and the finalists ranked by their mean: every
// path that simulates ahead.
BOOST_AUTO_TEST_CASE(the_plan_is_the_same_on_any_number_of_threads) {
  for (const char* model : {"models/llava15_7b.sect", "models/kd_32b_to_1_5b.sect"}) {
    BOOST_TEST_CONTEXT(model) {
      const Modelled m(model, "configs/h100x8.toml");
      const Sampler sampler(m.program.data, m.program.train.global_batch);
      PlannerOptions options;
      options.later_batches = {sampler.batch(1), sampler.batch(2), sampler.batch(3)};
      options.threads = 1;
      int64_t alone = 0;
      options.on_simulation = [&](int64_t n) { alone = n; };
      const Plan one = plan_program(m.g, m.cl, m.cost, m.batches[0], options);
      BOOST_TEST(alone > 30);  // a search, not a few starts (llava15_7b: 42; more are cut short by a bound)
      for (int64_t threads : {2, 5}) {
        BOOST_TEST_CONTEXT("threads " << threads) {
          options.threads = threads;
          // Called under the planner's lock, one call at a time, counting up.
          std::atomic<int64_t> last = 0;
          std::atomic<bool> in_order = true;
          options.on_simulation = [&](int64_t n) { in_order = in_order && n == ++last; };
          const Plan many = plan_program(m.g, m.cl, m.cost, m.batches[0], options);
          BOOST_TEST(bool(many == one));
          BOOST_TEST(in_order.load());
          // The search asks for the same simulations as on one thread;
          // some run ahead of it may go unused.
          BOOST_TEST(last.load() >= alone);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
