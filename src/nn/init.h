// Parameter initialisation from a counter-based generator: element i of a
// tensor is a pure function of (seed, the tensor's full name, i) — splitmix64
// over a key mixing the three, then Box–Muller — so every machine, thread
// count and replica gets the same values, and two sections (whose full
// names "<section>.<tensor>" differ) get different ones.
//   weights and embeddings: normal(0, 0.02); biases: 0; norm weights: 1
//   (a 1-D tensor named "*.bias" is a bias, any other 1-D "*.weight" a norm
//   weight, the ViT's class_embedding is an embedding).
#pragma once

#include <cstdint>
#include <string>

#include "graph/model_tensors.h"

namespace maestro {

uint64_t splitmix64(uint64_t x);

// Fills dst[t.numel()] with tensor t's initial values; full_name is
// "<section>.<t.name>". A big tensor fills on up to `threads` threads
// (0: one per core) — the same values.
void init_tensor(float* dst, const TensorShape& t, const std::string& full_name, uint64_t seed, int threads = 0);

}  // namespace maestro
