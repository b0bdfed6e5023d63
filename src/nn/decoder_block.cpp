// The Llama decoder layer's forward and hand-written backward (see decoder_block.h).
#include "nn/decoder_block.h"

namespace maestro {

DecoderActs DecoderActs::take(ForwardContext& ctx, const DecoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nkv = N * d.KV * d.D, nf = N * d.F;
  return {ctx.take(N), ctx.take(nc), ctx.take(nq), ctx.take(nkv), ctx.take(nkv), ctx.take(nq), ctx.take(N * d.H),
          ctx.take(nc), ctx.take(N), ctx.take(nc), ctx.take(nf), ctx.take(nf), ctx.take(nf),
          ctx.take_bf16(nc), ctx.take_bf16(nq), ctx.take_bf16(nc), ctx.take_bf16(nf)};
}

DecoderScratch DecoderScratch::take(ForwardContext& ctx, const DecoderDims& d, int64_t N) {
  const size_t nc = N * d.C, nq = N * d.H * d.D, nkv = N * d.KV * d.D, nf = N * d.F;
  return {ctx.take(nc), ctx.take(nq), ctx.take(nq), ctx.take(nkv), ctx.take(nkv),
          ctx.take(nf), ctx.take(nf), ctx.take(nf), ctx.take(nc)};
}

void decoder_forward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                     DecoderActs& a, float* out, const float* x, float* tmp) {
  const int64_t N = pk.tokens(), C = d.C, QD = d.H * d.D, KVD = d.KV * d.D, F = d.F;
  b.rmsnorm_forward(a.n1, a.rstd1, x, w.n1.w, N, C, d.eps);
  const Operand n1 = rounded_once(b, a.n1, a.n1_16, size_t(N * C));
  b.linear_forward(a.q, n1, w.q.linear(), nullptr, N, C, QD);
  b.linear_forward(a.k, n1, w.k.linear(), nullptr, N, C, KVD);
  b.linear_forward(a.v, n1, w.v.linear(), nullptr, N, C, KVD);
  b.rope_forward(a.q, pk.pos.data(), N, d.H, d.D, d.theta);
  b.rope_forward(a.k, pk.pos.data(), N, d.KV, d.D, d.theta);
  b.attention_forward(a.att, a.lse, a.q, a.k, a.v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.KV, d.D, d.causal);
  b.linear_forward(tmp, rounded_once(b, a.att, a.att_16, size_t(N * QD)), w.o.linear(), nullptr, N, QD, C);
  if (d.tp) d.tp->all_reduce(tmp, N * C);
  b.add(a.mid, x, tmp, N * C);
  b.rmsnorm_forward(a.n2, a.rstd2, a.mid, w.n2.w, N, C, d.eps);
  const Operand n2 = rounded_once(b, a.n2, a.n2_16, size_t(N * C));
  b.linear_forward(a.gate, n2, w.gate.linear(), nullptr, N, C, F);
  b.linear_forward(a.up, n2, w.up.linear(), nullptr, N, C, F);
  b.swiglu_forward(a.act, a.gate, a.up, N * F);
  b.linear_forward(tmp, rounded_once(b, a.act, a.act_16, size_t(N * F)), w.down.linear(), nullptr, N, F, C);
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
  b.swiglu_backward(Grad::overwrite(s.dgate), Grad::overwrite(s.dup), s.dact, a.gate, a.up, N * F);
  b.linear_backward(Grad::overwrite(s.dn), w.gate.grad_write(), nullptr, s.dgate, {a.n2, a.n2_16}, w.gate.linear(), N,
                    C, F);
  b.linear_backward(s.dn, w.up.grad_write(), nullptr, s.dup, {a.n2, a.n2_16}, w.up.linear(), N, C, F);
  if (d.tp) d.tp->all_reduce(s.dn, N * C);
  b.rmsnorm_backward(dres, w.n2.grad_add(), s.dn, a.mid, w.n2.w, a.rstd2, N, C);
  // attention: x_mid = x + o(att); dres = d(x) after norm 1.
  b.linear_backward(Grad::overwrite(s.datt), w.o.grad_write(), nullptr, dres, {a.att, a.att_16}, w.o.linear(), N, QD,
                    C);
  b.attention_backward(Grad::overwrite(s.dq), Grad::overwrite(s.dk), Grad::overwrite(s.dv), s.datt, a.att, a.lse,
                       a.q, a.k, a.v, pk.cu_seqlens.data(), pk.n_seq(), N, d.H, d.KV, d.D, d.causal);
  b.rope_backward(s.dq, pk.pos.data(), N, d.H, d.D, d.theta);
  b.rope_backward(s.dk, pk.pos.data(), N, d.KV, d.D, d.theta);
  b.linear_backward(Grad::overwrite(s.dn), w.q.grad_write(), nullptr, s.dq, {a.n1, a.n1_16}, w.q.linear(), N, C, QD);
  b.linear_backward(s.dn, w.k.grad_write(), nullptr, s.dk, {a.n1, a.n1_16}, w.k.linear(), N, C, KVD);
  b.linear_backward(s.dn, w.v.grad_write(), nullptr, s.dv, {a.n1, a.n1_16}, w.v.linear(), N, C, KVD);
  if (d.tp) d.tp->all_reduce(s.dn, N * C);
  b.rmsnorm_backward(dres, w.n1.grad_add(), s.dn, x, w.n1.w, a.rstd1, N, C);
}

}  // namespace maestro
