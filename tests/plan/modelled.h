// A program of models/ on a cluster of configs/ under the roofline cost
// model, with step 0's batch: the common setup of the plan tests. Not
// copyable (the graph points at the program, the cost model at the graph).
// Header-only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "graph/section_graph.h"
#include "plan/cluster.h"
#include "plan/roofline_cost.h"
#include "support/test_programs.h"

namespace maestro::test {

struct Modelled {
  Program program;
  SectionGraph g;
  Cluster cl;
  RooflineCost cost;
  std::vector<Batch> batches;  // step 0's

  // `edit` changes the loaded program before the graph is built.
  Modelled(const std::string& model, const std::string& cluster, const std::function<void(Program&)>& edit = {})
      : program(edited(load(model), edit)),
        g(build_graph(program)),
        cl(make_cluster(load_runtime_config(cluster))),
        cost(g, cl),
        batches{Sampler(program.data, program.train.global_batch).batch(0)} {}
  Modelled(const Modelled&) = delete;
  Modelled& operator=(const Modelled&) = delete;

 private:
  static Program edited(Program p, const std::function<void(Program&)>& edit) {
    if (edit) edit(p);
    return p;
  }
};

}  // namespace maestro::test
