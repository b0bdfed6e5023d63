// Human renderings of Program parts (describe.h).
#include "cli/describe.h"

#include <fmt/format.h>

#include "gpu/backend_factory.h"

namespace maestro {

namespace {
struct Unit {
  double div;
  const char* suffix;
};
Unit unit_for(int64_t scale) {
  if (scale >= 1'000'000'000) return {1e9, "B"};
  if (scale >= 1'000'000) return {1e6, "M"};
  if (scale >= 1'000) return {1e3, "K"};
  return {1, ""};
}
}  // namespace

std::string format_count_in_unit_of(int64_t n, int64_t scale) {
  const Unit u = unit_for(scale);
  if (u.div == 1) return fmt::format("{}", n);
  return fmt::format("{:.2f}{}", double(n) / u.div, u.suffix);
}

std::string format_count(int64_t n) { return format_count_in_unit_of(n, n); }

std::string model_summary(const ModelSpec& model) {
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    const std::string heads = t->kv_heads == t->heads ? fmt::format("{}", t->heads)
                                                      : fmt::format("{}/{}", t->heads, t->kv_heads);
    return fmt::format("transformer L{} h{} heads{} ffn{} vocab{}{}", t->layers, t->hidden, heads, t->ffn, t->vocab,
                       t->causal ? "" : " bidirectional");
  }
  if (auto* v = std::get_if<VitSpec>(&model.spec))
    return fmt::format("vit L{} h{} heads{} ffn{} p{}/{}{}", v->layers, v->hidden, v->heads, v->ffn, v->patch, v->image,
                       v->merge > 1 ? fmt::format(" shuffle 1/{} -> {} tokens x {}", v->merge, v->tokens_per_image(),
                                                  v->output_width())
                                    : "");
  if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec))
    return fmt::format("audio_encoder L{} h{} heads{} ffn{} mel{}", a->layers, a->hidden, a->heads, a->ffn,
                       a->mel_bins);
  const auto& m = std::get<MlpSpec>(model.spec);
  const char* act = m.act == Activation::Gelu ? "gelu" : m.act == Activation::Relu ? "relu" : "silu";
  return fmt::format("mlp {}->{}->{} x{} {}", m.in, m.hidden, m.out, m.layers, act);
}

std::string recompute_label(const Section& section) {
  if (section.recompute_auto) return " (recompute auto)";
  if (section.recompute == 0) return "";
  if (section.recompute >= section.model.layers()) return " (recompute)";
  return fmt::format(" (recompute {}/{})", section.recompute, section.model.layers());
}

std::string loss_summary(const std::vector<LossTerm>& loss) {
  if (loss.empty()) return "-";
  std::string out;
  for (const LossTerm& term : loss) {
    if (!out.empty()) out += " + ";
    if (term.weight != 1.0) out += fmt::format("{}*", term.weight);
    out += term.kind == LossKind::CrossEntropy ? std::string("cross_entropy")
                                               : fmt::format("kl(T={})", term.temperature);
  }
  return out;
}

std::string parallel_summary(const ParallelSpec& p) {
  const auto degree = [](const std::optional<int64_t>& d) { return d ? fmt::format("{}", *d) : std::string(" auto"); };
  return fmt::format("tp{} pp{} dp{}", degree(p.tp), degree(p.pp), degree(p.dp));
}

std::string consumes_summary(const std::vector<Modality>& consumes) {
  if (consumes.empty()) return "-";
  std::string out;
  for (Modality m : consumes) out += (out.empty() ? "" : ",") + std::string(modality_name(m));
  return out;
}

std::string detected_backend(const RuntimeConfig& config) {
  if (config.runtime.backend != "auto") return config.runtime.backend;
  return backend_kind_name(choose_backend("auto").kind);
}

}  // namespace maestro
