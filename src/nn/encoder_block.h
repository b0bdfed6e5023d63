// One pre-norm encoder layer (CLIP vision / Whisper encoder) over a packed
// micro-batch, forward and backward, bidirectional attention:
//   x_mid = x + out(attn(q(ln1(x)), k(ln1(x)), v(ln1(x))))
//   x_out = x_mid + fc2(gelu(fc1(ln2(x_mid))))
// LayerNorm ln1, ln2; every projection biased except Whisper's k (k.w only).
// N tokens, C hidden, H heads, D head width, F ffn.
// Tensor parallelism (Megatron): with a communicator, H and F are this
// rank's share, q/k/v and fc1 its column-parallel rows (biases split too),
// out and fc2 its row-parallel columns, whose outputs are all-reduced in
// forward (their replicated biases added once, by rank 0), the gradients of
// ln1 and ln2's outputs all-reduced in backward.
#pragma once

#include <algorithm>

#include "nn/model_impl.h"

namespace maestro {

struct EncoderDims {
  int64_t C, H, D, F;  // H, F: this rank's heads and ffn width
  float eps;
  Communicator* tp = nullptr;  // the tensor-parallel group, null for one rank
  bool adds_replicated_bias = true;  // false on tp ranks other than 0
};

struct EncoderWeights {
  Param ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

struct EncoderActs {
  float *mean1, *rstd1;  // [N]
  float* ln1;            // [N, C]   null where the bf16 copy suffices (take_operand), as ln2 and g
  float *q, *k, *v;      // [N, H*D]
  float* att;            // [N, H*D]
  float* lse;            // [N, H]
  float* mid;            // [N, C]
  float *mean2, *rstd2;  // [N]
  float* ln2;            // [N, C]
  float* h;              // [N, F]   fc1 output
  float* g;              // [N, F]   gelu(h)
  // The linears' inputs ln1, att, ln2, g in bf16, for the forward's and the
  // backward's GEMMs (written by the norms and gelu with their fp32 values,
  // att rounded once), and the attention's q, k, v rounded once for its
  // forward and backward; null unless the backend wants them.
  void *ln1_16, *att_16, *ln2_16, *g_16;  // [N, C], [N, H*D], [N, C], [N, F]
  void *q16, *k16, *v16;                  // [N, H*D] ×3
  static EncoderActs take(ForwardContext& ctx, const EncoderDims& d, int64_t N);
};

struct EncoderScratch {
  float *dln, *datt, *dq, *dk, *dv;  // [N, C], [N, H*D] ×4
  float *dg, *dh;                           // [N, F]
  float* tmp;                               // [N, C]   forward: out / fc2 projection output
  void* dh16;                               // [N, F]   dh in bf16, fc1's GEMMs' dout (null as ln1_16)
  static EncoderScratch take(ForwardContext& ctx, const EncoderDims& d, int64_t N);
};

void encoder_forward(Backend& b, const EncoderDims& d, const EncoderWeights& w, const Packing& pk,
                     EncoderActs& a, float* out, const float* x, float* tmp);
// The residual stream's gradient d[N, C] in place: of the layer's output on
// entry, of its input x on return; parameter gradients +=.
void encoder_backward(Backend& b, const EncoderDims& d, const EncoderWeights& w, const Packing& pk,
                      const EncoderActs& a, EncoderScratch& s, float* dres, const float* x);

// The layer stack shared by vit and audio_encoder: L encoder layers from
// x0[N, C], keeping each layer's input, and per layer either its activations
// or (recompute[l]) nothing, recomputing the layer in backward.
struct EncoderStack {
  EncoderDims dims;
  std::vector<EncoderWeights> layers;
  std::vector<char> recompute;  // [L]: layer l recomputed in backward (recomputes_layer); empty: none

  struct Saved {
    std::vector<float*> xs;         // [L + 1] × [N, C]: layer inputs, then the stack's output
    std::vector<EncoderActs> acts;  // [L], empty where the layer is recomputed
  };
  bool recomputes(int64_t l) const { return !recompute.empty() && recompute[size_t(l)]; }
  bool recomputes_any() const { return std::find(recompute.begin(), recompute.end(), 1) != recompute.end(); }
  // Runs the stack on xs[0] (filled by the caller); returns the output xs[L].
  const float* forward(Backend& b, ForwardContext& ctx, const Packing& pk, Saved& s, float* x0) const;
  // From dout[N, C], the gradient of the stack's output, returns dx0[N, C].
  float* backward(Backend& b, ForwardContext& ctx, const Packing& pk, const Saved& s, const float* dout) const;
};

}  // namespace maestro
