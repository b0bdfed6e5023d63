// The repl actor: executes the debug REPL's commands (repl_command.h) for
// the front ends (src/cli/repl_*: the terminal and the socket service). It
// knows the run's actors only by handle and asks them: `topology`, `actor`,
// `wave` and `stats` send each a Describe and gather the ActorInfos (an actor
// that does not answer within a second is listed as such); `pause`,
// `resume`, `step`, `checkpoint` and `quit` are SteerRun requests to the
// scheduler. `sections`, `plan` and `graph` read the run's graph and plan,
// which are immutable while it runs. A new actor kind joins `topology` by
// answering Describe and being listed in ReplConfig::actors.
//
// Messages: a std::string (one command line) -> std::string (the answer,
// text or one line of JSON; an error starts with "error: ").
#pragma once

#include <caf/all.hpp>
#include <string>
#include <vector>

#include "graph/section_graph.h"
#include "plan/plan.h"

namespace maestro {

struct ReplConfig {
  const SectionGraph* graph = nullptr;  // outlives the actor
  const Plan* plan = nullptr;           // outlives the actor
  caf::actor scheduler, tracer;
  std::vector<caf::actor> actors;       // every actor that answers Describe, the scheduler first
};

caf::actor spawn_repl(caf::actor_system& sys, ReplConfig config);

// For a front end's own thread: sends one line to the repl actor and waits
// for the answer (a checkpoint can take a while: up to `timeout`).
std::string ask_repl(caf::actor_system& sys, const caf::actor& repl, const std::string& line,
                     caf::duration timeout = caf::duration{std::chrono::seconds(120)});

}  // namespace maestro
