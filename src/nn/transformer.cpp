// transformer: Llama (sect-language.md, "Built-in models") over a packed
// micro-batch. Each sample's sequence is its spliced upstream blocks (flow
// order) then its text, cut from the end to max_seq; the sequences are laid
// end to end (cu_seqlens) and attend only within themselves, causally unless
// causal = false. It emits, per sample, the final-normed hidden states of
// its text positions [n_text, hidden] (what an activations flow carries, and
// what their gradients come back to) and their logits [n_text, vocab] (what
// the loss and a logits flow read): Hugging Face's last_hidden_state and
// logits of LlamaForCausalLM.
// As a pipeline stage it runs its layers only, the first stage also the
// embeddings and the layout (Geometry), the last the final norm and head.
// As a tensor-parallel rank (section_model.h): its heads and ffn share in
// each layer (decoder_block.h), a vocabulary-parallel embedding (the rank
// looks up the tokens in its rows, zeros for the others, all-reduced) and a
// vocabulary-parallel head (its logits columns; the head's gradient of the
// final norm's output all-reduced in backward). Hidden states are whole on
// every rank.
#include <fmt/format.h>

#include <algorithm>

#include "graph/tensor_parallel.h"
#include "nn/decoder_block.h"

namespace maestro {

namespace {

class Transformer final : public ModelImpl {
 public:
  Transformer(const Section& s, Backend& b, const ParamLookup& p, StagePart part)
      : section_(s), spec_(std::get<TransformerSpec>(s.model.spec)), b_(b), part_(part) {
    const auto& t = spec_;
    const int64_t tp = part.tp.size;
    dims_ = {t.hidden,          t.heads / tp, t.kv_heads / tp, t.hidden / t.heads, t.ffn / tp, float(t.norm_eps),
             float(t.rope_theta), t.causal,  tp > 1 ? part.tp.comm : nullptr};
    vocab_shard_ = tp_padded_vocab(t.vocab, tp) / tp;
    vocab_first_ = part.tp.rank * vocab_shard_;
    vocab_valid_ = std::clamp<int64_t>(t.vocab - vocab_first_, 0, vocab_shard_);
    if (part.first) embed_ = p("model.embed_tokens.weight");
    for (int64_t i = part.layer_begin; i < part.layer_end; ++i) {
      recompute_.push_back(recomputes_layer(i, t.layers, s.recompute));
      any_recomputed_ = any_recomputed_ || recompute_.back();
      const std::string l = fmt::format("model.layers.{}.", i);
      layers_.push_back({p(l + "input_layernorm.weight"), p(l + "self_attn.q_proj.weight"),
                         p(l + "self_attn.k_proj.weight"), p(l + "self_attn.v_proj.weight"),
                         p(l + "self_attn.o_proj.weight"), p(l + "post_attention_layernorm.weight"),
                         p(l + "mlp.gate_proj.weight"), p(l + "mlp.up_proj.weight"), p(l + "mlp.down_proj.weight")});
    }
    if (part.last) {
      norm_ = p("model.norm.weight");
      head_ = p("lm_head.weight");
    }
  }

  // The micro-batch's layout, computed by the first stage.
  struct Geometry final : StageGeometry {
    Packing pk;
    std::vector<int32_t> tokens;        // [Nt] the kept text tokens, sample after sample
    std::vector<int32_t> targets;       // [Nt] next text token, -1 where the next position is not text
    std::vector<int64_t> text_offsets;  // [samples + 1] first text row of each sample
    std::vector<int64_t> seq_row;       // [samples] first packed row of each sample
    std::vector<std::vector<int64_t>> spliced_rows;  // [samples][blocks] rows of each spliced block
  };

  struct Acts final : Activations {
    std::shared_ptr<const Geometry> geo;
    std::vector<float*> xs;             // [L + 1] × [N, C] this stage's layer inputs, then the last layer's output
    std::vector<DecoderActs> layers;    // [L], empty where the layer is recomputed
    float* rstd_f = nullptr;            // [Nt]     last stage
    float* text_normed = nullptr;       // [Nt, C]  final-normed text rows
    void* text_normed16 = nullptr;      // [Nt, C]  in bf16, the head's operand (ForwardContext::take_bf16)
    float* text_in = nullptr;           // [Nt, C]  the final norm's input
    float* logits = nullptr;            // [Nt, Vs]
    std::vector<int32_t> shard_tokens;  // [Nt] tp: the tokens in this rank's vocabulary rows, Vs for the others
  };

  std::shared_ptr<const Geometry> geometry(const std::vector<SampleInput>& samples) const {
    const int64_t C = spec_.hidden, V = spec_.vocab;
    auto g = std::make_shared<Geometry>();
    g->text_offsets.assign(1, 0);
    for (size_t i = 0; i < samples.size(); ++i) {
      const SampleInput& in = samples[i];
      int64_t spliced = 0;
      g->spliced_rows.emplace_back();
      for (const auto& blk : in.spliced) {
        if (blk.size() % C != 0)
          input_error(section_, fmt::format("sample {}: a spliced block of {} floats is not a whole number of "
                                            "rows of width {}", i, blk.size(), C));
        g->spliced_rows.back().push_back(int64_t(blk.size()) / C);
        spliced += int64_t(blk.size()) / C;
      }
      if (spliced > spec_.max_seq)
        input_error(section_, fmt::format("sample {}: {} spliced embeddings exceed max_seq {}", i, spliced,
                                          spec_.max_seq));
      const int64_t text = std::min<int64_t>(int64_t(in.tokens.size()), spec_.max_seq - spliced);
      if (spliced + text == 0) input_error(section_, fmt::format("sample {}: empty sequence", i));
      g->seq_row.push_back(g->pk.tokens());
      g->pk.add_sequence(spliced + text);
      for (int64_t j = 0; j < text; ++j) {
        const int32_t tok = in.tokens[j];
        if (tok < 0 || tok >= V)
          input_error(section_, fmt::format("sample {}: token {} outside the vocabulary [0, {})", i, tok, V));
        g->tokens.push_back(tok);
        g->targets.push_back(j + 1 < text ? in.tokens[j + 1] : -1);
      }
      g->text_offsets.push_back(int64_t(g->tokens.size()));
    }
    return g;
  }

  ForwardOutput forward(std::shared_ptr<ForwardContext> ctxp, const std::vector<SampleInput>& samples,
                        const StageInput* stage_input) override {
    ForwardContext& ctx = *ctxp;
    const int64_t C = spec_.hidden, V = vocab_shard_, L = int64_t(layers_.size());
    auto acts = std::make_unique<Acts>();
    Acts& a = *acts;
    a.geo = part_.first ? geometry(samples) : stage_geometry<Geometry>(section_, stage_input, C);
    const Geometry& g = *a.geo;
    ctx.text_offsets = g.text_offsets;
    ctx.targets = g.targets;
    const int64_t N = g.pk.tokens(), Nt = int64_t(g.tokens.size());
    float* x0 = ctx.take(N * C);
    if (part_.first) {
      // Embeddings: spliced rows copied, text rows looked up.
      const float* text = text_embeddings(ctx, a, g);  // [Nt, C]
      for (size_t i = 0; i < samples.size(); ++i) {
        int64_t row = g.seq_row[i];
        for (const auto& blk : samples[i].spliced) {
          b_.copy_from_host_held(x0 + row * C, blk.data(), blk.size() * sizeof(float));
          row += int64_t(blk.size()) / C;
        }
        const int64_t t0 = g.text_offsets[i], nt = g.text_offsets[i + 1] - t0;
        b_.copy(x0 + row * C, text + t0 * C, nt * C);
      }
    } else {
      b_.copy_from_host_held(x0, stage_input->hidden.data(), (N * C) * sizeof(float));
    }
    // Layers.
    a.xs.push_back(x0);
    float* tmp = ctx.take(N * C);
    DecoderActs scratch{};
    if (any_recomputed_) scratch = DecoderActs::take(ctx, dims_, N);
    a.layers.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l) {
      a.xs.push_back(ctx.take(N * C));
      if (!recompute_[l]) a.layers[l] = DecoderActs::take(ctx, dims_, N);
      decoder_forward(b_, dims_, layers_[l], g.pk, recompute_[l] ? scratch : a.layers[l], a.xs[l + 1], a.xs[l], tmp);
    }
    ForwardOutput out;
    if (part_.last) {
      // Final norm on the text rows only, then the head.
      a.text_normed = ctx.take(Nt * C);  // fp32 kept: the section's outputs
      a.text_normed16 = ctx.take_bf16(Nt * C);
      a.rstd_f = ctx.take(Nt);
      a.text_in = ctx.take(Nt * C);
      gather_text(g, a.text_in, a.xs[L]);
      b_.rmsnorm_forward({a.text_normed, a.text_normed16}, a.rstd_f, a.text_in, norm_.w, Nt, C, dims_.eps);
      if (ctx.logits_wanted) {
        a.logits = ctx.take(Nt * V);
        b_.linear_forward(a.logits, {a.text_normed, a.text_normed16}, head_.linear(), nullptr, Nt, C, V);
      }
      for (size_t i = 0; i + 1 < g.text_offsets.size(); ++i) {
        const int64_t t0 = g.text_offsets[i], nt = g.text_offsets[i + 1] - t0;
        out.outputs.push_back({a.text_normed + t0 * C, nt, C});
        if (a.logits) out.logits.push_back({a.logits + t0 * V, nt, V});
      }
      ctx.logits = a.logits;  // null when not wanted: loss() refuses
      ctx.vocab = V;
      ctx.vocab_first = vocab_first_;
      ctx.vocab_valid = vocab_valid_;
    } else {
      out.hidden = {a.xs[L], N, C};
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
    const int64_t C = spec_.hidden, V = vocab_shard_, L = int64_t(layers_.size());
    const int64_t N = g.pk.tokens(), Nt = int64_t(g.tokens.size());
    // d(this stage's output), then in place through the layers    [N, C]
    float* dx = ctx.take_zeroed(N * C);
    if (part_.last) {
      // d(final-normed text rows) = the head's, from the loss's gradient
      // (none without a loss: the head is skipped), + the outputs'. [Nt, C]
      float* dnormed = ctx.dlogits ? ctx.take(Nt * C) : ctx.take_zeroed(Nt * C);
      if (ctx.dlogits) {
        b_.linear_backward(Grad::overwrite(dnormed), head_.grad_write(), nullptr, ctx.dlogits,
                           {a.text_normed, a.text_normed16}, head_.linear(), Nt, C, V);
        if (dims_.tp) dims_.tp->all_reduce(dnormed, Nt * C);  // each rank's columns' share
      }
      for (size_t i = 0; i < output_grads.size(); ++i) {
        if (output_grads[i].empty()) continue;
        const int64_t t0 = g.text_offsets[i], rows = g.text_offsets[i + 1] - t0;
        if (int64_t(output_grads[i].size()) != rows * C)
          input_error(section_, fmt::format("sample {}: output gradient of {} floats, expected [{}, {}]", i,
                                            output_grads[i].size(), rows, C));
        float* grad = ctx.take(rows * C);  // host data enters backend memory by a copy first
        b_.copy_from_host_held(grad, output_grads[i].data(), output_grads[i].size() * sizeof(float));
        b_.accumulate(dnormed + t0 * C, grad, rows * C);
      }
      // Final norm (text rows).
      float* dtext = ctx.take_zeroed(Nt * C);
      b_.rmsnorm_backward(dtext, norm_.grad_add(), dnormed, a.text_in, norm_.w, a.rstd_f, Nt, C);
      scatter_text(g, dx, dtext);
    } else {
      copy_stage_grad(section_, b_, dx, stage_grad, N, C);
    }
    // Layers, last to first.
    DecoderScratch s = DecoderScratch::take(ctx, dims_, N);
    DecoderActs recomputed{};
    if (any_recomputed_) recomputed = DecoderActs::take(ctx, dims_, N);
    for (int64_t l = L - 1; l >= 0; --l) {
      if (recompute_[l]) decoder_forward(b_, dims_, layers_[l], g.pk, recomputed, s.tmp, a.xs[l], s.tmp);
      decoder_backward(b_, dims_, layers_[l], g.pk, recompute_[l] ? recomputed : a.layers[l], s, dx, a.xs[l]);
    }
    float* dx0 = dx;
    if (!part_.first) {
      ctx.stage_dinput = {dx0, N, C};
      return {};
    }
    // Embeddings: spliced blocks hand their gradient back, text rows to the table.
    std::vector<std::vector<RowsView>> out(g.seq_row.size());
    float* dtext = embed_.trained() ? ctx.take(Nt * C) : nullptr;  // [Nt, C]
    for (size_t i = 0; i < g.seq_row.size(); ++i) {
      int64_t row = g.seq_row[i];
      for (int64_t rows : g.spliced_rows[i]) {
        out[i].push_back({dx0 + row * C, rows, C});
        row += rows;
      }
      const int64_t t0 = g.text_offsets[i];
      if (dtext) b_.copy(dtext + t0 * C, dx0 + row * C, (g.text_offsets[i + 1] - t0) * C);
    }
    if (dtext) text_embeddings_backward(ctx, a, g, dtext);
    return out;
  }

 private:
  // Text rows of x[N, C] -> text[Nt, C], and back (+=).
  void gather_text(const Geometry& g, float* text, const float* x) const {
    const int64_t C = spec_.hidden;
    for (size_t i = 0; i < g.seq_row.size(); ++i) {
      const int64_t t0 = g.text_offsets[i], nt = g.text_offsets[i + 1] - t0;
      const int64_t first = g.seq_row[i] + (g.pk.cu_seqlens[i + 1] - g.pk.cu_seqlens[i]) - nt;
      b_.copy(text + t0 * C, x + first * C, nt * C);
    }
  }
  void scatter_text(const Geometry& g, float* dx, const float* dtext) const {
    const int64_t C = spec_.hidden;
    for (size_t i = 0; i < g.seq_row.size(); ++i) {
      const int64_t t0 = g.text_offsets[i], nt = g.text_offsets[i + 1] - t0;
      const int64_t first = g.seq_row[i] + (g.pk.cu_seqlens[i + 1] - g.pk.cu_seqlens[i]) - nt;
      b_.accumulate(dx + first * C, dtext + t0 * C, nt * C);
    }
  }

  // The text rows' embeddings [Nt, C]. Tensor parallel: this rank's rows of
  // the table (a copy with one zero row appended, which the tokens of other
  // ranks read), all-reduced.
  const float* text_embeddings(ForwardContext& ctx, Acts& a, const Geometry& g) const {
    const int64_t C = spec_.hidden, Nt = int64_t(g.tokens.size()), Vs = vocab_shard_;
    float* text = ctx.take(Nt * C);
    if (!dims_.tp) {
      b_.embedding_forward(text, g.tokens.data(), embed_.w, Nt, C);
      return text;
    }
    for (int32_t t : g.tokens) {
      const int64_t local = int64_t(t) - vocab_first_;
      a.shard_tokens.push_back(int32_t(local >= 0 && local < Vs ? local : Vs));
    }
    float* table = ctx.take_zeroed((Vs + 1) * C);  // [Vs + 1, C]
    b_.copy(table, embed_.w, Vs * C);
    b_.embedding_forward(text, a.shard_tokens.data(), table, Nt, C);
    dims_.tp->all_reduce(text, Nt * C);
    return text;
  }
  // embed_'s gradient += the rows of dtext[Nt, C] scattered by token (tp: this rank's rows only).
  void text_embeddings_backward(ForwardContext& ctx, const Acts& a, const Geometry& g, const float* dtext) const {
    const int64_t C = spec_.hidden, Nt = int64_t(g.tokens.size()), Vs = vocab_shard_;
    if (!dims_.tp) return b_.embedding_backward(embed_.grad_add(), dtext, g.tokens.data(), Nt, C);
    float* dtable = ctx.take_zeroed((Vs + 1) * C);  // [Vs + 1, C]; the last row collects the other ranks' tokens
    b_.embedding_backward(dtable, dtext, a.shard_tokens.data(), Nt, C);
    b_.accumulate(embed_.grad_add(), dtable, Vs * C);
  }

  const Section& section_;
  TransformerSpec spec_;
  Backend& b_;
  StagePart part_;
  std::vector<char> recompute_;  // [L] this stage's layers: recomputed in backward (recomputes_layer)
  bool any_recomputed_ = false;  // some entry of recompute_
  DecoderDims dims_{};
  int64_t vocab_shard_ = 0, vocab_first_ = 0, vocab_valid_ = 0;  // Vs, this rank's first column, its real columns
  Param embed_, norm_, head_;
  std::vector<DecoderWeights> layers_;
};

}  // namespace

std::unique_ptr<ModelImpl> make_transformer(const Section& s, Backend& b, const ParamLookup& params, StagePart part) {
  return std::make_unique<Transformer>(s, b, params, part);
}

}  // namespace maestro
