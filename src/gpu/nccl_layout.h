// The NCCL communicators a plan needs (plan/plan.h): host code, unit-tested
// here. A section's devices [first_device, first_device + tp·pp·dp) are
// numbered Megatron-style, tensor-parallel ranks innermost, then data-
// parallel replicas, pipeline stages outermost:
//   device(stage k, replica r, tp rank t) = first_device + (k·dp + r)·tp + t.
// Each (section, stage, tp rank) has a dp group over its replicas (gradient
// all-reduce, ZeRO-1 reduce-scatter/all-gather) and each (section, stage,
// replica) a tp group over its tp ranks; groups of one member are left out
// (nothing to communicate). A group's NCCL rank i is its devices[i].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace maestro {

struct CommGroup {
  enum class Kind { DataParallel, TensorParallel } kind;
  int section = 0;
  int64_t stage = 0;
  int64_t index = 0;         // the tp rank (dp groups) or the replica (tp groups)
  std::vector<int> devices;  // NCCL rank i -> device
  std::string name() const;  // "section 1 stage 0 dp group (tp rank 1)"
};

// Device of one rank of a section (the numbering above).
int64_t section_device(const SectionPlan& s, int64_t stage, int64_t replica, int64_t tp_rank);

// Every group of every section of the plan, in section, stage, kind order.
// Throws std::invalid_argument for a section whose devices count differs from tp·pp·dp.
std::vector<CommGroup> plan_comm_groups(const Plan& plan);

}  // namespace maestro
