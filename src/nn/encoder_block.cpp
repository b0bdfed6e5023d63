// The pre-norm encoder layer's forward and hand-written backward, and the
// layer stack with optional recomputation (see encoder_block.h).
#include "nn/encoder_block.h"

namespace maestro {

EncoderActs EncoderActs::take(ForwardContext& ctx, const EncoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nf = N * d.F;
  return {ctx.take(N),  ctx.take(N),         ctx.take(nc), ctx.take(nq), ctx.take(nq), ctx.take(nq), ctx.take(nq),
          ctx.take(N * d.H), ctx.take(nc), ctx.take(N), ctx.take(N),   ctx.take(nc), ctx.take(nf), ctx.take(nf),
          ctx.take_bf16(nc), ctx.take_bf16(nq), ctx.take_bf16(nc), ctx.take_bf16(nf)};
}

EncoderScratch EncoderScratch::take(ForwardContext& ctx, const EncoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nf = N * d.F;
  return {ctx.take(nc), ctx.take(nq), ctx.take(nq), ctx.take(nq), ctx.take(nq),
          ctx.take(nf), ctx.take(nf), ctx.take(nc)};
}

void encoder_forward(Backend& b, const EncoderDims& d, const EncoderWeights& w, const Packing& pk,
                     EncoderActs& a, float* out, const float* x, float* tmp) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, F = d.F;
  b.layernorm_forward(a.ln1, a.mean1, a.rstd1, x, w.ln1_w.w, w.ln1_b.w, N, C, d.eps);
  const Operand ln1 = rounded_once(b, a.ln1, a.ln1_16, size_t(N * C));
  b.linear_forward(a.q, ln1, w.q_w.linear(), w.q_b.w, N, C, QD);
  b.linear_forward(a.k, ln1, w.k_w.linear(), w.k_b.w, N, C, QD);
  b.linear_forward(a.v, ln1, w.v_w.linear(), w.v_b.w, N, C, QD);
  b.attention_forward(a.att, a.lse, a.q, a.k, a.v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.H, d.D, false);
  b.linear_forward(tmp, rounded_once(b, a.att, a.att_16, size_t(N * QD)), w.o_w.linear(),
                   d.adds_replicated_bias ? w.o_b.w : nullptr, N, QD, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(a.mid, x, tmp, N * C);
  b.layernorm_forward(a.ln2, a.mean2, a.rstd2, a.mid, w.ln2_w.w, w.ln2_b.w, N, C, d.eps);
  b.linear_forward(a.h, rounded_once(b, a.ln2, a.ln2_16, size_t(N * C)), w.fc1_w.linear(), w.fc1_b.w, N, C, F);
  b.gelu_forward(a.g, a.h, N * F);
  b.linear_forward(tmp, rounded_once(b, a.g, a.g_16, size_t(N * F)), w.fc2_w.linear(),
                   d.adds_replicated_bias ? w.fc2_b.w : nullptr, N, F, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(out, a.mid, tmp, N * C);
}

void encoder_backward(Backend& b, const EncoderDims& d, const EncoderWeights& w, const Packing& pk,
                      const EncoderActs& a, EncoderScratch& s, float* dres, const float* x) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, F = d.F;
  // MLP: x_out = x_mid + fc2(gelu(fc1(ln2(x_mid))))
  // dres = d(x_out) here, d(x_mid) after ln2, d(x) after ln1. The first
  // write of each scratch gradient overwrites it (Grad::overwrite).
  b.linear_backward(Grad::overwrite(s.dg), w.fc2_w.grad_write(), w.fc2_b.grad_add(), dres, {a.g, a.g_16},
                    w.fc2_w.linear(), N, F, C);
  b.gelu_backward(Grad::overwrite(s.dh), s.dg, a.h, N * F);
  b.linear_backward(Grad::overwrite(s.dln), w.fc1_w.grad_write(), w.fc1_b.grad_add(), s.dh, {a.ln2, a.ln2_16},
                    w.fc1_w.linear(), N, C, F);
  if (d.tp) d.tp->all_reduce(s.dln, N * C);
  b.layernorm_backward(dres, w.ln2_w.grad_add(), w.ln2_b.grad_add(), s.dln, a.mid, w.ln2_w.w, a.mean2, a.rstd2, N, C);
  // attention: x_mid = x + out(att)
  b.linear_backward(Grad::overwrite(s.datt), w.o_w.grad_write(), w.o_b.grad_add(), dres, {a.att, a.att_16},
                    w.o_w.linear(), N, QD, C);
  b.attention_backward(Grad::overwrite(s.dq), Grad::overwrite(s.dk), Grad::overwrite(s.dv), s.datt, a.att, a.lse,
                       a.q, a.k, a.v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.H, d.D, false);
  b.linear_backward(Grad::overwrite(s.dln), w.q_w.grad_write(), w.q_b.grad_add(), s.dq, {a.ln1, a.ln1_16},
                    w.q_w.linear(), N, C, QD);
  b.linear_backward(s.dln, w.k_w.grad_write(), w.k_b.grad_add(), s.dk, {a.ln1, a.ln1_16}, w.k_w.linear(), N, C, QD);
  b.linear_backward(s.dln, w.v_w.grad_write(), w.v_b.grad_add(), s.dv, {a.ln1, a.ln1_16}, w.v_w.linear(), N, C, QD);
  if (d.tp) d.tp->all_reduce(s.dln, N * C);
  b.layernorm_backward(dres, w.ln1_w.grad_add(), w.ln1_b.grad_add(), s.dln, x, w.ln1_w.w, a.mean1, a.rstd1, N, C);
}

const float* EncoderStack::forward(Backend& b, ForwardContext& ctx, const Packing& pk, Saved& s, float* x0) const {
  const int64_t N = pk.tokens(), L = int64_t(layers.size());
  s.xs.assign(1, x0);
  float* tmp = ctx.take(N * dims.C);
  EncoderActs scratch_acts{};
  if (recomputes_any()) scratch_acts = EncoderActs::take(ctx, dims, N);
  s.acts.resize(size_t(L));
  for (int64_t l = 0; l < L; ++l) {
    s.xs.push_back(ctx.take(N * dims.C));
    if (!recomputes(l)) s.acts[l] = EncoderActs::take(ctx, dims, N);
    EncoderActs& a = recomputes(l) ? scratch_acts : s.acts[l];
    encoder_forward(b, dims, layers[l], pk, a, s.xs[l + 1], s.xs[l], tmp);
  }
  return s.xs[L];
}

float* EncoderStack::backward(Backend& b, ForwardContext& ctx, const Packing& pk, const Saved& s,
                              const float* dout) const {
  const int64_t N = pk.tokens(), L = int64_t(layers.size());
  EncoderScratch scratch = EncoderScratch::take(ctx, dims, N);
  EncoderActs recomputed{};
  if (recomputes_any()) recomputed = EncoderActs::take(ctx, dims, N);
  float* d = ctx.take(N * dims.C);  // the residual stream's gradient, in place through the layers
  b.copy(d, dout, N * dims.C);
  for (int64_t l = L - 1; l >= 0; --l) {
    if (recomputes(l)) encoder_forward(b, dims, layers[l], pk, recomputed, scratch.tmp, s.xs[l], scratch.tmp);
    const EncoderActs& a = recomputes(l) ? recomputed : s.acts[l];
    encoder_backward(b, dims, layers[l], pk, a, scratch, d, s.xs[l]);
  }
  return d;
}

}  // namespace maestro
