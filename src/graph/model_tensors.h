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

// Sum of numel() over model_tensors(model), counted in closed form (never
// enumerating the layers) with checked 64-bit arithmetic: throws
// std::overflow_error when it does not fit (the front end's limits,
// dsl/limits.h, keep every model it accepts well inside).
int64_t parameter_count(const ModelSpec& model);

// Pipeline stages (runtime `pp`): stage k of `stages` holds layers
// [k·L/stages, (k+1)·L/stages) (integer division: sizes differ by at most
// one, later stages the larger), stage 0 also the tensors before the first
// layer (embeddings), the last stage also those after the last layer (final
// norm, head). An mlp has no layer stack and runs as one stage.
struct LayerRange {
  int64_t first = 0, last = 0;  // [first, last)
};
int64_t layer_count(const ModelSpec& model);  // 0 for an mlp
// Throws std::invalid_argument when stages < 1, stage is out of range, or
// the model has fewer layers than stages (an mlp: more than one stage).
LayerRange stage_layers(const ModelSpec& model, int64_t stage, int64_t stages);
// model_tensors(model) restricted to one stage, in the same order.
std::vector<TensorShape> stage_tensors(const ModelSpec& model, int64_t stage, int64_t stages);

}  // namespace maestro
