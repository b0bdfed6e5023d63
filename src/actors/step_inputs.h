// StepInputs: where each step's data comes from — the batch of sample
// metadata (synthetic(seed) through the data Sampler, or a files(manifest)
// Manifest) and the contents every section reads of its samples (token ids
// for the vocabulary of each transformer that consumes text, pixels for each
// vit, mel frames for each audio encoder), plus the loss normaliser of each
// loss section. The data loader actor calls step(); pure and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/step_data.h"
#include "data/manifest.h"
#include "graph/section_graph.h"

namespace maestro {

class StepInputs {
 public:
  // The sections (their models and which samples they run on) come from
  // the graph, which must outlive this; `data` is the program's data block.
  // Throws DataError for an unreadable manifest or a token outside a vocabulary.
  StepInputs(const SectionGraph& graph, const DataSpec& data, int64_t global_batch);
  ~StepInputs();
  StepInputs(StepInputs&&) noexcept;

  std::shared_ptr<const StepData> step(int64_t step) const;
  uint64_t data_seed() const { return data_seed_; }  // the data block's seed (checkpoints record it)

  // Manifest lines left out by on_bad_sample = "skip", each "manifest:line: reason".
  const std::vector<std::string>& skipped_samples() const;

 private:
  Batch batch(int64_t step) const;
  const SectionGraph& graph_;
  uint64_t data_seed_;
  int64_t global_batch_;
  std::optional<Manifest> manifest_;
  struct SamplerBox;
  std::unique_ptr<SamplerBox> sampler_;
};

}  // namespace maestro
