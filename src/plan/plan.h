// Plan: where and how every section runs — its devices and parallel degrees
// (tp, pp, dp) and its micro-batch size — plus the in-flight cap that bounds
// activation memory. The planner (planner.h) produces it; the wavefront
// scheduler, the simulator and the runtime read it. Plain data, no logic
// beyond the device layout below.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace maestro {

// One section's resources. Its devices are [first_device, first_device +
// devices), devices = tp·pp·dp. Sections may share devices (co-located):
// their work then serialises on them. Layout inside the range: replica r,
// pipeline stage s owns the tp devices starting at
// first_device + (r·pp + s)·tp (see stage_first_device).
struct SectionPlan {
  int64_t first_device = 0;
  int64_t devices = 1;
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1;
  // ZeRO-1 (Megatron's --use-distributed-optimizer): each of the dp replicas
  // keeps 1/dp of the fp32 master weights and Adam moments; the gradients are
  // reduce-scattered and the updated weights all-gathered instead of one
  // all-reduce. Only meaningful for a train section with dp > 1.
  bool shard_optimizer = false;
  // Activation recomputation chosen by the planner for a train section with
  // `recompute = auto`: 0 none; 1 half of its layers, 2 all of them — a
  // recomputed layer keeps only its input and runs its forward again in
  // backward (4/3 of the compute for a fraction of the memory;
  // `recomputed_layers` turns this into layers); 3 the stage as a whole
  // (`recomputes_stage`: each pipeline stage keeps only its input between a
  // micro-batch's forward and backward, and runs its whole forward again
  // just before the backward — the same compute as 2, one layer input held
  // instead of one per layer, Megatron-LM's `--recompute-method uniform`
  // with a stage's layers as one chunk). A section with `recompute = true |
  // N` recomputes whatever this says.
  int64_t recompute_level = 0;

  bool operator==(const SectionPlan&) const = default;
};


// How the wavefront scheduler packs each step (docs/scheduler.md); each
// lever can be switched off for an ablation (bench/plan_ablation).
struct ScheduleLevers {
  // Samples reordered: dealt to replicas longest first by cost, each
  // replica's list in the order the consumers need them. Off: loader order,
  // consecutive samples to the replicas in turn.
  bool reorder = true;
  // Per step, each section's micro-batches cut by tokens (tiles, frames),
  // not by sample count: up to micro_batch × this step's mean tokens per
  // active sample (never more than the memory bound's micro_batch largest
  // samples). Off: micro_batch samples each.
  bool token_micro_batches = true;
  // Per-step adaptation (with token micro-batches): each step, each
  // section's token budget chosen from that step's samples — from
  // micro_batch × the step's mean tokens up to the memory bound (the tokens
  // of the step's micro_batch largest samples), doubling — by the cost
  // model's estimate of its busiest replica (forward + backward + pipeline
  // fill). Off: micro_batch × the mean. The planner keeps whichever
  // simulates faster on step 0 (docs/planner.md, step 6).
  bool per_step_micro_batch = true;
  // Each train section's dp gradient reduction on its devices' communication
  // link, not their compute: it starts when the section's last backward
  // starts (Megatron's --overlap-grad-reduce: the buckets of the last
  // accumulation micro-batch reduced as its backward produces them) and ends
  // no earlier than that backward; sections sharing devices take turns on
  // the link. Off (the default; docs/PERFORMANCE.md §3 shows why): after the
  // section's last task, on the compute devices.
  bool overlap_grad_sync = false;
  // Devices shared by several tasks run, among those ready for them, the one
  // with the longest remaining path to the step's end first (its duration
  // plus its longest chain of dependents), and a task takes its devices only
  // when all of them are free. Off: first ready, first served, a task
  // holding its devices from the moment it is ready.
  bool critical_path_first = true;
  // With reorder: a consumer whose producer's every replica holds several of
  // its own on the same devices (a tp 8 teacher over tp 2 students) deals
  // its samples by the producer's replicas as groups, balanced by both
  // sections' costs, and the producer runs each sample in the group that
  // consumes it (docs/scheduler.md, step 4). Off: the producer deals its
  // own samples by LPT, its outputs crossing to other groups. The planner
  // keeps whichever simulates faster on step 0.
  bool host_groups = true;
  // With reorder: a producer's samples due in the same round are kept
  // together by the consumer micro-batch that takes them (the groups
  // largest first by their largest sample's cost), so that a consumer
  // micro-batch waits for as few of the producer's micro-batches as the
  // counts allow (a ViT at micro-batch 8 feeding a projector at 2). Off:
  // largest first by each sample's own cost. The planner keeps whichever
  // the chosen plan simulates faster over the sampled steps.
  bool consumer_groups = false;

  bool operator==(const ScheduleLevers&) const = default;

  // Each lever by its field's name, in declaration order, with its setting
  // (what --print plan and --simulate --json show).
  std::vector<std::pair<const char*, bool>> settings() const {
    return {{"reorder", reorder},
            {"token_micro_batches", token_micro_batches},
            {"per_step_micro_batch", per_step_micro_batch},
            {"overlap_grad_sync", overlap_grad_sync},
            {"critical_path_first", critical_path_first},
            {"host_groups", host_groups},
            {"consumer_groups", consumer_groups}};
  }
};

struct Plan {
  std::vector<SectionPlan> sections;  // index = Program::sections index
  ScheduleLevers levers;
  // Micro-batches a section replica may have in flight at once, counted on
  // the sinks' replicas (producers start up to two such windows ahead; see
  // Frontier in schedule.h); bounds activation memory; 0 = unbounded. It
  // never stalls a step.
  int64_t in_flight_cap = 0;
  // Devices of the cluster (the lower bound divides work by it); 0 = the
  // devices the sections span (device_count()).
  int64_t cluster_devices = 0;

  // cluster_devices, or max over sections of first_device + devices.
  int64_t device_count() const {
    int64_t n = cluster_devices;
    for (const SectionPlan& s : sections) n = s.first_device + s.devices > n ? s.first_device + s.devices : n;
    return n;
  }

  bool operator==(const Plan&) const = default;
};

// First of the tp devices that replica `replica`, stage `stage` runs on.
inline int64_t stage_first_device(const SectionPlan& p, int64_t replica, int64_t stage) {
  return p.first_device + (replica * p.pp + stage) * p.tp;
}

}  // namespace maestro
