// vit: the CLIP vision tower (sect-language.md, "Built-in models") over a
// micro-batch of images. Each image is its own sequence [class token,
// patches...] of P + 1 = (image/patch)² + 1 positions with learned position
// embeddings; pre_layrnorm, the encoder layers (bidirectional), then
// post_layernorm on the patch rows, which are the output (class rows dropped).
// As a pipeline stage: the embeddings and pre_layrnorm on the first stage,
// post_layernorm on the last, its own layers on each.
// With pixel_shuffle = 1/k (merge k > 1) the last stage then merges each k×k
// block of patches into one token of k²·C channels, InternVL's pixel_shuffle:
// token (i', j') of the (G/k)² grid is the patches (i'k + di, j'k + dj)
// concatenated in (di, dj) row-major order.
#include <fmt/format.h>

#include "nn/encoder_weights.h"

namespace maestro {

namespace {

// out [I, (G/k)², k²·C] <- in [I, G², C] (pixel shuffle), or the inverse
// when `unshuffle`: in <- out. A permutation of C-float blocks.
void pixel_shuffle(Backend& b, float* shuffled, float* patches, int64_t I, int64_t G, int64_t C, int64_t k,
                   bool unshuffle) {
  const int64_t g = G / k;
  for (int64_t img = 0; img < I; ++img)
    for (int64_t i = 0; i < g; ++i)
      for (int64_t j = 0; j < g; ++j)
        for (int64_t di = 0; di < k; ++di)
          for (int64_t dj = 0; dj < k; ++dj) {
            float* tok = shuffled + ((img * g + i) * g + j) * k * k * C + (di * k + dj) * C;
            float* patch = patches + (img * G * G + (i * k + di) * G + (j * k + dj)) * C;
            if (unshuffle) b.copy(patch, tok, C);
            else b.copy(tok, patch, C);
          }
}

class Vit final : public ModelImpl {
 public:
  Vit(const Section& s, Backend& b, const ParamLookup& p, StagePart part)
      : section_(s), spec_(std::get<VitSpec>(s.model.spec)), b_(b), part_(part), frozen_(s.mode == Mode::Frozen) {
    const auto& v = spec_;
    const int64_t tp = part.tp.size;  // tensor parallel: this rank's heads and ffn share (encoder_block.h)
    stack_.dims = {v.hidden, v.heads / tp, v.hidden / v.heads, v.ffn / tp, float(v.norm_eps),
                   tp > 1 ? part.tp.comm : nullptr, part.tp.rank == 0};
    if (part.first) {
      cls_ = p("vision_model.embeddings.class_embedding");
      patch_ = p("vision_model.embeddings.patch_embedding.weight");
      pos_ = p("vision_model.embeddings.position_embedding.weight");
      pre_w_ = p("vision_model.pre_layrnorm.weight");
      pre_b_ = p("vision_model.pre_layrnorm.bias");
    }
    for (int64_t i = part.layer_begin; i < part.layer_end; ++i) {
      stack_.layers.push_back(clip_layer(p, fmt::format("vision_model.encoder.layers.{}.", i)));
      stack_.recompute.push_back(recomputes_layer(i, v.layers, s.recompute));
    }
    if (part.last) {
      post_w_ = p("vision_model.post_layernorm.weight");
      post_b_ = p("vision_model.post_layernorm.bias");
    }
  }

  // The micro-batch's layout, computed by the first stage.
  struct Geometry final : StageGeometry {
    Packing pk;                          // one sequence of P + 1 rows per image
    int64_t images = 0;
    std::vector<int64_t> sample_images;  // [samples]
  };

  struct Acts final : Activations {
    std::shared_ptr<const Geometry> geo;
    float* patches = nullptr;            // [I*P, Ch*p*p]               first stage
    float* x0 = nullptr;                 // [I*(P+1), C] embeddings + positions
    float *pre_mean = nullptr, *pre_rstd = nullptr;  // [I*(P+1)]
    EncoderStack::Saved stack;
    float* last = nullptr;               // [I*P, C] the stack's output, patch rows   last stage
    float *post_mean = nullptr, *post_rstd = nullptr;  // [I*P]
    float* out = nullptr;                // [I*P, C]
    float* shuffled = nullptr;           // [I*P/k², k²·C] when merge k > 1
  };

  ForwardOutput forward(std::shared_ptr<ForwardContext> ctxp, const std::vector<SampleInput>& samples,
                        const StageInput* stage_input) override {
    ForwardContext& ctx = *ctxp;
    const int64_t C = spec_.hidden, P = spec_.patches_per_image(), S = spec_.image, Ch = spec_.channels;
    const int64_t pix = Ch * S * S, K = Ch * spec_.patch * spec_.patch;
    auto acts = std::make_unique<Acts>();
    Acts& a = *acts;
    if (part_.first) {
      auto g = std::make_shared<Geometry>();
      for (size_t i = 0; i < samples.size(); ++i) {
        const size_t n = samples[i].values.size();
        if (n == 0 || n % pix != 0)
          input_error(section_, fmt::format("sample {}: {} pixel values are not a whole number of [{}, {}, {}] images",
                                            i, n, Ch, S, S));
        g->sample_images.push_back(int64_t(n) / pix);
        g->images += int64_t(n) / pix;
      }
      for (int64_t img = 0; img < g->images; ++img) g->pk.add_sequence(P + 1);
      a.geo = std::move(g);
    } else {
      a.geo = stage_geometry<Geometry>(section_, stage_input, C);
    }
    const Geometry& g = *a.geo;
    const int64_t I = g.images, T = P + 1, N = I * T;
    float* h0 = ctx.take(N * C);
    if (part_.first) {
      // Patch embedding: pixels -> patches -> linear (no bias).
      float* pixels = ctx.take(I * pix);  // [I, Ch, S, S]
      int64_t at = 0;
      for (const auto& s : samples) {
        b_.copy_from_host_held(pixels + at, s.values.data(), s.values.size() * sizeof(float));
        at += int64_t(s.values.size());
      }
      a.patches = ctx.take(I * P * K);
      b_.im2col_patches(a.patches, pixels, I, Ch, S, spec_.patch);
      float* emb = ctx.take(I * P * C);  // [I*P, C]
      b_.linear_forward(emb, a.patches, patch_.linear(), nullptr, I * P, K, C);
      // x0 per image: [class; patch embeddings] + positions.
      a.x0 = ctx.take(N * C);
      for (int64_t img = 0; img < I; ++img) {
        float* x = a.x0 + img * T * C;
        b_.copy(x, cls_.w, C);
        b_.copy(x + C, emb + img * P * C, P * C);
        b_.accumulate(x, pos_.w, T * C);
      }
      a.pre_mean = ctx.take(N);
      a.pre_rstd = ctx.take(N);
      b_.layernorm_forward(h0, a.pre_mean, a.pre_rstd, a.x0, pre_w_.w, pre_b_.w, N, C, stack_.dims.eps);
    } else {
      b_.copy_from_host_held(h0, stage_input->hidden.data(), (N * C) * sizeof(float));
    }
    const float* hL = stack_.forward(b_, ctx, g.pk, a.stack, h0);
    ForwardOutput out;
    if (part_.last) {
      // Patch rows out, through post_layernorm.
      a.last = ctx.take(I * P * C);
      for (int64_t img = 0; img < I; ++img) b_.copy(a.last + img * P * C, hL + (img * T + 1) * C, P * C);
      a.out = ctx.take(I * P * C);
      a.post_mean = ctx.take(I * P);
      a.post_rstd = ctx.take(I * P);
      b_.layernorm_forward(a.out, a.post_mean, a.post_rstd, a.last, post_w_.w, post_b_.w, I * P, C, stack_.dims.eps);
      const int64_t k = spec_.merge, T_out = spec_.tokens_per_image(), W = spec_.output_width();
      const float* emitted = a.out;
      if (k > 1) {
        a.shuffled = ctx.take(I * P * C);
        pixel_shuffle(b_, a.shuffled, a.out, I, spec_.grid(), C, k, false);
        emitted = a.shuffled;
      }
      int64_t first = 0;
      for (int64_t n : g.sample_images) {
        out.outputs.push_back({emitted + first * T_out * W, n * T_out, W});
        first += n;
      }
    } else {
      out.hidden = {hL, N, C};
      out.geometry = a.geo;
    }
    ctx.acts = std::move(acts);
    out.context = std::move(ctxp);
    return out;
  }

  std::vector<std::vector<RowsView>> backward(ForwardContext& ctx,
                                              const std::vector<std::span<const float>>& output_grads,
                                              std::span<const float> stage_grad) override {
    Acts& a = static_cast<Acts&>(*ctx.acts);
    const Geometry& g = *a.geo;
    const std::vector<std::vector<RowsView>> none(part_.first ? g.sample_images.size() : 0);
    if (frozen_) return none;  // nothing to do
    const int64_t C = spec_.hidden, P = spec_.patches_per_image(), I = g.images, T = P + 1, N = I * T;
    const int64_t K = spec_.channels * spec_.patch * spec_.patch;
    float* dhL = ctx.take_zeroed(N * C);  // class rows get no gradient from the output
    if (part_.last) {
      // The gradient of the emitted tokens [rows, W]; with merge k > 1 it is
      // un-shuffled back onto the patch rows.
      const int64_t k = spec_.merge, T_out = spec_.tokens_per_image(), W = spec_.output_width();
      float* demitted = ctx.take_zeroed(I * P * C);
      int64_t first = 0;
      for (size_t i = 0; i < g.sample_images.size(); ++i) {
        const int64_t rows = g.sample_images[i] * T_out;
        if (i < output_grads.size() && !output_grads[i].empty()) {
          if (int64_t(output_grads[i].size()) != rows * W)
            input_error(section_, fmt::format("sample {}: output gradient of {} floats, expected [{}, {}]", i,
                                              output_grads[i].size(), rows, W));
          b_.copy_from_host_held(demitted + first * W, output_grads[i].data(), (rows * W) * sizeof(float));
        }
        first += rows;
      }
      float* dout = demitted;
      if (k > 1) {
        dout = ctx.take(I * P * C);
        pixel_shuffle(b_, demitted, dout, I, spec_.grid(), C, k, true);
      }
      float* dlast = ctx.take_zeroed(I * P * C);
      b_.layernorm_backward(dlast, post_w_.grad_add(), post_b_.grad_add(), dout, a.last, post_w_.w, a.post_mean,
                            a.post_rstd, I * P, C);
      for (int64_t img = 0; img < I; ++img) b_.copy(dhL + (img * T + 1) * C, dlast + img * P * C, P * C);
    } else {
      copy_stage_grad(section_, b_, dhL, stage_grad, N, C);
    }
    float* dh0 = stack_.backward(b_, ctx, g.pk, a.stack, dhL);
    if (!part_.first) {
      ctx.stage_dinput = {dh0, N, C};
      return none;
    }
    float* dx0 = ctx.take_zeroed(N * C);
    b_.layernorm_backward(dx0, pre_w_.grad_add(), pre_b_.grad_add(), dh0, a.x0, pre_w_.w, a.pre_mean, a.pre_rstd, N, C);
    float* demb = ctx.take(I * P * C);  // [I*P, C]
    for (int64_t img = 0; img < I; ++img) {
      const float* dx = dx0 + img * T * C;
      b_.accumulate(cls_.grad_add(), dx, C);
      b_.accumulate(pos_.grad_add(), dx, T * C);
      b_.copy(demb + img * P * C, dx + C, P * C);
    }
    b_.linear_backward(nullptr, patch_.grad_write(), nullptr, demb, a.patches, patch_.linear(), I * P, K, C);
    return none;
  }

 private:
  const Section& section_;
  VitSpec spec_;
  Backend& b_;
  StagePart part_;
  bool frozen_;
  EncoderStack stack_;
  Param cls_, patch_, pos_, pre_w_, pre_b_, post_w_, post_b_;
};

}  // namespace

std::unique_ptr<ModelImpl> make_vit(const Section& s, Backend& b, const ParamLookup& params, StagePart part) {
  return std::make_unique<Vit>(s, b, params, part);
}

}  // namespace maestro
