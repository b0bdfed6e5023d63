// Short human renderings of Program parts shared by the check and print
// commands: parameter counts ("303.51M"), a model with its key dimensions,
// the loss, the parallel plan, the detected backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/runtime_config.h"
#include "dsl/program.h"

namespace maestro {

// 999 → "999", 1234 → "1.23K", 303507456 → "303.51M", 6738415616 → "6.74B".
std::string format_count(int64_t n);
// `n` in the unit format_count would pick for `scale` (so a list shares one unit).
std::string format_count_in_unit_of(int64_t n, int64_t scale);
// "vit L24 h1024 heads16 ffn4096 p14/336"
std::string model_summary(const ModelSpec& model);
// "cross_entropy + 0.5*kl(T=2)", "-" for none
std::string loss_summary(const std::vector<LossTerm>& loss);
// "tp1 pp1 dp auto"
std::string parallel_summary(const ParallelSpec& parallel);
// " (recompute)", " (recompute 12/24)", " (recompute auto)" or "" as written.
std::string recompute_label(const Section& section);
// "text, image", "-" for none
std::string consumes_summary(const std::vector<Modality>& consumes);
// What `backend = "auto"` means here (gpu/backend_factory.h: "cpu" until a CUDA backend exists).
std::string detected_backend(const RuntimeConfig& config);

}  // namespace maestro
