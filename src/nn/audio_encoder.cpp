// audio_encoder: a Whisper-style encoder (sect-language.md, "Built-in
// models") over a micro-batch of clips. A clip of F mel frames gives
// T = F / frames_per_token tokens (the last F mod frames_per_token frames are
// dropped); token t embeds frames [t·fpt, (t+1)·fpt) laid frame-major
// ([fpt · mel_bins], which is the mel rows as they are) with a biased linear
// layer, plus Whisper's fixed sinusoidal position t; then the encoder layers
// (bidirectional, each clip its own sequence) and a final LayerNorm. As a
// pipeline stage: the frame embedding on the first stage, the final norm on
// the last, its own layers on each.
#include <fmt/format.h>

#include <cmath>

#include "nn/encoder_weights.h"

namespace maestro {

namespace {

class AudioEncoder final : public ModelImpl {
 public:
  AudioEncoder(const Section& s, Backend& b, const ParamLookup& p, StagePart part)
      : section_(s),
        spec_(std::get<AudioEncoderSpec>(s.model.spec)),
        b_(b),
        part_(part),
        frozen_(s.mode == Mode::Frozen) {
    const auto& a = spec_;
    const int64_t tp = part.tp.size;  // tensor parallel: this rank's heads and ffn share (encoder_block.h)
    stack_.dims = {a.hidden, a.heads / tp, a.hidden / a.heads, a.ffn / tp, float(a.norm_eps),
                   tp > 1 ? part.tp.comm : nullptr, part.tp.rank == 0};
    if (part.first) {
      embed_w_ = p("encoder.embed_frames.weight");
      embed_b_ = p("encoder.embed_frames.bias");
    }
    for (int64_t i = part.layer_begin; i < part.layer_end; ++i) {
      stack_.layers.push_back(whisper_layer(p, fmt::format("encoder.layers.{}.", i)));
      stack_.recompute.push_back(recomputes_layer(i, a.layers, s.recompute));
    }
    if (part.last) {
      norm_w_ = p("encoder.layer_norm.weight");
      norm_b_ = p("encoder.layer_norm.bias");
    }
    // Whisper's sinusoids(length, channels): [sin(t·inc_i), cos(t·inc_i)],
    // inc_i = exp(-i · ln(10000) / (C/2 - 1)), i < C/2.   [max_tokens, C]
    max_tokens_ = a.max_frames / a.frames_per_token;
    const int64_t C = a.hidden, half = C / 2;
    std::vector<float> table(max_tokens_ * C);
    const double step = std::log(10000.0) / double(half - 1);
    for (int64_t t = 0; t < max_tokens_; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(t) * std::exp(-step * double(i));
        table[t * C + i] = float(std::sin(angle));
        table[t * C + half + i] = float(std::cos(angle));
      }
    positions_ = b_.allocate(table.size());
    b_.copy_from_host(positions_, table.data(), table.size() * sizeof(float));
  }
  ~AudioEncoder() override { b_.release(positions_); }

  // The micro-batch's layout, computed by the first stage.
  struct Geometry final : StageGeometry {
    Packing pk;                          // one sequence per clip
    std::vector<int64_t> sample_tokens;  // [samples]
  };

  struct Acts final : Activations {
    std::shared_ptr<const Geometry> geo;
    float* frames = nullptr;             // [N, fpt*mel]   first stage
    EncoderStack::Saved stack;
    float *mean = nullptr, *rstd = nullptr;  // [N]       last stage
    float* out = nullptr;                // [N, C]
  };

  ForwardOutput forward(std::shared_ptr<ForwardContext> ctxp, const std::vector<SampleInput>& samples,
                        const StageInput* stage_input) override {
    ForwardContext& ctx = *ctxp;
    const int64_t C = spec_.hidden, M = spec_.mel_bins, K = M * spec_.frames_per_token;
    auto acts = std::make_unique<Acts>();
    Acts& a = *acts;
    if (part_.first) {
      auto g = std::make_shared<Geometry>();
      for (size_t i = 0; i < samples.size(); ++i) {
        const size_t n = samples[i].values.size();
        if (n % M != 0)
          input_error(section_,
                      fmt::format("sample {}: {} mel values are not a whole number of {}-bin frames", i, n, M));
        const int64_t tokens = int64_t(n) / K;
        if (tokens == 0)
          input_error(section_, fmt::format("sample {}: {} frames, fewer than frames_per_token = {}", i, int64_t(n) / M,
                                            spec_.frames_per_token));
        if (tokens > max_tokens_)
          input_error(section_, fmt::format("sample {}: {} frames exceed max_frames = {}", i, int64_t(n) / M,
                                            spec_.max_frames));
        g->sample_tokens.push_back(tokens);
        g->pk.add_sequence(tokens);
      }
      a.geo = std::move(g);
    } else {
      a.geo = stage_geometry<Geometry>(section_, stage_input, C);
    }
    const Geometry& g = *a.geo;
    const int64_t N = g.pk.tokens();
    float* x0 = ctx.take(N * C);
    if (part_.first) {
      a.frames = ctx.take(N * K);
      for (size_t i = 0; i < samples.size(); ++i)
        b_.copy_from_host_held(a.frames + g.pk.cu_seqlens[i] * K, samples[i].values.data(),
                          (g.sample_tokens[i] * K) * sizeof(float));
      b_.linear_forward(x0, a.frames, embed_w_.linear(), embed_b_.w, N, K, C);
      for (size_t i = 0; i < samples.size(); ++i)
        b_.accumulate(x0 + g.pk.cu_seqlens[i] * C, positions_, g.sample_tokens[i] * C);
    } else {
      b_.copy_from_host_held(x0, stage_input->hidden.data(), (N * C) * sizeof(float));
    }
    const float* xL = stack_.forward(b_, ctx, g.pk, a.stack, x0);
    ForwardOutput out;
    if (part_.last) {
      a.out = ctx.take(N * C);
      a.mean = ctx.take(N);
      a.rstd = ctx.take(N);
      b_.layernorm_forward(a.out, a.mean, a.rstd, xL, norm_w_.w, norm_b_.w, N, C, stack_.dims.eps);
      for (size_t i = 0; i < g.sample_tokens.size(); ++i)
        out.outputs.push_back({a.out + g.pk.cu_seqlens[i] * C, g.sample_tokens[i], C});
    } else {
      out.hidden = {xL, N, C};
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
    const std::vector<std::vector<RowsView>> none(part_.first ? g.sample_tokens.size() : 0);
    if (frozen_) return none;  // nothing to do
    const int64_t C = spec_.hidden, K = spec_.mel_bins * spec_.frames_per_token, N = g.pk.tokens();
    float* dxL = ctx.take_zeroed(N * C);
    if (part_.last) {
      float* dout = ctx.take_zeroed(N * C);
      for (size_t i = 0; i < g.sample_tokens.size(); ++i) {
        if (i >= output_grads.size() || output_grads[i].empty()) continue;
        if (int64_t(output_grads[i].size()) != g.sample_tokens[i] * C)
          input_error(section_, fmt::format("sample {}: output gradient of {} floats, expected [{}, {}]", i,
                                            output_grads[i].size(), g.sample_tokens[i], C));
        b_.copy_from_host_held(dout + g.pk.cu_seqlens[i] * C, output_grads[i].data(),
                          output_grads[i].size() * sizeof(float));
      }
      b_.layernorm_backward(dxL, norm_w_.grad_add(), norm_b_.grad_add(), dout, a.stack.xs.back(), norm_w_.w, a.mean,
                            a.rstd, N, C);
    } else {
      copy_stage_grad(section_, b_, dxL, stage_grad, N, C);
    }
    float* dx0 = stack_.backward(b_, ctx, g.pk, a.stack, dxL);
    if (!part_.first) {
      ctx.stage_dinput = {dx0, N, C};
      return none;
    }
    b_.linear_backward(nullptr, embed_w_.grad_write(), embed_b_.grad_add(), dx0, a.frames, embed_w_.linear(), N, K, C);
    return none;
  }

 private:
  const Section& section_;
  AudioEncoderSpec spec_;
  Backend& b_;
  StagePart part_;
  bool frozen_;
  EncoderStack stack_;
  Param embed_w_, embed_b_, norm_w_, norm_b_;
  int64_t max_tokens_ = 0;
  float* positions_ = nullptr;  // [max_tokens, C]
};

}  // namespace

std::unique_ptr<ModelImpl> make_audio_encoder(const Section& s, Backend& b, const ParamLookup& params,
                                              StagePart part) {
  return std::make_unique<AudioEncoder>(s, b, params, part);
}

}  // namespace maestro
