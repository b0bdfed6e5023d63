// Block readers for the checker (checker.h): the keys of a block (unknown,
// misplaced, repeated), then each section, flow, data and train block read
// into the Program with the language's defaults and the rules local to it.
#include "dsl/checker.h"
#include "graph/tensor_parallel.h"  // tp_divisibility_error (inline)
#include "dsl/limits.h"

namespace maestro::sect {

Checker::Keys Checker::entries(const Block& b, const std::vector<std::string>& values,
                               const std::vector<std::string>& blocks, const std::string& in) {
  Keys out;
  std::vector<std::string> all = values;
  all.insert(all.end(), blocks.begin(), blocks.end());
  for (const Entry& e : b.entries) {
    bool is_value = std::find(values.begin(), values.end(), e.key) != values.end();
    bool is_block = std::find(blocks.begin(), blocks.end(), e.key) != blocks.end();
    if (!is_value && !is_block) {
      std::string hint = did_you_mean(e.key, all);
      error(e.key_span, fmt::format("unknown key '{}' {}{}", e.key, in, hint));
      for (const auto& k : all)
        if (hint == fmt::format("; did you mean '{}'?", k)) out.mentioned.insert(k);
      continue;
    }
    out.mentioned.insert(e.key);
    if (is_block && e.block == nullptr) {
      error(e.key_span, fmt::format("'{}' is a block: write '{} {{ ... }}'", e.key, e.key));
      continue;
    }
    if (is_value && e.block != nullptr) {
      error(e.key_span, fmt::format("'{}' takes a value: write '{} = ...;'", e.key, e.key));
      continue;
    }
    auto it = out.set.find(e.key);
    if (it != out.set.end()) {
      error(e.key_span, fmt::format("'{}' is set twice {} (first at {})", e.key, in,
                                    where(it->second->key_span, e.key_span)));
      continue;
    }
    out.set[e.key] = &e;
  }
  return out;
}

void Checker::one_block(const Stmt& s, const Stmt*& first, const char* what) {
  if (first == nullptr) {
    first = &s;
    return;
  }
  error(s.span, fmt::format("a second '{}' block: a program has exactly one, and the first is at {}", what,
                            where(first->span, s.span)));
}

Condition Checker::condition(const Expr& e, bool& ok) {
  Condition c;
  switch (e.kind) {
    case Expr::Kind::Bool:
      if (e.flag) return c;
      break;
    case Expr::Kind::Not:
      c.kind = Condition::Kind::Not;
      c.args.push_back(condition(*e.items[0], ok));
      return c;
    case Expr::Kind::And:
    case Expr::Kind::Or: {
      c = condition(*e.items[0], ok);
      for (size_t i = 1; i < e.items.size(); ++i) {
        Condition both;
        both.kind = e.kind == Expr::Kind::And ? Condition::Kind::And : Condition::Kind::Or;
        both.args.push_back(std::move(c));
        both.args.push_back(condition(*e.items[i], ok));
        c = std::move(both);
      }
      return c;
    }
    case Expr::Kind::Call:
      if (e.text == "has") {
        if (e.items.size() != 1 || !e.arg_names[0].empty() || e.items[0]->kind != Expr::Kind::Name) {
          error(e.span, "has(...) takes one modality: has(image)");
          ok = false;
          return c;
        }
        auto m = modality_of(e.items[0]->text);
        if (!m) {
          error(e.items[0]->span, fmt::format("unknown modality '{}'{} (modalities are text, image, audio, video)",
                                              e.items[0]->text, did_you_mean(e.items[0]->text, kModalities)));
          ok = false;
          return c;
        }
        return Condition::has(*m);
      }
      break;
    default:
      break;
  }
  error(e.span, fmt::format("'when' takes a condition such as has(image) and not has(audio), not {}", kind_of(e)));
  ok = false;
  return c;
}

std::optional<LossTerm> Checker::loss_term(const Expr& e) {
  static const std::vector<std::string> losses = {"cross_entropy", "kl"};
  if (e.kind == Expr::Kind::Arith && e.ops.size() == 1 && e.ops[0] == '*') {
    const Expr* weight = e.items[0].get();
    const Expr* term = e.items[1].get();
    auto is_term = [](const Expr* x) { return x->kind == Expr::Kind::Call || (x->kind == Expr::Kind::Name && x->text == "cross_entropy"); };
    if (is_term(weight) && !is_term(term)) std::swap(weight, term);
    auto w = real(*weight, "a loss weight");
    auto t = loss_term(*term);
    if (!w || !t) return std::nullopt;
    if (*w <= 0) {
      error(weight->span, fmt::format("a loss weight must be positive, not {}", show(*w)));
      return std::nullopt;
    }
    t->weight *= *w;
    return t;
  }
  if (e.kind == Expr::Kind::Name && e.text == "cross_entropy") return LossTerm{LossKind::CrossEntropy, 1.0, 1.0};
  if (e.kind == Expr::Kind::Call && e.text == "kl") {
    auto a = args(e, {"temperature"}, {});
    if (!a) return std::nullopt;
    LossTerm t{LossKind::KL, 1.0, 1.0};
    if (const Expr* v = a->get("temperature")) {
      auto temp = positive_real(*v, "'temperature'");
      if (!temp) return std::nullopt;
      t.temperature = *temp;
    }
    return t;
  }
  if ((e.kind == Expr::Kind::Name || e.kind == Expr::Kind::Call) && e.text != "cross_entropy") {
    error(e.span, fmt::format("unknown loss '{}'{} (losses are cross_entropy and kl(temperature: T))", e.text,
                              did_you_mean(e.text, losses)));
    return std::nullopt;
  }
  error(e.span, fmt::format("'loss' takes cross_entropy, kl(temperature: T) or a weighted sum such as "
                            "cross_entropy + 0.5 * kl(temperature: 2), not {}", kind_of(e)));
  return std::nullopt;
}

std::vector<LossTerm> Checker::loss(const Expr& e, bool& ok) {
  std::vector<const Expr*> terms;
  if (e.kind == Expr::Kind::Arith && std::find(e.ops.begin(), e.ops.end(), '+') != e.ops.end()) {
    if (std::find(e.ops.begin(), e.ops.end(), '-') != e.ops.end()) {
      error(e.span, "loss terms are added with '+' (a weight must be positive)");
      ok = false;
      return {};
    }
    for (const auto& item : e.items) terms.push_back(item.get());
  } else {
    terms.push_back(&e);
  }
  std::vector<LossTerm> out;
  for (const Expr* t : terms) {
    auto term = loss_term(*t);
    if (!term) {
      ok = false;
      continue;
    }
    for (const LossTerm& seen : out)
      if (seen.kind == term->kind) {
        error(t->span, fmt::format("the loss has two '{}' terms", term->kind == LossKind::KL ? "kl" : "cross_entropy"));
        ok = false;
      }
    out.push_back(*term);
  }
  return out;
}

// What each model reads from a sample (actors/step_inputs.cpp): a
// transformer text, a vit images (video frames are images), an audio encoder
// audio. Without one of them in `consumes` it would fail (or, a transformer,
// emit nothing and have no target positions) only once the run started.
// Other modalities listed only gate when the section runs (its default
// `when`); an mlp reads its input from flows (check_sections_against_program).
void Checker::check_consumes(const Section& sec, Span where) {
  std::vector<Modality> reads;
  std::string what;
  if (std::holds_alternative<TransformerSpec>(sec.model.spec)) reads = {Modality::Text}, what = "text";
  else if (std::holds_alternative<VitSpec>(sec.model.spec)) reads = {Modality::Image, Modality::Video}, what = "images";
  else if (std::holds_alternative<AudioEncoderSpec>(sec.model.spec)) reads = {Modality::Audio}, what = "audio";
  if (reads.empty()) return;
  for (Modality m : sec.consumes)
    if (std::find(reads.begin(), reads.end(), m) != reads.end()) return;
  const std::string builtin = sec.model.builtin();
  error(where, fmt::format("section '{}' is {} {}, which reads {} from the sample: its 'consumes' must name {}", sec.name,
                           builtin == "audio_encoder" ? "an" : "a", builtin, what,
                           reads.size() == 1 ? fmt::format("'{}'", what) : std::string("'image' or 'video'")));
}

void Checker::read_section(const Stmt& s) {
  if (std::find(section_names_.begin(), section_names_.end(), s.name) == section_names_.end()) return;
  for (const Section& done : program_.sections)
    if (done.name == s.name) return;  // a duplicate, already reported
  const std::string in = fmt::format("in section '{}'", s.name);
  auto keys = entries(*s.block, {"model", "mode", "consumes", "when", "micro_batch", "loss", "weights", "recompute"},
                      {"parallel"}, in);
  Section sec;
  sec.name = s.name;
  sec.loc = SourceLoc{files_[s.name_span.file].display, s.name_span.line, s.name_span.col};
  SectionInfo info;
  info.name_span = s.name_span;
  bool ok = true;
  if (auto it = keys.find("model"); it != keys.end()) {
    auto m = model_expr(*it->second->value);
    if (m) sec.model = *m;
    ok &= m.has_value();
  } else {
    if (keys.missing("model")) error(s.name_span, fmt::format("section '{}' has no 'model'", s.name));
    ok = false;
  }
  if (auto it = keys.find("mode"); it != keys.end()) {
    auto w = word(*it->second->value, "'mode'", {"train", "frozen"});
    if (w) sec.mode = *w == "train" ? Mode::Train : Mode::Frozen;
  }
  bool consumes_ok = true;  // every item a modality (else its error is enough)
  if (auto it = keys.find("consumes"); it != keys.end()) {
    const Expr& list = *it->second->value;
    consumes_ok = list.kind == Expr::Kind::List;
    if (list.kind != Expr::Kind::List) {
      error(list.span, fmt::format("'consumes' takes a list of modalities such as [image, text], not {}", kind_of(list)));
    } else {
      for (const auto& item : list.items) {
        if (item->kind != Expr::Kind::Name) {
          error(item->span, fmt::format("'consumes' lists modalities (text, image, audio, video), not {}", kind_of(*item)));
          continue;
        }
        auto m = modality_of(item->text);
        if (!m) {
          error(item->span, fmt::format("unknown modality '{}'{} (modalities are text, image, audio, video)",
                                        item->text, did_you_mean(item->text, kModalities)));
          continue;
        }
        if (std::find(sec.consumes.begin(), sec.consumes.end(), *m) != sec.consumes.end()) {
          error(item->span, fmt::format("'consumes' names '{}' twice", item->text));
          continue;
        }
        sec.consumes.push_back(*m);
        info.consume_spans.push_back(item->span);
      }
      consumes_ok = sec.consumes.size() == list.items.size();
    }
  }
  if (ok && consumes_ok)
    check_consumes(sec, keys.find("consumes") != keys.end() ? keys.find("consumes")->second->value->span : s.name_span);
  if (auto it = keys.find("when"); it != keys.end()) {
    info.when_span = it->second->value->span;
    bool cond_ok = true;
    Condition c = condition(*it->second->value, cond_ok);
    if (cond_ok) sec.when = std::move(c);
    info.when_written = cond_ok;
  } else {
    for (Modality m : sec.consumes) {
      if (m == Modality::Text) continue;
      const Condition has = Condition::has(m);
      if (sec.when.kind == Condition::Kind::True) {
        sec.when = has;
      } else {
        Condition both;
        both.kind = Condition::Kind::And;
        both.args = {std::move(sec.when), has};
        sec.when = std::move(both);
      }
    }
  }
  if (auto it = keys.find("parallel"); it != keys.end()) {
    auto degrees = entries(*it->second->block, {"tp", "pp", "dp"}, {}, fmt::format("in 'parallel' of section '{}'", s.name));
    auto degree = [&](const char* key, std::optional<int64_t>& out) {
      if (auto d = degrees.find(key); d != degrees.end())
        if (auto v = count_or_auto(*d->second->value, fmt::format("'{}'", key))) out = *v;
    };
    degree("tp", sec.parallel.tp), degree("pp", sec.parallel.pp), degree("dp", sec.parallel.dp);
    if (auto d = degrees.find("dp"); d != degrees.end()) info.dp_span = d->second->value->span;
    if (auto d = degrees.find("tp"); d != degrees.end() && ok && sec.parallel.tp)
      if (const std::string e = tp_divisibility_error(sec.model, *sec.parallel.tp, /*heads_only=*/true); !e.empty())
        error(d->second->value->span, fmt::format("section '{}' cannot be split over tp = {} ranks: {}", s.name,
                                                  *sec.parallel.tp, e));
  }
  if (auto it = keys.find("micro_batch"); it != keys.end()) {
    if (auto v = count_or_auto(*it->second->value, "'micro_batch'")) {
      sec.micro_batch = *v;
      info.micro_batch_span = it->second->value->span;
    }
  }
  if (auto it = keys.find("loss"); it != keys.end()) {
    bool loss_ok = true;
    sec.loss = loss(*it->second->value, loss_ok);
    info.loss_span = it->second->key_span;
    if (!loss_ok) sec.loss.clear();
  }
  if (auto it = keys.find("weights"); it != keys.end())
    if (auto p = path(*it->second->value, "'weights'")) sec.weights = *p;
  if (auto it = keys.find("recompute"); it != keys.end()) {
    info.recompute_written = true;
    const Expr& v = *it->second->value;
    const int64_t layers = ok ? sec.model.layers() : 0;
    const LetValue* let = v.kind == Expr::Kind::Name && lets_.count(v.text) ? let_value(v.text, v.span, 0) : nullptr;
    if (v.kind == Expr::Kind::Auto) {
      sec.recompute_auto = true;
    } else if (v.kind == Expr::Kind::Bool || (let && let->kind == LetValue::Kind::Bool)) {
      if (auto b = boolean(v, "'recompute'")) sec.recompute = *b ? layers : 0;
    } else if (v.kind == Expr::Kind::Number || v.kind == Expr::Kind::Neg || v.kind == Expr::Kind::Arith || let) {
      const std::string what = ok ? fmt::format("'recompute' (layers of {})", layers) : "'recompute'";
      if (auto n = integer(v, what, 0, ok ? layers : INT64_MAX)) sec.recompute = *n;
    } else if (v.kind == Expr::Kind::Name && lets_.count(v.text)) {
      // a let that did not evaluate: reported there
    } else {
      error(v.span, fmt::format("'recompute' takes true, false, auto or a number of layers, not {}", kind_of(v)));
    }
  }
  info.model_ok = ok;
  program_.sections.push_back(std::move(sec));
  infos_.push_back(info);
}

void Checker::read_flow(const Stmt& s) {
  FlowKind kind = FlowKind::Activations;
  if (!s.flow_kind.empty()) {
    if (s.flow_kind == "logits") kind = FlowKind::Logits;
    else if (s.flow_kind != "activations") {
      error(s.flow_kind_span, fmt::format("unknown flow kind '{}'{} (kinds are activations and logits)", s.flow_kind,
                                          did_you_mean(s.flow_kind, {"activations", "logits"})));
      flows_ok_ = false;
      return;
    }
  }
  bool ok = true;
  for (size_t i = 0; i < s.chain.size(); ++i) {
    if (std::find(section_names_.begin(), section_names_.end(), s.chain[i]) == section_names_.end()) {
      error(s.chain_spans[i], fmt::format("flow names an unknown section '{}'{}", s.chain[i],
                                          did_you_mean(s.chain[i], section_names_)));
      ok = false;
    }
  }
  if (!ok) {
    flows_ok_ = false;
    return;
  }
  for (size_t i = 0; i + 1 < s.chain.size(); ++i) {
    Span from = s.chain_spans[i], to = s.chain_spans[i + 1];
    Span edge = from;
    if (to.line == from.line) edge.length = to.col + to.length - from.col;
    const std::string& a = s.chain[i];
    const std::string& b = s.chain[i + 1];
    bool duplicate = false;
    for (size_t f = 0; f < program_.flows.size(); ++f)
      if (program_.flows[f].from == a && program_.flows[f].to == b) {
        error(edge, fmt::format("flow {} -> {} is declared twice (first at {})", a, b, where(flow_spans_[f], edge)));
        duplicate = true;
      }
    if (duplicate) continue;
    check_edge(a, b, kind, edge);
    program_.flows.push_back(Flow{a, b, kind, SourceLoc{files_[edge.file].display, edge.line, edge.col}});
    flow_spans_.push_back(edge);
  }
}

void Checker::check_edge(const std::string& a, const std::string& b, FlowKind kind, Span edge) {
  const Section* from = program_.find_section(a);
  const Section* to = program_.find_section(b);
  if (!from || !to || !info(a).model_ok || !info(b).model_ok) return;
  if (kind == FlowKind::Activations) {
    if (from->model.output_width() != to->model.input_width()) {
      const auto* v = std::get_if<VitSpec>(&from->model.spec);
      const std::string why = v && v->merge > 1 ? fmt::format(" ({} × {}×{} pixel-shuffled patches)", v->hidden,
                                                              v->merge, v->merge)
                                                : "";
      error(edge, fmt::format("flow {} -> {}: '{}' emits width {}{} but '{}' takes width {}", a, b, a,
                              from->model.output_width(), why, b, to->model.input_width()));
    }
    return;
  }
  for (const Section* end : {from, to})
    if (!std::holds_alternative<TransformerSpec>(end->model.spec)) {
      error(edge, fmt::format("flow {} -> {}: a logits flow links two transformers, but '{}' is {} {}", a, b,
                              end->name, std::string(end->model.builtin()) == "audio_encoder" ? "an" : "a",
                              end->model.builtin()));
      return;
    }
  int64_t va = std::get<TransformerSpec>(from->model.spec).vocab;
  int64_t vb = std::get<TransformerSpec>(to->model.spec).vocab;
  if (va != vb)
    error(edge, fmt::format("flow {} -> {}: '{}' has vocabulary {} but '{}' has vocabulary {}", a, b, a, va, b, vb));
}

std::optional<Distribution> Checker::distribution(const Expr& e, const std::string& what, int64_t max) {
  static const std::vector<std::string> kinds = {"uniform", "lognormal", "choice"};
  Distribution d;
  if (e.kind != Expr::Kind::Call) {
    if (e.kind == Expr::Kind::Name && !lets_.count(e.text)) {
      error(e.span, fmt::format("{} takes a number or a distribution (uniform, lognormal, choice), not {}", what,
                                kind_of(e)));
      return std::nullopt;
    }
    auto v = integer(e, what, 1, max);
    if (!v) return std::nullopt;
    d.kind = Distribution::Kind::Constant;
    d.value = static_cast<double>(*v);
    return d;
  }
  if (e.text == "uniform") {
    auto a = args(e, {"min", "max"}, {"min", "max"});
    if (!a) return std::nullopt;
    auto lo = integer(*a->get("min"), "'min'", 1, max);
    auto hi = integer(*a->get("max"), "'max'", 1, max);
    if (!lo || !hi) return std::nullopt;
    if (*lo > *hi) {
      error(a->get("min")->span, fmt::format("uniform: 'min' ({}) is larger than 'max' ({})", *lo, *hi));
      return std::nullopt;
    }
    d.kind = Distribution::Kind::Uniform;
    d.min = static_cast<double>(*lo), d.max = static_cast<double>(*hi);
    return d;
  }
  if (e.text == "lognormal") {
    auto a = args(e, {"median", "sigma", "max"}, {"median", "sigma", "max"});
    if (!a) return std::nullopt;
    auto median = positive_real(*a->get("median"), "'median'");
    auto sigma = positive_real(*a->get("sigma"), "'sigma'");
    auto cap = integer(*a->get("max"), "'max'", 1, max);
    if (!median || !sigma || !cap) return std::nullopt;
    d.kind = Distribution::Kind::LogNormal;
    d.median = *median, d.sigma = *sigma, d.max = static_cast<double>(*cap);
    return d;
  }
  if (e.text == "choice") {
    auto a = args(e, {"values", "weights"}, {"values"}, "values");
    if (!a) return std::nullopt;
    const Expr& values = *a->get("values");
    auto vs = number_list(values, "'values'");
    if (!vs) return std::nullopt;
    if (vs->empty()) {
      error(values.span, "choice needs at least one value");
      return std::nullopt;
    }
    for (size_t i = 0; i < vs->size(); ++i)
      if ((*vs)[i] < 1 || (*vs)[i] > double(max) || (*vs)[i] != std::floor((*vs)[i])) {
        error(values.items[i]->span,
              fmt::format("choice values are whole numbers from 1 to {}, not {}", max, show((*vs)[i])));
        return std::nullopt;
      }
    std::vector<double> ws(vs->size(), 1.0);
    if (const Expr* w = a->get("weights")) {
      auto given = number_list(*w, "'weights'");
      if (!given) return std::nullopt;
      if (given->size() != vs->size()) {
        error(w->span, fmt::format("choice has {} values but {} weights", vs->size(), given->size()));
        return std::nullopt;
      }
      double sum = 0;
      for (size_t i = 0; i < given->size(); ++i) {
        if ((*given)[i] < 0) {
          error(w->items[i]->span, fmt::format("choice weights must not be negative, not {}", show((*given)[i])));
          return std::nullopt;
        }
        sum += (*given)[i];
      }
      if (sum <= 0) {
        error(w->span, "choice weights must have a positive sum");
        return std::nullopt;
      }
      ws = *given;
    }
    d.kind = Distribution::Kind::Choice;
    d.values = *vs, d.weights = ws;
    return d;
  }
  error(e.span, fmt::format("unknown distribution '{}'{} (distributions are a number, uniform, lognormal and choice)",
                            e.text, did_you_mean(e.text, kinds)));
  return std::nullopt;
}

void Checker::read_mix(const Block& b, Span key_span) {
  std::vector<std::pair<ModalitySet, Span>> seen;
  double sum = 0;
  bool ok = true;
  for (const Entry& e : b.entries) {
    if (e.block) {
      error(e.key_span, fmt::format("a mix entry takes a weight: write '{} = 0.5;'", e.key));
      ok = false;
      continue;
    }
    MixEntry m;
    m.name = e.key;
    bool entry_ok = true;
    size_t start = 0;
    while (entry_ok) {
      size_t end = e.key.find('_', start);
      std::string part = e.key.substr(start, end == std::string::npos ? std::string::npos : end - start);
      auto mod = modality_of(part);
      if (!mod) {
        error(e.key_span, fmt::format("unknown modality '{}' in mix entry '{}'{} (an entry joins text, image, audio, "
                                      "video with '_')", part, e.key, did_you_mean(part, kModalities)));
        entry_ok = false;
      } else if (m.modalities.has(*mod)) {
        error(e.key_span, fmt::format("mix entry '{}' names '{}' twice", e.key, part));
        entry_ok = false;
      } else {
        m.modalities.add(*mod);
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
    auto w = positive_real(*e.value, fmt::format("the weight of '{}'", e.key), true);
    if (!entry_ok || !w) {
      ok = false;
      continue;
    }
    for (const auto& [set, span] : seen)
      if (set == m.modalities) {
        error(e.key_span, fmt::format("mix entry '{}' repeats the modalities of the entry at {}", e.key,
                                      where(span, e.key_span)));
        entry_ok = false;
      }
    if (!entry_ok) {
      ok = false;
      continue;
    }
    seen.push_back({m.modalities, e.key_span});
    m.weight = *w;
    sum += *w;
    program_.data.mix.push_back(m);
  }
  mix_ok_ = ok;
  if (ok && program_.data.mix.empty()) error(key_span, "the mix has no entry");
  else if (ok && std::fabs(sum - 1.0) > 1e-6)
    error(key_span, fmt::format("the mix weights sum to {}, not 1", show(sum)));
}

void Checker::read_data(const Stmt& s) {
  auto keys = entries(*s.block, {"source", "text_tokens", "images", "audio_frames", "video_frames", "on_bad_sample"}, {"mix"},
                      "in the data block");
  DataSpec& d = program_.data;
  d.loc = SourceLoc{files_[s.span.file].display, s.span.line, s.span.col};
  if (auto it = keys.find("source"); it != keys.end()) {
    const Expr& e = *it->second->value;
    if (e.kind == Expr::Kind::Call && e.text == "synthetic") {
      if (auto a = args(e, {"seed"}, {}))
        if (const Expr* seed = a->get("seed"))
          if (auto v = integer(*seed, "'seed'", 0)) d.seed = static_cast<uint64_t>(*v);
    } else if (e.kind == Expr::Kind::Call && e.text == "files") {
      d.source = DataSpec::Source::Files;
      if (auto a = args(e, {"manifest"}, {"manifest"}))
        if (auto p = path(*a->get("manifest"), "'manifest'")) d.manifest = *p;
    } else {
      std::string name = e.kind == Expr::Kind::Call || e.kind == Expr::Kind::Name ? e.text : "";
      error(e.span, fmt::format("'source' takes synthetic(seed: N) or files(manifest: \"path\"), not {}{}",
                                kind_of(e), did_you_mean(name, {"synthetic", "files"})));
    }
  } else if (keys.missing("source")) {
    error(s.span, "the data block has no 'source'");
  }
  bool synthetic = d.source == DataSpec::Source::Synthetic;
  if (auto it = keys.find("mix"); it != keys.end()) read_mix(*it->second->block, it->second->key_span);
  else if (synthetic && keys.missing("mix")) error(s.span, "the data block has no 'mix' (a synthetic source draws samples from it)");
  if (auto it = keys.find("text_tokens"); it != keys.end()) {
    d.text_tokens = distribution(*it->second->value, "'text_tokens'", limits::kSampleTokens);
    text_tokens_span_ = it->second->value->span;
  }
  else if (synthetic && keys.missing("text_tokens"))
    error(s.span, "the data block has no 'text_tokens' (a synthetic source draws lengths from it)");
  if (auto it = keys.find("images"); it != keys.end()) d.images = distribution(*it->second->value, "'images'", limits::kSampleImages);
  if (auto it = keys.find("audio_frames"); it != keys.end()) {
    d.audio_frames = distribution(*it->second->value, "'audio_frames'", limits::kSampleTokens);
    audio_frames_span_ = it->second->value->span;
  }
  if (auto it = keys.find("video_frames"); it != keys.end())
    d.video_frames = distribution(*it->second->value, "'video_frames'", limits::kSampleImages);
  else if (synthetic && mix_ok_)
    for (const MixEntry& m : d.mix)
      if (m.modalities.has(Modality::Video) && keys.missing("video_frames")) {
        error(s.span, fmt::format("mix entry '{}' has video, but the data block has no 'video_frames' (frames per "
                                  "sample, e.g. uniform(min: 8, max: 64))", m.name));
        break;
      }
  if (auto it = keys.find("on_bad_sample"); it != keys.end())
    if (auto v = string(*it->second->value, "'on_bad_sample'")) {
      if (*v != "error" && *v != "skip")
        error(it->second->value->span, fmt::format("'on_bad_sample' is \"error\" or \"skip\", not \"{}\"", *v));
      else if (synthetic)
        error(it->second->value->span, "'on_bad_sample' applies to files(manifest: ...) only");
      d.skip_bad_samples = *v == "skip";
    }
  data_read_ = true;
}

void Checker::read_train(const Stmt& s) {
  auto keys = entries(*s.block, {"global_batch", "steps", "seed", "optimizer", "schedule", "grad_clip", "precision"},
                      {"checkpoint"}, "in the train block");
  TrainSpec& t = program_.train;
  t.loc = SourceLoc{files_[s.span.file].display, s.span.line, s.span.col};
  auto value = [&](const char* key) -> const Expr* {
    auto it = keys.find(key);
    return it == keys.end() ? nullptr : it->second->value.get();
  };
  for (const char* key : {"global_batch", "steps"}) {
    if (!value(key)) {
      if (keys.missing(key)) error(s.span, fmt::format("the train block has no '{}'", key));
      continue;
    }
    const bool steps = std::string(key) == "steps";
    if (auto v = integer(*value(key), fmt::format("'{}'", key), 1, steps ? limits::kSteps : limits::kGlobalBatch))
      (steps ? t.steps : t.global_batch) = *v;
  }
  if (const Expr* e = value("seed"))
    if (auto v = integer(*e, "'seed'", 0)) t.seed = static_cast<uint64_t>(*v);
  if (const Expr* e = value("optimizer")) {
    if (e->kind == Expr::Kind::Name && e->text == "adamw") {
    } else if (e->kind == Expr::Kind::Call && e->text == "adamw") {
      if (auto a = args(*e, {"lr", "betas", "eps", "weight_decay", "shard"}, {})) {
        if (const Expr* sh = a->get("shard"))
          if (auto b = boolean(*sh, "'shard'")) t.optimizer.shard = *b;
        if (const Expr* lr = a->get("lr"))
          if (auto v = positive_real(*lr, "'lr'")) t.optimizer.lr = *v;
        if (const Expr* eps = a->get("eps"))
          if (auto v = positive_real(*eps, "'eps'")) t.optimizer.eps = *v;
        if (const Expr* wd = a->get("weight_decay"))
          if (auto v = positive_real(*wd, "'weight_decay'", true)) t.optimizer.weight_decay = *v;
        if (const Expr* betas = a->get("betas")) {
          auto bs = number_list(*betas, "'betas'");
          if (bs && bs->size() != 2)
            error(betas->span, fmt::format("'betas' takes two numbers [b1, b2], but {} {} given", bs->size(),
                                           bs->size() == 1 ? "is" : "are"));
          else if (bs) {
            for (size_t i = 0; i < 2; ++i)
              if ((*bs)[i] < 0 || (*bs)[i] >= 1)
                error(betas->items[i]->span, fmt::format("each of 'betas' must be in [0, 1), not {}", show((*bs)[i])));
            t.optimizer.beta1 = (*bs)[0], t.optimizer.beta2 = (*bs)[1];
          }
        }
      }
    } else {
      std::string name = e->kind == Expr::Kind::Call || e->kind == Expr::Kind::Name ? e->text : "";
      error(e->span, fmt::format("'optimizer' takes adamw(lr: ..., betas: [..], eps: ..., weight_decay: ..., shard: true|false), not {}{}",
                                 kind_of(*e), did_you_mean(name, {"adamw"})));
    }
  }
  if (const Expr* e = value("schedule")) {
    if (e->kind == Expr::Kind::Name && (e->text == "constant" || e->text == "cosine")) {
      t.schedule.kind = e->text == "cosine" ? LrSchedule::Kind::Cosine : LrSchedule::Kind::Constant;
    } else if (e->kind == Expr::Kind::Call && e->text == "cosine") {
      t.schedule.kind = LrSchedule::Kind::Cosine;
      if (auto a = args(*e, {"warmup"}, {}))
        if (const Expr* w = a->get("warmup"))
          if (auto v = integer(*w, "'warmup'", 0)) t.schedule.warmup = *v;
    } else {
      std::string name = e->kind == Expr::Kind::Call || e->kind == Expr::Kind::Name ? e->text : "";
      error(e->span, fmt::format("'schedule' takes cosine(warmup: N) or constant, not {}{}", kind_of(*e),
                                 did_you_mean(name, {"cosine", "constant"})));
    }
  }
  if (const Expr* e = value("grad_clip"))
    if (auto v = positive_real(*e, "'grad_clip'", true)) t.grad_clip = *v;
  if (const Expr* e = value("precision"))
    if (auto w = word(*e, "'precision'", {"bf16", "fp32"})) t.precision = *w == "bf16" ? Precision::BF16 : Precision::FP32;
  if (auto it = keys.find("checkpoint"); it != keys.end()) {
    auto ck = entries(*it->second->block, {"every", "dir"}, {}, "in 'checkpoint' of the train block");
    for (const char* key : {"every", "dir"})
      if (ck.missing(key)) error(it->second->key_span, fmt::format("'checkpoint' has no '{}'", key));
    if (ck.count("every"))
      if (auto v = integer(*ck.set["every"]->value, "'every'", 1)) t.checkpoint_every = *v;
    if (ck.count("dir"))
      if (auto p = path(*ck.set["dir"]->value, "'dir'")) t.checkpoint_dir = *p;
  }
}

}  // namespace maestro::sect
