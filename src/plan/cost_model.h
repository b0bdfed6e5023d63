// CostModel: the times and memory the simulator and the wavefront scheduler
// need, as an interface. The `cost` model (device table × graph/counts.h)
// implements it for real devices; tests implement it with fixed numbers.
// The simulator asks nothing else, so a schedule can be simulated on any
// cost model.
//
// Conventions: `samples` is one micro-batch (pointers into the step's
// Batch, in micro-batch order); times are seconds of one pipeline stage of
// one replica, i.e. of tp devices working together (the section's work split
// evenly over its pp stages; the stage's hand-off to the next stage is
// included). A cost model must be monotone — adding a sample to a
// micro-batch never makes it cheaper — and never faster than peak_device_s
// allows; the lower bound relies on both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "dsl/program.h"
#include "plan/plan.h"

namespace maestro {

// How many of section `s`'s layers recompute their activations in backward
// under plan shape `p` (spread evenly, `recomputes_layer`): the program's
// `recompute`, or with `auto` the planner's choice. 0 for a frozen section,
// and for a stage recomputed whole (its layers keep nothing to recompute from).
inline int64_t recomputed_layers(const Section& s, const SectionPlan& p) {
  if (s.mode != Mode::Train) return 0;
  if (!s.recompute_auto) return s.recompute;
  return p.recompute_level >= 3 ? 0 : s.model.layers() * p.recompute_level / 2;
}

// Whether each pipeline stage of section `s` keeps only its input between a
// micro-batch's forward and backward and runs its forward again before the
// backward (SectionPlan::recompute_level 3; the runtime: SectionRunner).
inline bool recomputes_stage(const Section& s, const SectionPlan& p) {
  return s.mode == Mode::Train && s.recompute_auto && p.recompute_level >= 3;
}

// "", " recompute" (every layer), " recompute 24/48" or " recompute stage"
// for plan listings.
inline std::string recompute_note(const Section& s, const SectionPlan& p) {
  if (recomputes_stage(s, p)) return " recompute stage";
  const int64_t k = recomputed_layers(s, p), n = s.model.layers();
  if (k == 0) return "";
  return k >= n ? " recompute" : " recompute " + std::to_string(k) + "/" + std::to_string(n);
}

class CostModel {
 public:
  virtual ~CostModel() = default;

  // One stage's forward of the micro-batch.
  virtual double forward_s(int section, const std::vector<const Sample*>& samples, const SectionPlan& plan) const = 0;
  // One stage's backward of the micro-batch, recompute included when the
  // section recomputes (`recomputes`). Frozen sections: 0 (never asked).
  virtual double backward_s(int section, const std::vector<const Sample*>& samples, const SectionPlan& plan) const = 0;
  // Moving the flow's tensors for these samples from the producer's devices
  // to the consumer's (spliced embeddings or logits; the same bytes go back
  // as gradients on an activations flow).
  virtual double transfer_s(const Flow& flow, const std::vector<const Sample*>& samples, const SectionPlan& from,
                            const SectionPlan& to) const = 0;
  // The bytes of those tensors (each way), where they wait for their
  // consumer in the memory of the device that made them
  // (SimOptions::resident_handoff_budget). 0 unless a cost model says.
  virtual int64_t transfer_bytes(const Flow& flow, const std::vector<const Sample*>& samples) const {
    (void)flow, (void)samples;
    return 0;
  }
  // The bytes one pipeline stage hands the next for these samples (forward:
  // its output rows; backward: their gradient, as many), where they wait in
  // the device memory of the stage that made them
  // (SimOptions::resident_handoff_budget). 0 unless a cost model says.
  virtual int64_t stage_handoff_bytes(int section, const std::vector<const Sample*>& samples,
                                      const SectionPlan& plan) const {
    (void)section, (void)samples, (void)plan;
    return 0;
  }
  // End of step, train sections only: data-parallel gradient all-reduce, then
  // the optimizer step, on the section's devices.
  virtual double grad_sync_s(int section, const SectionPlan& plan) const = 0;
  virtual double optimizer_s(int section, const SectionPlan& plan) const = 0;

  // Per device of the section: parameter state (weights, and for train
  // sections gradients, master copy and Adam moments) split tp·pp ways.
  virtual int64_t weights_bytes_per_device(int section, const SectionPlan& plan) const = 0;
  // Per device of one stage: what one in-flight micro-batch keeps alive
  // while its forward or its backward runs.
  virtual int64_t activation_bytes(int section, const std::vector<const Sample*>& samples,
                                   const SectionPlan& plan) const = 0;
  // What it keeps from its forward's end to its backward's start: the same,
  // except for a stage recomputed whole (recomputes_stage), which keeps its input.
  virtual int64_t kept_activation_bytes(int section, const std::vector<const Sample*>& samples,
                                        const SectionPlan& plan) const {
    return activation_bytes(section, samples, plan);
  }

  // A micro-batch's four costs at once, as the simulator asks for them:
  // forward_s, backward_s (0 when frozen), activation_bytes and
  // kept_activation_bytes, the same numbers. A cost model may share their
  // work (RooflineCost: the samples' token counts, the stage's forward).
  struct MicroBatchCosts {
    double forward_s = 0, backward_s = 0;
    int64_t activation_bytes = 0, kept_activation_bytes = 0;
  };
  virtual MicroBatchCosts micro_batch_costs(int section, const std::vector<const Sample*>& samples,
                                            const SectionPlan& plan) const {
    return {forward_s(section, samples, plan), backward_s(section, samples, plan),
            activation_bytes(section, samples, plan), kept_activation_bytes(section, samples, plan)};
  }
  // Device-seconds of the sample's whole work in the section (forward,
  // backward, recompute) at the cost model's peak efficiency (the device's peak FLOP rate
  // times its best GEMM efficiency): the lower bound's work term (docs/architecture.md).
  virtual double peak_device_s(int section, const Sample& sample) const = 0;
};

// Activation bytes per device of one stage with `count` micro-batches of
// these samples in flight: each keeps what it keeps between its forward
// and backward, and one at a time (the stage runs one task at once) holds
// all of its activations.
inline int64_t in_flight_activation_bytes(const CostModel& cost, int section, const std::vector<const Sample*>& samples,
                                          const SectionPlan& plan, int64_t count) {
  const int64_t all = cost.activation_bytes(section, samples, plan);
  const int64_t kept = cost.kept_activation_bytes(section, samples, plan);
  return count * kept + (count > 0 ? all - kept : 0);
}

}  // namespace maestro
