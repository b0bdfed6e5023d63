// The runtime's one transformation of a Schedule: each section replica's
// backwards, per pipeline stage, run one after the other in issue order.
// A replica accumulates (+=) every micro-batch's gradients into one buffer,
// and fp32 addition is not associative: with the backwards chained, the
// buffer sums them in the same order on every run whatever order other tasks
// finish in, so the same run twice gives bitwise-identical weights and
// losses (docs/runtime.md, "Determinism"). The simulator runs the schedule
// as built; the runtime runs it chained.
#pragma once

#include "plan/schedule.h"

namespace maestro {

// Adds to every backward task a dependency on the previous backward task of
// the same (section, replica, stage) in issue order, then recomputes the
// waves. Every added dependency precedes its task, so the schedule stays
// valid (validate()) when it was.
void chain_replica_backwards(Schedule& schedule);

}  // namespace maestro
