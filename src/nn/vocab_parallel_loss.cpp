// Vocabulary-parallel cross-entropy and KL (see vocab_parallel_loss.h).
#include "nn/vocab_parallel_loss.h"

#include <fmt/format.h>

#include <algorithm>

namespace maestro {

namespace {

// The reduced max of `count` row blocks of N rows each over the ranks:
// local[count·N] -> mx[count·N] (every rank's maxima gathered, then the max).
void reduce_max(Backend& b, Communicator& comm, ForwardContext& ctx, float* mx, const float* local, int64_t n) {
  const int64_t R = comm.size();
  float* parts = ctx.take(R * n);  // [R, n]
  comm.all_gather(parts, local, size_t(R * n));
  b.max_of_parts(mx, parts, R, n);
}

}  // namespace

void vocab_parallel_loss(Backend& b, Communicator& comm, const Section& s, ForwardContext& ctx,
                         const std::vector<std::span<const float>>& teacher_logits, int64_t n_global, double* raw) {
  const int64_t Nt = ctx.text_offsets.back(), V = ctx.vocab, v0 = ctx.vocab_first, valid = ctx.vocab_valid;
  const int32_t* targets = ctx.targets.data();
  const float* x = ctx.logits;  // [Nt, V] this rank's columns
  const float* teacher = nullptr;
  for (size_t k = 0; k < s.loss.size(); ++k) {
    const LossTerm& term = s.loss[k];
    const float scale = float(term.weight / double(n_global));
    if (term.kind == LossKind::CrossEntropy) {
      float* local = ctx.take(Nt);
      float* mx = ctx.take(Nt);
      float* se_tx = ctx.take(2 * Nt);  // [2, Nt] sum of exponentials, target logit
      b.shard_row_max(local, x, Nt, V, valid, 1.0f);
      reduce_max(b, comm, ctx, mx, local, Nt);
      b.shard_sumexp(se_tx, se_tx + Nt, x, targets, mx, Nt, V, valid, v0, 1.0f);
      comm.all_reduce(se_tx, size_t(2 * Nt));
      b.shard_cross_entropy(raw + k, ctx.dlogits, x, targets, mx, se_tx, se_tx + Nt, Nt, V, valid, v0, scale);
      continue;
    }
    if (!teacher)  // this rank's columns of the teacher's kept text rows   [Nt, V]
      teacher = pack_teacher_logits(s, b, ctx, teacher_logits, std::get<TransformerSpec>(s.model.spec).vocab);
    const float inv_t = float(1.0 / term.temperature);
    float* local = ctx.take(2 * Nt);  // [2, Nt] student, teacher
    float* mx = ctx.take(2 * Nt);
    float* se = ctx.take(2 * Nt);
    b.shard_row_max(local, x, Nt, V, valid, inv_t);
    b.shard_row_max(local + Nt, teacher, Nt, V, valid, inv_t);
    reduce_max(b, comm, ctx, mx, local, 2 * Nt);
    b.shard_sumexp(se, nullptr, x, targets, mx, Nt, V, valid, v0, inv_t);
    b.shard_sumexp(se + Nt, nullptr, teacher, targets, mx + Nt, Nt, V, valid, v0, inv_t);
    comm.all_reduce(se, size_t(2 * Nt));
    float* kl = ctx.take(Nt);
    b.shard_kl(kl, ctx.dlogits, x, teacher, targets, mx, se, mx + Nt, se + Nt, Nt, V, valid,
               float(term.temperature), scale);
    comm.all_reduce(kl, size_t(Nt));
    b.masked_row_sum(raw + k, kl, targets, Nt);
  }
}

}  // namespace maestro
