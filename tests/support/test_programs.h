// Programs for the unit tests: a Section built directly (no parser), and a
// .sect file loaded through the front end (the test stops if it does not
// load). Header-only; every suite has tests/ on its include path.
#pragma once

#include <boost/test/unit_test.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dsl/frontend.h"
#include "dsl/program.h"

namespace maestro::test {

inline Section section(std::string name, ModelSpec model, std::vector<Modality> consumes = {},
                       Condition when = {}) {
  Section s;
  s.name = std::move(name);
  s.model = std::move(model);
  s.consumes = std::move(consumes);
  s.when = std::move(when);
  return s;
}

inline Program load(const std::string& path) {
  Diagnostics diags;
  std::optional<Program> p = load_program(path, diags);
  BOOST_REQUIRE_MESSAGE(p, "cannot load " + path);
  return std::move(*p);
}

}  // namespace maestro::test
