// The Llama decoder layer's forward and hand-written backward (see decoder_block.h).
#include "nn/decoder_block.h"

namespace maestro {

DecoderActs DecoderActs::take(ForwardContext& ctx, const DecoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nkv = N * d.KV * d.D, nf = N * d.F;
  return {.rstd1 = ctx.take(N),
          .n1 = ctx.take_operand(nc),
          .q = ctx.take_operand(nq),
          .k = ctx.take_operand(nkv),
          .v = ctx.take_operand(nkv),
          .att = ctx.take(nq),
          .lse = ctx.take(N * d.H),
          .mid = ctx.take(nc),
          .rstd2 = ctx.take(N),
          .n2 = ctx.take_operand(nc),
          .gate = ctx.take_operand(nf),
          .up = ctx.take_operand(nf),
          .act = ctx.take_operand(nf),
          .n1_16 = ctx.take_bf16(nc),
          .att_16 = ctx.take_bf16(nq),
          .n2_16 = ctx.take_bf16(nc),
          .act_16 = ctx.take_bf16(nf),
          .q16 = ctx.take_bf16(nq),
          .k16 = ctx.take_bf16(nkv),
          .v16 = ctx.take_bf16(nkv),
          .gate16 = ctx.take_bf16_alone(nf),
          .up16 = ctx.take_bf16_alone(nf)};
}

DecoderScratch DecoderScratch::take(ForwardContext& ctx, const DecoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nkv = N * d.KV * d.D, nf = N * d.F;
  return {.dn = ctx.take(nc),
          .datt = ctx.take(nq),
          .dq = ctx.take(nq),
          .dk = ctx.take(nkv),
          .dv = ctx.take(nkv),
          .dact = ctx.take(nf),
          .dgate = ctx.take_operand(nf),
          .dup = ctx.take_operand(nf),
          .tmp = ctx.take(nc),
          .dgate16 = ctx.take_bf16(nf),
          .dup16 = ctx.take_bf16(nf),
          .dq16 = ctx.take_bf16(nq),
          .dk16 = ctx.take_bf16(nkv)};
}

void decoder_forward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                     DecoderActs& a, float* out, const float* x, float* tmp) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, KVD = d.KV * d.D, F = d.F;
  // The norms and swiglu write their outputs' bf16 copies (Out): the linears' operands.
  b.rmsnorm_forward({a.n1, a.n1_16}, a.rstd1, x, w.n1.w, N, C, d.eps);
  const Operand n1{a.n1, a.n1_16};
  // q, k, v in fp32, or in bf16 alone where the copies suffice (stored_out); v with
  // its copy, the GEMM's output rounded. q, k rotated in place, with their bf16
  // copies: the attention's operands.
  b.linear_forward(stored_out(a.q, a.q16), n1, w.q.linear(), nullptr, N, C, QD);
  b.linear_forward(stored_out(a.k, a.k16), n1, w.k.linear(), nullptr, N, C, KVD);
  b.linear_forward({a.v, a.v16}, n1, w.v.linear(), nullptr, N, C, KVD);
  b.rope_forward({a.q, a.q16}, stored(a.q, a.q16), pk.pos.data(), N, d.H, d.D, d.theta);
  b.rope_forward({a.k, a.k16}, stored(a.k, a.k16), pk.pos.data(), N, d.KV, d.D, d.theta);
  const Operand q{a.q, a.q16}, k{a.k, a.k16}, v{a.v, a.v16};
  b.attention_forward(a.att, a.lse, q, k, v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.KV, d.D, d.causal);
  b.linear_forward(tmp, rounded_once(b, a.att, a.att_16, size_t(N * QD)), w.o.linear(), nullptr, N, QD, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(a.mid, x, tmp, N * C);
  b.rmsnorm_forward({a.n2, a.n2_16}, a.rstd2, a.mid, w.n2.w, N, C, d.eps);
  const Operand n2{a.n2, a.n2_16};
  // gate and up in fp32, or in bf16 alone (one of the two pointers is null)
  b.linear_forward({a.gate, a.gate16}, n2, w.gate.linear(), nullptr, N, C, F);
  b.linear_forward({a.up, a.up16}, n2, w.up.linear(), nullptr, N, C, F);
  b.swiglu_forward({a.act, a.act_16}, {a.gate, a.gate16}, {a.up, a.up16}, N * F);
  b.linear_forward(tmp, {a.act, a.act_16}, w.down.linear(), nullptr, N, F, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(out, a.mid, tmp, N * C);
}

void decoder_backward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                      const DecoderActs& a, DecoderScratch& s, float* dres, const float* x) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, KVD = d.KV * d.D, F = d.F;
  // MLP: x_out = x_mid + down(act); dres = d(x_out) here, d(x_mid) after norm 2.
  // The first write of each scratch gradient overwrites it (Grad::overwrite):
  // no zeroing pass, and the GEMM or kernel reads no zeros.
  b.linear_backward(Grad::overwrite(s.dact), w.down.grad_write(), nullptr, dres, {a.act, a.act_16}, w.down.linear(), N,
                    F, C);
  // dgate and dup written with their bf16 copies, the GEMMs' operands (GradOut)
  b.swiglu_backward(GradOut::overwrite(s.dgate, s.dgate16), GradOut::overwrite(s.dup, s.dup16), s.dact,
                    {a.gate, a.gate16}, {a.up, a.up16}, N * F);
  b.linear_backward(Grad::overwrite(s.dn), w.gate.grad_write(), nullptr, {s.dgate, s.dgate16}, {a.n2, a.n2_16},
                    w.gate.linear(), N, C, F);
  b.linear_backward(s.dn, w.up.grad_write(), nullptr, {s.dup, s.dup16}, {a.n2, a.n2_16}, w.up.linear(), N, C, F);
  if (d.tp) d.tp->all_reduce(s.dn, N * C);
  b.rmsnorm_backward(dres, w.n2.grad_add(), s.dn, a.mid, w.n2.w, a.rstd2, N, C);
  // attention: x_mid = x + o(att); dres = d(x) after norm 1.
  b.linear_backward(Grad::overwrite(s.datt), w.o.grad_write(), nullptr, dres, {a.att, a.att_16}, w.o.linear(), N, QD,
                    C);
  b.attention_backward(Grad::overwrite(s.dq), Grad::overwrite(s.dk), Grad::overwrite(s.dv), s.datt, a.att, a.lse,
                       {a.q, a.q16}, {a.k, a.k16}, {a.v, a.v16}, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.KV, d.D,
                       d.causal);
  // dq, dk rotated back with their bf16 copies, the q and k GEMMs' dout — in
  // bf16 alone where the copies suffice (take_operand's rule)
  float* dq = b.bf16_operands_suffice() ? nullptr : s.dq;
  float* dk = b.bf16_operands_suffice() ? nullptr : s.dk;
  b.rope_backward({dq, s.dq16}, s.dq, pk.pos.data(), N, d.H, d.D, d.theta);
  b.rope_backward({dk, s.dk16}, s.dk, pk.pos.data(), N, d.KV, d.D, d.theta);
  b.linear_backward(Grad::overwrite(s.dn), w.q.grad_write(), nullptr, {dq, s.dq16}, {a.n1, a.n1_16}, w.q.linear(), N,
                    C, QD);
  b.linear_backward(s.dn, w.k.grad_write(), nullptr, {dk, s.dk16}, {a.n1, a.n1_16}, w.k.linear(), N, C, KVD);
  b.linear_backward(s.dn, w.v.grad_write(), nullptr, s.dv, {a.n1, a.n1_16}, w.v.linear(), N, C, KVD);
  if (d.tp) d.tp->all_reduce(s.dn, N * C);
  b.rmsnorm_backward(dres, w.n1.grad_add(), s.dn, x, w.n1.w, a.rstd1, N, C);
}

}  // namespace maestro
