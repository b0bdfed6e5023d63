// One Llama decoder layer over a packed micro-batch, forward and backward:
//   x_mid = x + o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))
//   x_out = x_mid + down(silu(gate(n2(x_mid))) * up(n2(x_mid)))
// RMSNorm n1, n2, no biases, grouped-query attention, causal or not.
// N tokens, C hidden, H heads, KV kv heads, D head width, F ffn.
// Tensor parallelism (Megatron): with a communicator, H, KV and F are this
// rank's share, q/k/v and gate/up its column-parallel rows, o and down its
// row-parallel columns; the o and down outputs are all-reduced in forward,
// the gradients of n1 and n2 in backward (Megatron's g and f operators).
#pragma once

#include "nn/model_impl.h"

namespace maestro {

struct DecoderDims {
  int64_t C, H, KV, D, F;  // H, KV, F: this rank's heads, kv heads and ffn width
  float eps, theta;
  bool causal;
  Communicator* tp = nullptr;  // the tensor-parallel group, null for one rank
};

struct DecoderWeights {
  Param n1, q, k, v, o, n2, gate, up, down;
};

// What backward needs of one layer's forward (all from the context's pool).
struct DecoderActs {
  float* rstd1;  // [N]
  float* n1;     // [N, C]       null where the bf16 copies suffice (take_operand), as q, k, v, n2, gate, up, act
  float* q;      // [N, H*D]     after rope
  float* k;      // [N, KV*D]    after rope
  float* v;      // [N, KV*D]
  float* att;    // [N, H*D]
  float* lse;    // [N, H]
  float* mid;    // [N, C]
  float* rstd2;  // [N]
  float* n2;     // [N, C]
  float* gate;   // [N, F]
  float* up;     // [N, F]
  float* act;    // [N, F]       silu(gate) * up
  // The linears' inputs n1, att, n2, act in bf16, for the forward's and the
  // backward's GEMMs (written by the norms and swiglu with their fp32
  // values, att rounded once), and the attention's q, k, v for its forward
  // and backward (q, k written by rope, v by its GEMM); null unless the
  // backend wants them. Where the copies suffice, q, k, v, gate and up are
  // kept in bf16 alone: their GEMMs write them in bf16, rope rotates q and
  // k in place there, swiglu reads gate and up from gate16, up16.
  void *n1_16, *att_16, *n2_16, *act_16;  // [N, C], [N, H*D], [N, C], [N, F]
  void *q16, *k16, *v16;                  // [N, H*D], [N, KV*D] ×2
  void *gate16, *up16;                    // [N, F] ×2; null unless the copies suffice (take_bf16_alone)
  static DecoderActs take(ForwardContext& ctx, const DecoderDims& d, int64_t N);
};

// Scratch of one backward pass, shared by all layers.
struct DecoderScratch {
  float *dn, *datt, *dq, *dk, *dv;  // [N, C], [N, H*D] ×2, [N, KV*D] ×2
  float *dact, *dgate, *dup;               // [N, F] ×3; dgate, dup as n1 above
  float* tmp;                              // [N, C]   forward: o / down projection output
  // In bf16, as n1_16: the gate and up GEMMs' dout, and the q and k ones
  // (rope's backward writes them; dq, dk after it as n1 above).
  void *dgate16, *dup16;  // [N, F] ×2
  void *dq16, *dk16;      // [N, H*D], [N, KV*D]
  static DecoderScratch take(ForwardContext& ctx, const DecoderDims& d, int64_t N);
};

// out[N, C] from x[N, C]; tmp[N, C] is scratch.
void decoder_forward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                     DecoderActs& a, float* out, const float* x, float* tmp);
// The residual stream's gradient d[N, C] in place: the gradient of the
// layer's output on entry, of its input x on return (each norm's share is
// added to it, so it is never copied); parameter gradients +=.
void decoder_backward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                      const DecoderActs& a, DecoderScratch& s, float* dres, const float* x);

}  // namespace maestro
