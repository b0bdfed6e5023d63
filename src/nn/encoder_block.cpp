// The pre-norm encoder layer's forward and hand-written backward, and the
// layer stack with optional recomputation (see encoder_block.h).
#include "nn/encoder_block.h"

namespace maestro {

EncoderActs EncoderActs::take(ForwardContext& ctx, const EncoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nf = N * d.F;
  return {.mean1 = ctx.take(N),
          .rstd1 = ctx.take(N),
          .ln1 = ctx.take_operand(nc),
          .q = ctx.take(nq),
          .k = ctx.take(nq),
          .v = ctx.take(nq),
          .att = ctx.take(nq),
          .lse = ctx.take(N * d.H),
          .mid = ctx.take(nc),
          .mean2 = ctx.take(N),
          .rstd2 = ctx.take(N),
          .ln2 = ctx.take_operand(nc),
          .h = ctx.take(nf),
          .g = ctx.take_operand(nf),
          .ln1_16 = ctx.take_bf16(nc),
          .att_16 = ctx.take_bf16(nq),
          .ln2_16 = ctx.take_bf16(nc),
          .g_16 = ctx.take_bf16(nf),
          .q16 = ctx.take_bf16(nq),
          .k16 = ctx.take_bf16(nq),
          .v16 = ctx.take_bf16(nq)};
}

EncoderScratch EncoderScratch::take(ForwardContext& ctx, const EncoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nf = N * d.F;
  return {.dln = ctx.take(nc),
          .datt = ctx.take(nq),
          .dq = ctx.take(nq),
          .dk = ctx.take(nq),
          .dv = ctx.take(nq),
          .dg = ctx.take(nf),
          .dh = ctx.take(nf),
          .tmp = ctx.take(nc),
          .dh16 = ctx.take_bf16(nf)};
}

void encoder_forward(Backend& b, const EncoderDims& d, const EncoderWeights& w, const Packing& pk,
                     EncoderActs& a, float* out, const float* x, float* tmp) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, F = d.F;
  // The norms and gelu write their outputs' bf16 copies (Out): the linears' operands.
  b.layernorm_forward({a.ln1, a.ln1_16}, a.mean1, a.rstd1, x, w.ln1_w.w, w.ln1_b.w, N, C, d.eps);
  const Operand ln1{a.ln1, a.ln1_16};
  b.linear_forward(a.q, ln1, w.q_w.linear(), w.q_b.w, N, C, QD);
  b.linear_forward(a.k, ln1, w.k_w.linear(), w.k_b.w, N, C, QD);
  b.linear_forward(a.v, ln1, w.v_w.linear(), w.v_b.w, N, C, QD);
  const Operand q = rounded_once(b, a.q, a.q16, size_t(N * QD)), k = rounded_once(b, a.k, a.k16, size_t(N * QD)),
                v = rounded_once(b, a.v, a.v16, size_t(N * QD));
  b.attention_forward(a.att, a.lse, q, k, v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.H, d.D, false);
  b.linear_forward(tmp, rounded_once(b, a.att, a.att_16, size_t(N * QD)), w.o_w.linear(),
                   d.adds_replicated_bias ? w.o_b.w : nullptr, N, QD, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(a.mid, x, tmp, N * C);
  b.layernorm_forward({a.ln2, a.ln2_16}, a.mean2, a.rstd2, a.mid, w.ln2_w.w, w.ln2_b.w, N, C, d.eps);
  b.linear_forward(a.h, {a.ln2, a.ln2_16}, w.fc1_w.linear(), w.fc1_b.w, N, C, F);
  b.gelu_forward({a.g, a.g_16}, a.h, N * F);
  b.linear_forward(tmp, {a.g, a.g_16}, w.fc2_w.linear(),
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
  // dh in fp32 (fc1's bias gradient reads it) and bf16 (its GEMMs', GradOut)
  b.gelu_backward(GradOut::overwrite(s.dh, s.dh16), s.dg, a.h, N * F);
  b.linear_backward(Grad::overwrite(s.dln), w.fc1_w.grad_write(), w.fc1_b.grad_add(), {s.dh, s.dh16},
                    {a.ln2, a.ln2_16}, w.fc1_w.linear(), N, C, F);
  if (d.tp) d.tp->all_reduce(s.dln, N * C);
  b.layernorm_backward(dres, w.ln2_w.grad_add(), w.ln2_b.grad_add(), s.dln, a.mid, w.ln2_w.w, a.mean2, a.rstd2, N, C);
  // attention: x_mid = x + out(att)
  b.linear_backward(Grad::overwrite(s.datt), w.o_w.grad_write(), w.o_b.grad_add(), dres, {a.att, a.att_16},
                    w.o_w.linear(), N, QD, C);
  b.attention_backward(Grad::overwrite(s.dq), Grad::overwrite(s.dk), Grad::overwrite(s.dv), s.datt, a.att, a.lse,
                       {a.q, a.q16}, {a.k, a.k16}, {a.v, a.v16}, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.H, d.D,
                       false);
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
