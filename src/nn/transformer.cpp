// transformer: Llama (sect-language.md, "Built-in models") over a packed
// micro-batch. Each sample's sequence is its spliced upstream blocks (flow
// order) then its text, cut from the end to max_seq; the sequences are laid
// end to end (cu_seqlens) and attend only within themselves, causally unless
// causal = false. The output is the logits of the text positions only.
#include <fmt/format.h>

#include "nn/decoder_block.h"

namespace maestro {

namespace {

class Transformer final : public ModelImpl {
 public:
  Transformer(const Section& s, Backend& b, const ParamLookup& p)
      : section_(s), spec_(std::get<TransformerSpec>(s.model.spec)), b_(b), recompute_(s.recompute) {
    const auto& t = spec_;
    dims_ = {t.hidden, t.heads, t.kv_heads, t.hidden / t.heads, t.ffn, float(t.norm_eps), float(t.rope_theta), t.causal};
    embed_ = p("model.embed_tokens.weight");
    for (int64_t i = 0; i < t.layers; ++i) {
      const std::string l = fmt::format("model.layers.{}.", i);
      layers_.push_back({p(l + "input_layernorm.weight"), p(l + "self_attn.q_proj.weight"),
                         p(l + "self_attn.k_proj.weight"), p(l + "self_attn.v_proj.weight"),
                         p(l + "self_attn.o_proj.weight"), p(l + "post_attention_layernorm.weight"),
                         p(l + "mlp.gate_proj.weight"), p(l + "mlp.up_proj.weight"), p(l + "mlp.down_proj.weight")});
    }
    norm_ = p("model.norm.weight");
    head_ = p("lm_head.weight");
  }

  struct Acts final : Activations {
    Packing pk;
    std::vector<int32_t> tokens;        // [Nt] the kept text tokens, sample after sample
    std::vector<int64_t> seq_row;       // [samples] first packed row of each sample
    std::vector<std::vector<int64_t>> spliced_rows;  // [samples][blocks] rows of each spliced block
    std::vector<float*> xs;             // [L + 1] × [N, C] layer inputs, then the last layer's output
    std::vector<DecoderActs> layers;    // [L], empty with recompute
    float* rstd_f = nullptr;            // [N]
    float* text_normed = nullptr;       // [Nt, C] final-normed text rows
    float* logits = nullptr;            // [Nt, V]
  };

  ForwardOutput forward(std::shared_ptr<ForwardContext> ctxp, const std::vector<SampleInput>& samples) override {
    ForwardContext& ctx = *ctxp;
    const int64_t C = spec_.hidden, V = spec_.vocab, L = spec_.layers;
    auto acts = std::make_unique<Acts>();
    Acts& a = *acts;
    ctx.text_offsets.assign(1, 0);
    // Geometry: sequences, kept text, targets.
    for (size_t i = 0; i < samples.size(); ++i) {
      const SampleInput& in = samples[i];
      int64_t spliced = 0;
      a.spliced_rows.emplace_back();
      for (const auto& blk : in.spliced) {
        if (blk.size() % C != 0)
          input_error(section_, fmt::format("sample {}: a spliced block of {} floats is not a whole number of "
                                            "rows of width {}", i, blk.size(), C));
        a.spliced_rows.back().push_back(int64_t(blk.size()) / C);
        spliced += int64_t(blk.size()) / C;
      }
      if (spliced > spec_.max_seq)
        input_error(section_, fmt::format("sample {}: {} spliced embeddings exceed max_seq {}", i, spliced,
                                          spec_.max_seq));
      const int64_t text = std::min<int64_t>(int64_t(in.tokens.size()), spec_.max_seq - spliced);
      if (spliced + text == 0) input_error(section_, fmt::format("sample {}: empty sequence", i));
      a.seq_row.push_back(a.pk.tokens());
      a.pk.add_sequence(spliced + text);
      for (int64_t j = 0; j < text; ++j) {
        const int32_t tok = in.tokens[j];
        if (tok < 0 || tok >= V)
          input_error(section_, fmt::format("sample {}: token {} outside the vocabulary [0, {})", i, tok, V));
        a.tokens.push_back(tok);
        ctx.targets.push_back(j + 1 < text ? in.tokens[j + 1] : -1);
      }
      ctx.text_offsets.push_back(int64_t(a.tokens.size()));
    }
    const int64_t N = a.pk.tokens(), Nt = int64_t(a.tokens.size());
    // Embeddings: spliced rows copied, text rows looked up.
    float* x0 = ctx.take(N * C);
    for (size_t i = 0; i < samples.size(); ++i) {
      int64_t row = a.seq_row[i];
      for (const auto& blk : samples[i].spliced) {
        b_.copy(x0 + row * C, blk.data(), blk.size());
        row += int64_t(blk.size()) / C;
      }
      const int64_t t0 = ctx.text_offsets[i], nt = ctx.text_offsets[i + 1] - t0;
      b_.embedding_forward(x0 + row * C, a.tokens.data() + t0, embed_.w, nt, C);
    }
    // Layers.
    a.xs.push_back(x0);
    float* tmp = ctx.take(N * C);
    DecoderActs scratch{};
    if (recompute_) scratch = DecoderActs::take(ctx, dims_, N);
    for (int64_t l = 0; l < L; ++l) {
      a.xs.push_back(ctx.take(N * C));
      if (!recompute_) a.layers.push_back(DecoderActs::take(ctx, dims_, N));
      decoder_forward(b_, dims_, layers_[l], a.pk, recompute_ ? scratch : a.layers.back(), a.xs[l + 1], a.xs[l], tmp);
    }
    // Final norm on the text rows only, then the head.
    a.text_normed = ctx.take(Nt * C);
    a.rstd_f = ctx.take(N);
    float* text_in = ctx.take(Nt * C);  // [Nt, C] the text rows of xs[L]
    gather_text(ctx, a, text_in, a.xs[L]);
    b_.rmsnorm_forward(a.text_normed, a.rstd_f, text_in, norm_.w, Nt, C, dims_.eps);
    a.logits = ctx.take(Nt * V);
    b_.linear_forward(a.logits, a.text_normed, head_.w, nullptr, Nt, C, V);
    a.xs.push_back(text_in);  // xs[L + 1]: the final norm's input

    ForwardOutput out;
    for (size_t i = 0; i < samples.size(); ++i)
      out.outputs.push_back({a.logits + ctx.text_offsets[i] * V, ctx.text_offsets[i + 1] - ctx.text_offsets[i], V});
    ctx.logits = a.logits;
    ctx.vocab = V;
    ctx.acts = std::move(acts);
    out.context = std::move(ctxp);
    return out;
  }

  std::vector<std::vector<RowsView>> backward(ForwardContext& ctx,
                                              const std::vector<std::span<const float>>& output_grads) override {
    Acts& a = static_cast<Acts&>(*ctx.acts);
    const int64_t C = spec_.hidden, V = spec_.vocab, L = spec_.layers;
    const int64_t N = a.pk.tokens(), Nt = int64_t(a.tokens.size());
    // d logits = the loss's gradient + the outputs' gradients.      [Nt, V]
    float* dlogits = ctx.take_zeroed(Nt * V);
    if (ctx.dlogits) b_.accumulate(dlogits, ctx.dlogits, Nt * V);
    for (size_t i = 0; i < output_grads.size(); ++i) {
      if (output_grads[i].empty()) continue;
      const int64_t rows = ctx.text_offsets[i + 1] - ctx.text_offsets[i];
      if (int64_t(output_grads[i].size()) != rows * V)
        input_error(section_, fmt::format("sample {}: output gradient of {} floats, expected [{}, {}]", i,
                                          output_grads[i].size(), rows, V));
      b_.accumulate(dlogits + ctx.text_offsets[i] * V, output_grads[i].data(), rows * V);
    }
    // Head and final norm (text rows).
    float* dnormed = ctx.take_zeroed(Nt * C);
    b_.linear_backward(dnormed, head_.g, nullptr, dlogits, a.text_normed, head_.w, Nt, C, V);
    float* dtext = ctx.take_zeroed(Nt * C);
    b_.rmsnorm_backward(dtext, norm_.g, dnormed, a.xs[L + 1], norm_.w, a.rstd_f, Nt, C);
    float* dbuf[2] = {ctx.take_zeroed(N * C), ctx.take(N * C)};
    float* dx = dbuf[L % 2];
    if (L % 2) b_.zero(dx, N * C);
    scatter_text(ctx, a, dx, dtext);
    // Layers, last to first.
    DecoderScratch s = DecoderScratch::take(ctx, dims_, N);
    DecoderActs recomputed{};
    if (recompute_) recomputed = DecoderActs::take(ctx, dims_, N);
    for (int64_t l = L - 1; l >= 0; --l) {
      if (recompute_) decoder_forward(b_, dims_, layers_[l], a.pk, recomputed, s.tmp, a.xs[l], s.tmp);
      decoder_backward(b_, dims_, layers_[l], a.pk, recompute_ ? recomputed : a.layers[l], s, dbuf[l % 2],
                       dbuf[(l + 1) % 2], a.xs[l]);
    }
    // Embeddings: spliced blocks hand their gradient back, text rows to the table.
    float* dx0 = dbuf[0];
    std::vector<std::vector<RowsView>> out(a.seq_row.size());
    for (size_t i = 0; i < a.seq_row.size(); ++i) {
      int64_t row = a.seq_row[i];
      for (int64_t rows : a.spliced_rows[i]) {
        out[i].push_back({dx0 + row * C, rows, C});
        row += rows;
      }
      const int64_t t0 = ctx.text_offsets[i];
      if (embed_.g) b_.embedding_backward(embed_.g, dx0 + row * C, a.tokens.data() + t0, ctx.text_offsets[i + 1] - t0, C);
    }
    return out;
  }

 private:
  // Text rows of x[N, C] -> text[Nt, C], and back (+=).
  void gather_text(const ForwardContext& ctx, const Acts& a, float* text, const float* x) const {
    const int64_t C = spec_.hidden;
    for (size_t i = 0; i < a.seq_row.size(); ++i) {
      const int64_t t0 = ctx.text_offsets[i], nt = ctx.text_offsets[i + 1] - t0;
      const int64_t first = a.seq_row[i] + (a.pk.cu_seqlens[i + 1] - a.pk.cu_seqlens[i]) - nt;
      b_.copy(text + t0 * C, x + first * C, nt * C);
    }
  }
  void scatter_text(const ForwardContext& ctx, const Acts& a, float* dx, const float* dtext) const {
    const int64_t C = spec_.hidden;
    for (size_t i = 0; i < a.seq_row.size(); ++i) {
      const int64_t t0 = ctx.text_offsets[i], nt = ctx.text_offsets[i + 1] - t0;
      const int64_t first = a.seq_row[i] + (a.pk.cu_seqlens[i + 1] - a.pk.cu_seqlens[i]) - nt;
      b_.accumulate(dx + first * C, dtext + t0 * C, nt * C);
    }
  }

  const Section& section_;
  TransformerSpec spec_;
  Backend& b_;
  bool recompute_;
  DecoderDims dims_{};
  Param embed_, norm_, head_;
  std::vector<DecoderWeights> layers_;
};

}  // namespace

std::unique_ptr<ModelImpl> make_transformer(const Section& s, Backend& b, const ParamLookup& params) {
  return std::make_unique<Transformer>(s, b, params);
}

}  // namespace maestro
