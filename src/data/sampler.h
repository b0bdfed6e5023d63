// Sampler: draws the global batch of step k from the program's data block.
// synthetic(seed) is counter-based — every field of sample `id` comes from
// splitmix64 keyed by (seed, id, field) — so the same seed gives the same
// samples on every machine, independent of threads or the standard library
// (no std:: distributions). For files(manifest) the planner samples from the
// mix and distributions when the .sect gives them (planning only).
#pragma once

#include <cstdint>

#include "data/batch.h"

namespace maestro {

class Sampler {
 public:
  // Throws std::invalid_argument when the data block can't be sampled
  // (no mix, or a modality in the mix with no size distribution).
  explicit Sampler(const DataSpec& data, int64_t global_batch);

  Batch batch(int64_t step) const;  // samples ids step*global_batch + i
  Sample sample(int64_t id) const;

  // Expected share of samples carrying modality m, from the mix weights.
  double modality_share(Modality m) const;

 private:
  DataSpec data_;
  int64_t global_batch_;
  double total_weight_ = 0;
};

// Counter-based uniform draw in [0, 1) for (seed, id, field).
double uniform01(uint64_t seed, int64_t id, uint64_t field);

// A value of `d` from uniforms u1, u2 in [0, 1) (lognormal uses Box–Muller).
double draw(const Distribution& d, double u1, double u2);

}  // namespace maestro
