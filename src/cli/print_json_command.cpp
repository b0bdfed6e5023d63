// `--print json`: the whole resolved Program as one JSON document with a
// stable key order (declaration order of the fields in dsl/program.h), plus
// each section's parameter count. Built fully before anything is written.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "graph/model_tensors.h"

namespace maestro {

namespace {

using json = nlohmann::ordered_json;

json to_json(const SourceLoc& loc) { return {{"file", loc.file}, {"line", loc.line}, {"col", loc.col}}; }

json to_json(const ModelSpec& model) {
  json j = {{"name", model.name}, {"builtin", model.builtin()}};
  if (auto* t = std::get_if<TransformerSpec>(&model.spec)) {
    j.update(json{{"layers", t->layers}, {"hidden", t->hidden}, {"heads", t->heads}, {"kv_heads", t->kv_heads},
                  {"ffn", t->ffn}, {"vocab", t->vocab}, {"max_seq", t->max_seq}, {"causal", t->causal},
                  {"rope_theta", t->rope_theta}, {"norm_eps", t->norm_eps}});
  } else if (auto* v = std::get_if<VitSpec>(&model.spec)) {
    j.update(json{{"layers", v->layers}, {"hidden", v->hidden}, {"heads", v->heads}, {"ffn", v->ffn},
                  {"patch", v->patch}, {"image", v->image}, {"channels", v->channels}, {"norm_eps", v->norm_eps},
                  {"pixel_shuffle", 1.0 / double(v->merge)}, {"tokens_per_image", v->tokens_per_image()},
                  {"output_width", v->output_width()}});
  } else if (auto* a = std::get_if<AudioEncoderSpec>(&model.spec)) {
    j.update(json{{"layers", a->layers}, {"hidden", a->hidden}, {"heads", a->heads}, {"ffn", a->ffn},
                  {"mel_bins", a->mel_bins}, {"frames_per_token", a->frames_per_token},
                  {"max_frames", a->max_frames}, {"norm_eps", a->norm_eps}});
  } else {
    const auto& m = std::get<MlpSpec>(model.spec);
    j.update(json{{"in", m.in}, {"out", m.out}, {"hidden", m.hidden}, {"layers", m.layers},
                  {"act", m.act == Activation::Gelu ? "gelu" : m.act == Activation::Relu ? "relu" : "silu"}});
  }
  return j;
}

json degree(const std::optional<int64_t>& d) { return d ? json(*d) : json("auto"); }

// As written: false, true (every layer), a number of layers, or "auto".
json recompute_json(const Section& s) {
  if (s.recompute_auto) return "auto";
  if (s.recompute == 0 || s.recompute >= s.model.layers()) return s.recompute > 0;
  return s.recompute;
}

json to_json(const Section& s) {
  json consumes = json::array();
  for (Modality m : s.consumes) consumes.push_back(modality_name(m));
  json loss = json::array();
  for (const LossTerm& t : s.loss) {
    json term = {{"kind", t.kind == LossKind::CrossEntropy ? "cross_entropy" : "kl"}, {"weight", t.weight}};
    if (t.kind == LossKind::KL) term["temperature"] = t.temperature;
    loss.push_back(term);
  }
  return {{"name", s.name},
          {"loc", to_json(s.loc)},
          {"model", to_json(s.model)},
          {"params", parameter_count(s.model)},
          {"mode", s.mode == Mode::Train ? "train" : "frozen"},
          {"consumes", consumes},
          {"when", s.when.str()},
          {"parallel", {{"tp", degree(s.parallel.tp)}, {"pp", degree(s.parallel.pp)}, {"dp", degree(s.parallel.dp)}}},
          {"micro_batch", degree(s.micro_batch)},
          {"loss", loss},
          {"weights", s.weights.empty() ? json(nullptr) : json(s.weights)},
          {"recompute", recompute_json(s)}};
}

json to_json(const Distribution& d) {
  switch (d.kind) {
    case Distribution::Kind::Constant: return {{"kind", "constant"}, {"value", d.value}};
    case Distribution::Kind::Uniform: return {{"kind", "uniform"}, {"min", d.min}, {"max", d.max}};
    case Distribution::Kind::LogNormal:
      return {{"kind", "lognormal"}, {"median", d.median}, {"sigma", d.sigma}, {"max", d.max}};
    case Distribution::Kind::Choice: return {{"kind", "choice"}, {"values", d.values}, {"weights", d.weights}};
  }
  return nullptr;
}

json to_json(const DataSpec& d) {
  json j;
  if (d.source == DataSpec::Source::Synthetic) j["source"] = {{"kind", "synthetic"}, {"seed", d.seed}};
  else j["source"] = {{"kind", "files"}, {"manifest", d.manifest}};
  j["mix"] = json::array();
  for (const MixEntry& e : d.mix) {
    json modalities = json::array();
    for (int m = 0; m < kNumModalities; ++m)
      if (e.modalities.has(Modality(m))) modalities.push_back(modality_name(Modality(m)));
    j["mix"].push_back({{"name", e.name}, {"modalities", modalities}, {"weight", e.weight}});
  }
  j["text_tokens"] = d.text_tokens ? to_json(*d.text_tokens) : json(nullptr);
  j["images"] = d.images ? to_json(*d.images) : json(nullptr);
  j["audio_frames"] = d.audio_frames ? to_json(*d.audio_frames) : json(nullptr);
  j["video_frames"] = d.video_frames ? to_json(*d.video_frames) : json(nullptr);
  j["loc"] = to_json(d.loc);
  return j;
}

json to_json(const TrainSpec& t) {
  const OptimizerSpec& o = t.optimizer;
  return {{"global_batch", t.global_batch},
          {"steps", t.steps},
          {"seed", t.seed},
          {"optimizer",
           {{"kind", "adamw"}, {"lr", o.lr}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps},
            {"weight_decay", o.weight_decay}, {"shard", o.shard}}},
          {"schedule",
           {{"kind", t.schedule.kind == LrSchedule::Kind::Constant ? "constant" : "cosine"},
            {"warmup", t.schedule.warmup}}},
          {"grad_clip", t.grad_clip},
          {"precision", t.precision == Precision::BF16 ? "bf16" : "fp32"},
          {"checkpoint",
           {{"every", t.checkpoint_every}, {"dir", t.checkpoint_dir.empty() ? json(nullptr) : json(t.checkpoint_dir)}}},
          {"loc", to_json(t.loc)}};
}

int print_json_command(const Program& program, const RuntimeConfig&, const CliOptions&) {
  json j;
  j["file"] = program.file;
  j["sources"] = program.sources;
  j["sections"] = json::array();
  for (const Section& s : program.sections) j["sections"].push_back(to_json(s));
  j["flows"] = json::array();
  for (const Flow& f : program.flows)
    j["flows"].push_back({{"from", f.from}, {"to", f.to},
                          {"kind", f.kind == FlowKind::Activations ? "activations" : "logits"}, {"loc", to_json(f.loc)}});
  j["data"] = to_json(program.data);
  j["train"] = to_json(program.train);
  const std::string out = j.dump(2) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

CommandRegistration reg("print-json", &print_json_command);

}  // namespace

}  // namespace maestro
