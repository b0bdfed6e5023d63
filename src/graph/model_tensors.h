// The parameter layout of every built-in model: each named tensor and its
// shape, in Hugging Face naming (sect-language.md, "Built-in models"). This is
// the single source of truth for parameter names and shapes: the engine
// allocates and loads weights in this order, the counts in counts.h sum it,
// and checkpoints use these names under the section's prefix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/program.h"

namespace maestro {

struct TensorShape {
  std::string name;            // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // linear weights [out, in]; biases and norms [n]
  int64_t numel() const;
};

// Every parameter tensor of the model, in a fixed order (embeddings, layers
// 0..L-1, final norm, head). Buffers that are not parameters (rotary and
// sinusoidal position tables) are not listed.
std::vector<TensorShape> model_tensors(const ModelSpec& model);

// Sum of numel() over model_tensors(model).
int64_t parameter_count(const ModelSpec& model);

}  // namespace maestro
