// One Llama decoder layer over a packed micro-batch, forward and backward:
//   x_mid = x + o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))
//   x_out = x_mid + down(silu(gate(n2(x_mid))) * up(n2(x_mid)))
// RMSNorm n1, n2, no biases, grouped-query attention, causal or not.
// N tokens, C hidden, H heads, KV kv heads, D = C/H, F ffn.
#pragma once

#include "nn/model_impl.h"

namespace maestro {

struct DecoderDims {
  int64_t C, H, KV, D, F;
  float eps, theta;
  bool causal;
};

struct DecoderWeights {
  Param n1, q, k, v, o, n2, gate, up, down;
};

// What backward needs of one layer's forward (all from the context's pool).
struct DecoderActs {
  float* rstd1;  // [N]
  float* n1;     // [N, C]
  float* q;      // [N, C]       after rope
  float* k;      // [N, KV*D]    after rope
  float* v;      // [N, KV*D]
  float* att;    // [N, C]
  float* lse;    // [N, H]
  float* mid;    // [N, C]
  float* rstd2;  // [N]
  float* n2;     // [N, C]
  float* gate;   // [N, F]
  float* up;     // [N, F]
  float* act;    // [N, F]       silu(gate) * up
  static DecoderActs take(ForwardContext& ctx, const DecoderDims& d, int64_t N);
};

// Scratch of one backward pass, shared by all layers.
struct DecoderScratch {
  float *dmid, *dn, *datt, *dq, *dk, *dv;  // [N, C] ×4, [N, KV*D] ×2
  float *dact, *dgate, *dup;               // [N, F] ×3
  float* tmp;                              // [N, C]   forward: o / down projection output
  static DecoderScratch take(ForwardContext& ctx, const DecoderDims& d, int64_t N);
};

// out[N, C] from x[N, C]; tmp[N, C] is scratch.
void decoder_forward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                     DecoderActs& a, float* out, const float* x, float* tmp);
// dx[N, C] = the gradient of x (written, not accumulated) from dout[N, C];
// parameter gradients +=.
void decoder_backward(Backend& b, const DecoderDims& d, const DecoderWeights& w, const Packing& pk,
                      const DecoderActs& a, DecoderScratch& s, float* dx, const float* dout, const float* x);

}  // namespace maestro
