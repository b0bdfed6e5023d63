// The losses of a tensor-parallel transformer rank, whose logits are its
// vocabulary shard (section_model.h, TensorParallel): Megatron's
// vocabulary-parallel cross-entropy, and the same for the distillation KL.
// Only per-row statistics cross the ranks — the max (all-gathered, then the
// max of the parts), the sum of exponentials and the target logit (all-
// reduced) — never the logits themselves. Not for use outside nn/.
#pragma once

#include <span>
#include <vector>

#include "nn/model_impl.h"

namespace maestro {

// SectionModel::loss_terms on a tp rank (ctx.dlogits zeroed, at least one
// target position): raw[k] = term k's Σ over the target positions, the same
// on every rank; ctx.dlogits += this rank's columns of the gradient.
// teacher_logits[i]: sample i's teacher logits over the whole vocabulary
// [rows ≥ n_text, V]; this rank reads its columns.
void vocab_parallel_loss(Backend& b, Communicator& comm, const Section& s, ForwardContext& ctx,
                         const std::vector<std::span<const float>>& teacher_logits, int64_t n_global, double* raw);

}  // namespace maestro
