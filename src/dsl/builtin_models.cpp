// The built-in models for the checker (checker.h): the parameter table of
// transformer, vit, audio_encoder and mlp, and the reading of `model`
// declarations, aliases and inline calls into their ModelSpec, with the
// rules between their parameters.
#include "dsl/checker.h"
#include "dsl/limits.h"

#include <cmath>

namespace maestro::sect {

namespace {

// The upper bound of a built-in model's integer parameter (dsl/limits.h).
int64_t max_of(const std::string& param) {
  if (param == "layers") return limits::kLayers;
  if (param == "hidden" || param == "heads" || param == "kv_heads") return limits::kWidth;
  if (param == "ffn") return limits::kFfn;
  if (param == "image" || param == "patch") return limits::kImage;
  if (param == "channels") return limits::kChannels;
  if (param == "mel_bins") return limits::kMelBins;
  if (param == "frames_per_token") return limits::kFramesPerToken;
  return limits::kVocab;  // vocab, max_seq, max_frames, mlp in/out
}

}  // namespace

const std::map<std::string, std::vector<Param>>& builtin_params() {
  using T = Param::Type;
  static const std::map<std::string, std::vector<Param>> table = {
      {"transformer",
       {{"layers", T::Int, true}, {"hidden", T::Int, true}, {"heads", T::Int, true}, {"kv_heads", T::Int, false},
        {"ffn", T::Int, true}, {"vocab", T::Int, true}, {"max_seq", T::Int, false}, {"causal", T::Bool, false},
        {"rope_theta", T::Real, false}, {"norm_eps", T::Real, false}}},
      {"vit",
       {{"layers", T::Int, true}, {"hidden", T::Int, true}, {"heads", T::Int, true}, {"ffn", T::Int, true},
        {"patch", T::Int, true}, {"image", T::Int, true}, {"channels", T::Int, false}, {"norm_eps", T::Real, false},
        {"pixel_shuffle", T::Real, false}}},
      {"audio_encoder",
       {{"layers", T::Int, true}, {"hidden", T::Int, true}, {"heads", T::Int, true}, {"ffn", T::Int, true},
        {"mel_bins", T::Int, false}, {"frames_per_token", T::Int, false}, {"max_frames", T::Int, false},
        {"norm_eps", T::Real, false}}},
      {"mlp",
       {{"in", T::Int, true}, {"out", T::Int, true}, {"hidden", T::Int, false}, {"layers", T::Int, false},
        {"act", T::Act, false}}},
  };
  return table;
}

std::vector<std::string> keys_of(const std::map<std::string, std::vector<Param>>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

std::optional<ModelSpec> Checker::model_named(const std::string& name, Span use) {
  ModelEntry& m = models_.at(name);
  if (m.state == ModelEntry::State::Done) return m.spec;
  if (m.state == ModelEntry::State::Busy) {
    error(use, fmt::format("model '{}' is defined in terms of itself", name));
    return std::nullopt;
  }
  if (model_depth_ >= kMaxLetDepth) {
    error(use, fmt::format("models are named in terms of each other more than {} levels deep", kMaxLetDepth));
    return std::nullopt;
  }
  m.state = ModelEntry::State::Busy;
  ++model_depth_;
  std::optional<ModelSpec> spec = model_expr(*m.stmt->value);
  --model_depth_;
  if (spec) spec->name = name;
  m.state = ModelEntry::State::Done;
  m.spec = spec;
  return spec;
}

std::optional<ModelSpec> Checker::model_expr(const Expr& e) {
  static const std::vector<std::string> builtins = keys_of(builtin_params());
  if (e.kind == Expr::Kind::Name) {
    if (models_.count(e.text)) return model_named(e.text, e.span);
    std::vector<std::string> names;
    for (const auto& [k, v] : models_) names.push_back(k);
    std::string hint = did_you_mean(e.text, names);
    if (hint.empty()) hint = did_you_mean(e.text, builtins);
    error(e.span, fmt::format("unknown model '{}'{}", e.text, hint));
    return std::nullopt;
  }
  if (e.kind != Expr::Kind::Call) {
    error(e.span, fmt::format("a model is a built-in call such as transformer(...) or the name of a model, not {}",
                              kind_of(e)));
    return std::nullopt;
  }
  auto it = builtin_params().find(e.text);
  if (it == builtin_params().end()) {
    error(e.span, fmt::format("unknown model '{}'{} (the built-in models are {})", e.text,
                              did_you_mean(e.text, builtins), quoted(builtins)));
    return std::nullopt;
  }
  std::vector<std::string> accepted, required;
  for (const Param& p : it->second) {
    accepted.push_back(p.name);
    if (p.required) required.push_back(p.name);
  }
  auto a = args(e, accepted, required);
  if (!a) return std::nullopt;
  bool ok = true;
  auto int_arg = [&](const char* name, int64_t& out) {
    if (const Expr* v = a->get(name)) {
      auto n = integer(*v, fmt::format("'{}'", name), 1, max_of(name));
      if (n) out = *n;
      ok &= n.has_value();
    }
  };
  auto real_arg = [&](const char* name, double& out) {
    if (const Expr* v = a->get(name)) {
      auto n = positive_real(*v, fmt::format("'{}'", name));
      if (n) out = *n;
      ok &= n.has_value();
    }
  };
  auto divides = [&](const char* small, int64_t s, const char* big, int64_t b, bool small_divides_big) {
    if (!ok || s == 0 || b % s == 0) return;
    const char* at = small_divides_big ? small : big;
    Span span = a->name_spans.count(at) ? a->name_spans.at(at) : e.span;
    error(span, small_divides_big ? fmt::format("'{}' ({}) must divide '{}' ({})", small, s, big, b)
                                  : fmt::format("'{}' ({}) must be divisible by '{}' ({})", big, b, small, s));
    ok = false;
  };
  ModelSpec spec;
  spec.name = e.text;
  if (e.text == "transformer") {
    TransformerSpec t;
    int_arg("layers", t.layers), int_arg("hidden", t.hidden), int_arg("heads", t.heads);
    t.kv_heads = t.heads;
    int_arg("kv_heads", t.kv_heads), int_arg("ffn", t.ffn), int_arg("vocab", t.vocab), int_arg("max_seq", t.max_seq);
    if (const Expr* v = a->get("causal")) {
      auto b = boolean(*v, "'causal'");
      if (b) t.causal = *b;
      ok &= b.has_value();
    }
    real_arg("rope_theta", t.rope_theta), real_arg("norm_eps", t.norm_eps);
    divides("kv_heads", t.kv_heads, "heads", t.heads, true);
    divides("heads", t.heads, "hidden", t.hidden, false);
    spec.spec = t;
  } else if (e.text == "vit") {
    VitSpec v;
    int_arg("layers", v.layers), int_arg("hidden", v.hidden), int_arg("heads", v.heads), int_arg("ffn", v.ffn);
    int_arg("patch", v.patch), int_arg("image", v.image), int_arg("channels", v.channels);
    real_arg("norm_eps", v.norm_eps);
    divides("heads", v.heads, "hidden", v.hidden, false);
    divides("patch", v.patch, "image", v.image, false);
    if (const Expr* r = a->get("pixel_shuffle")) {
      // 1/merge for a whole merge that divides the patch grid (InternVL: 0.5).
      auto ratio = positive_real(*r, "'pixel_shuffle'");
      ok &= ratio.has_value();
      if (ratio) {
        const double merge = std::round(1.0 / *ratio);
        if (*ratio > 1.0 || merge > double(limits::kImage) || std::abs(merge * *ratio - 1.0) > 1e-9) {
          error(r->span, fmt::format("'pixel_shuffle' must be 1/k for a whole k ≥ 1 (0.5 merges 2×2 patches "
                                     "into one token), not {}", show(*ratio)));
          ok = false;
        } else if (ok && v.grid() % int64_t(merge) != 0) {
          error(r->span, fmt::format("'pixel_shuffle' {} merges {}×{} patches, which must divide the {}×{} patch "
                                     "grid (image {} / patch {})", show(*ratio), int64_t(merge), int64_t(merge), v.grid(),
                                     v.grid(), v.image, v.patch));
          ok = false;
        } else {
          v.merge = int64_t(merge);
        }
      }
    }
    spec.spec = v;
  } else if (e.text == "audio_encoder") {
    AudioEncoderSpec m;
    int_arg("layers", m.layers), int_arg("hidden", m.hidden), int_arg("heads", m.heads), int_arg("ffn", m.ffn);
    int_arg("mel_bins", m.mel_bins), int_arg("frames_per_token", m.frames_per_token);
    int_arg("max_frames", m.max_frames);
    real_arg("norm_eps", m.norm_eps);
    divides("heads", m.heads, "hidden", m.hidden, false);
    spec.spec = m;
  } else {
    MlpSpec m;
    int_arg("in", m.in), int_arg("out", m.out);
    m.hidden = m.out;
    int_arg("hidden", m.hidden), int_arg("layers", m.layers);
    if (const Expr* v = a->get("act")) {
      auto w = word(*v, "'act'", {"gelu", "relu", "silu"});
      if (w) m.act = *w == "gelu" ? Activation::Gelu : *w == "relu" ? Activation::Relu : Activation::Silu;
      ok &= w.has_value();
    }
    spec.spec = m;
  }
  if (!ok) return std::nullopt;
  return spec;
}

}  // namespace maestro::sect
