// The checker: evaluates lets, resolves model names to built-in specs, reads
// each section, flow, data and train block into the Program, applies the
// defaults of the language, and checks every rule of meaning. It keeps going
// after an error so that one run reports all of them.
#include "dsl/check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

namespace maestro::sect {
namespace {

namespace fs = std::filesystem;

// Lets (and model aliases) naming later ones nest at most this deep.
constexpr int kMaxLetDepth = 200;

// A number as arithmetic sees it: an integer while every step stays one.
struct Num {
  bool is_int = true;
  int64_t i = 0;
  double d = 0;
  bool is_size = false;  // carries a unit somewhere (8MiB, 2 * 1GiB)
  double value() const { return is_int ? static_cast<double>(i) : d; }
};

std::string show(double v) { return fmt::format("{}", v); }

// A let's value: a number, a string or true/false.
struct LetValue {
  enum class Kind { Number, String, Bool } kind = Kind::Number;
  Num num;
  std::string str;
  bool flag = false;
};

const std::vector<std::string> kModalities = {"text", "image", "audio", "video"};

std::optional<Modality> modality_of(const std::string& w) {
  for (int m = 0; m < kNumModalities; ++m)
    if (w == kModalities[m]) return static_cast<Modality>(m);
  return std::nullopt;
}

std::string join_words(const std::vector<std::string>& words, const char* last = "or") {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? fmt::format(" {} ", last) : ", ") + words[i];
  return out;
}

std::string quoted(const std::vector<std::string>& words, const char* last = "or") {
  std::vector<std::string> q;
  for (const auto& w : words) q.push_back("'" + w + "'");
  return join_words(q, last);
}

std::string kind_of(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Number: return "a number";
    case Expr::Kind::String: return "a string";
    case Expr::Kind::Bool: return "true/false";
    case Expr::Kind::Auto: return "'auto'";
    case Expr::Kind::Name: return fmt::format("the name '{}'", e.text);
    case Expr::Kind::Call: return fmt::format("a call to '{}'", e.text);
    case Expr::Kind::List: return "a list";
    case Expr::Kind::Neg:
    case Expr::Kind::Arith: return "arithmetic";
    case Expr::Kind::Not:
    case Expr::Kind::And:
    case Expr::Kind::Or: return "a condition";
  }
  return "something else";
}

// The parameters of one built-in model, in the order of the spec.
struct Param {
  const char* name;
  enum class Type { Int, Real, Bool, Act } type;
  bool required;
};

const std::map<std::string, std::vector<Param>>& builtin_params() {
  using T = Param::Type;
  static const std::map<std::string, std::vector<Param>> table = {
      {"transformer",
       {{"layers", T::Int, true}, {"hidden", T::Int, true}, {"heads", T::Int, true}, {"kv_heads", T::Int, false},
        {"ffn", T::Int, true}, {"vocab", T::Int, true}, {"max_seq", T::Int, false}, {"causal", T::Bool, false},
        {"rope_theta", T::Real, false}, {"norm_eps", T::Real, false}}},
      {"vit",
       {{"layers", T::Int, true}, {"hidden", T::Int, true}, {"heads", T::Int, true}, {"ffn", T::Int, true},
        {"patch", T::Int, true}, {"image", T::Int, true}, {"channels", T::Int, false}, {"norm_eps", T::Real, false}}},
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

// Named arguments of a call, checked against the names it accepts.
struct Args {
  std::map<std::string, const Expr*> values;
  std::map<std::string, Span> name_spans;
  const Expr* get(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second;
  }
};

class Checker {
 public:
  Checker(const std::vector<SourceFile>& files, const std::vector<Decl>& decls, Reporter& rep)
      : files_(files), decls_(decls), rep_(rep) {}

  std::optional<Program> run() {
    collect_names();
    for (auto& [name, let] : lets_) let_value(name, let.stmt->name_span, 0);
    for (const Stmt* s : model_order_) model_named(s->name, s->name_span);
    const Stmt* data = nullptr;
    const Stmt* train = nullptr;
    for (const Decl& d : decls_) {
      const Stmt& s = stmt(d);
      if (s.kind == Stmt::Kind::Section) read_section(s);
      if (s.kind == Stmt::Kind::Data) one_block(s, data, "data");
      if (s.kind == Stmt::Kind::Train) one_block(s, train, "train");
    }
    Span top{0, 1, 1, 1};
    if (data == nullptr) rep_.error(top, "the program has no 'data' block");
    else read_data(*data);
    if (train == nullptr) rep_.error(top, "the program has no 'train' block");
    else read_train(*train);
    if (program_.sections.empty()) rep_.error(top, "the program has no section");
    for (const Decl& d : decls_)
      if (stmt(d).kind == Stmt::Kind::Flow) read_flow(stmt(d));
    check_flow_cycles();
    check_sections_against_program();
    check_frozen_sections();
    if (rep_.count() > 0) return std::nullopt;
    return std::move(program_);
  }

 private:
  // ------------------------------------------------------------- utilities
  const Stmt& stmt(const Decl& d) const { return files_[d.file].ast.stmts[d.stmt]; }
  void error(Span s, std::string msg) { rep_.error(s, std::move(msg)); }
  std::string where(Span place, Span from) const { return rep_.where(place, from); }

  std::string source_text(Span s) const {
    std::string line = files_[s.file].line(s.line);
    if (static_cast<size_t>(s.col - 1) >= line.size()) return "";
    return line.substr(s.col - 1, s.length);
  }

  // Path `p` relative to the folder of the file that holds `at`, made absolute.
  std::string absolute_path(const std::string& p, Span at) const {
    fs::path path(p);
    if (path.is_absolute()) return path.lexically_normal().string();
    return (files_[at.file].absolute.parent_path() / path).lexically_normal().string();
  }

  // --------------------------------------------------------------- names
  void collect_names() {
    std::map<std::string, Span> sections;
    for (const Decl& d : decls_) {
      const Stmt& s = stmt(d);
      if (s.kind == Stmt::Kind::Let || s.kind == Stmt::Kind::Model) {
        auto it = defined_.find(s.name);
        if (it != defined_.end()) {
          error(s.name_span, fmt::format("'{}' is already defined at {}", s.name, where(it->second, s.name_span)));
          continue;
        }
        defined_[s.name] = s.name_span;
        if (s.kind == Stmt::Kind::Let) lets_[s.name].stmt = &s;
        else {
          models_[s.name].stmt = &s;
          model_order_.push_back(&s);
        }
      } else if (s.kind == Stmt::Kind::Section) {
        auto it = sections.find(s.name);
        if (it != sections.end()) {
          error(s.name_span,
                fmt::format("section '{}' is already defined at {}", s.name, where(it->second, s.name_span)));
          continue;
        }
        sections[s.name] = s.name_span;
        section_names_.push_back(s.name);
      }
    }
  }

  std::vector<std::string> let_names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : lets_) out.push_back(k);
    return out;
  }

  // Evaluates let `name` once (lets may be used before their definition);
  // reports a cycle at the let that closes it.
  const LetValue* let_value(const std::string& name, Span use, int depth) {
    LetEntry& let = lets_.at(name);
    if (let.state == LetEntry::State::Done) return let.value ? &*let.value : nullptr;
    if (let.state == LetEntry::State::Busy) {
      error(use, fmt::format("let '{}' depends on itself", name));
      return nullptr;
    }
    if (depth > kMaxLetDepth) {
      error(use, fmt::format("lets refer to each other more than {} levels deep", kMaxLetDepth));
      return nullptr;
    }
    let.state = LetEntry::State::Busy;
    const int outer_depth = let_depth_;
    let_depth_ = depth;
    const Expr& e = *let.stmt->value;
    std::optional<LetValue> v;
    if (e.kind == Expr::Kind::String) {
      v = LetValue{LetValue::Kind::String, {}, e.text, false};
    } else if (e.kind == Expr::Kind::Bool) {
      v = LetValue{LetValue::Kind::Bool, {}, "", e.flag};
    } else if (e.kind == Expr::Kind::Name && lets_.count(e.text) == 0 && models_.count(e.text) == 0) {
      error(e.span, fmt::format("unknown name '{}'{}", e.text, did_you_mean(e.text, let_names())));
    } else if (e.kind == Expr::Kind::Name && lets_.count(e.text)) {
      if (const LetValue* other = let_value(e.text, e.span, depth + 1)) v = *other;
    } else if (e.kind == Expr::Kind::Number || e.kind == Expr::Kind::Neg || e.kind == Expr::Kind::Arith ||
               e.kind == Expr::Kind::Name) {
      if (auto n = number(e, fmt::format("let '{}'", name))) v = LetValue{LetValue::Kind::Number, *n, "", false};
    } else {
      error(e.span, fmt::format("let '{}' must hold a number, a string or true/false, not {}", name, kind_of(e)));
    }
    let.state = LetEntry::State::Done;
    let.value = v;
    let_depth_ = outer_depth;
    return let.value ? &*let.value : nullptr;
  }

  // ------------------------------------------------------------- numbers
  std::optional<Num> literal(const Expr& e) {
    const std::string& t = e.text;
    size_t last_digit = t.find_last_of("0123456789");
    std::string unit = t.substr(last_digit + 1);
    std::string digits;
    for (size_t i = 0; i <= last_digit; ++i)
      if (t[i] != '_') digits += t[i];
    Num n;
    if (digits.find_first_of(".eE") != std::string::npos) {
      n.is_int = false;
      n.d = std::strtod(digits.c_str(), nullptr);
      if (!std::isfinite(n.d)) {
        error(e.span, fmt::format("number too large: {}", t));
        return std::nullopt;
      }
    } else {
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n.i);
      if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        error(e.span, fmt::format("number too large: {} (the largest is 9223372036854775807)", t));
        return std::nullopt;
      }
    }
    if (unit.empty()) return n;
    static const std::map<std::string, int64_t> units = {
        {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}, {"TiB", int64_t{1} << 40},
        {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"TB", 1000000000000}};
    auto it = units.find(unit);
    if (it == units.end()) {
      std::vector<std::string> names;
      for (const auto& [k, v] : units) names.push_back(k);
      error(e.span, fmt::format("unknown unit '{}' in '{}'{} (sizes take KiB, MiB, GiB, TiB, KB, MB, GB or TB)", unit, t,
                                did_you_mean(unit, names)));
      return std::nullopt;
    }
    n.is_size = true;
    Num scale{true, it->second, 0, true};
    auto bytes = arith(n, '*', scale, e.span);
    // A size is a count of bytes: 1.5GiB is the integer 1610612736.
    if (bytes && !bytes->is_int && bytes->d == std::floor(bytes->d) && std::fabs(bytes->d) < 9.2e18)
      *bytes = Num{true, static_cast<int64_t>(bytes->d), 0, true};
    return bytes;
  }

  std::optional<Num> arith(Num a, char op, Num b, Span at) {
    Num r;
    r.is_size = a.is_size || b.is_size;
    if (a.is_int && b.is_int) {
      bool overflow = false;
      switch (op) {
        case '+': overflow = __builtin_add_overflow(a.i, b.i, &r.i); break;
        case '-': overflow = __builtin_sub_overflow(a.i, b.i, &r.i); break;
        case '*': overflow = __builtin_mul_overflow(a.i, b.i, &r.i); break;
        case '/':
          if (b.i == 0) {
            error(at, "division by zero");
            return std::nullopt;
          }
          if (b.i == -1 && a.i == std::numeric_limits<int64_t>::min()) overflow = true;
          else if (a.i % b.i == 0) r.i = a.i / b.i;
          else {
            r.is_int = false;
            r.d = static_cast<double>(a.i) / static_cast<double>(b.i);
          }
          break;
      }
      if (overflow) {
        error(at, "arithmetic overflows: the result is larger than 9223372036854775807");
        return std::nullopt;
      }
      return r;
    }
    double x = a.value(), y = b.value();
    r.is_int = false;
    switch (op) {
      case '+': r.d = x + y; break;
      case '-': r.d = x - y; break;
      case '*': r.d = x * y; break;
      case '/':
        if (y == 0) {
          error(at, "division by zero");
          return std::nullopt;
        }
        r.d = x / y;
        break;
    }
    if (!std::isfinite(r.d)) {
      error(at, "arithmetic overflows: the result is too large");
      return std::nullopt;
    }
    return r;
  }

  // A number-valued expression; `what` names its place ("'ffn'", "let 'x'").
  std::optional<Num> number(const Expr& e, const std::string& what) {
    switch (e.kind) {
      case Expr::Kind::Number: return literal(e);
      case Expr::Kind::Name: {
        if (lets_.count(e.text)) {
          const LetValue* v = let_value(e.text, e.span, let_depth_ + 1);
          if (v == nullptr) return std::nullopt;
          if (v->kind == LetValue::Kind::Number) return v->num;
          error(e.span, fmt::format("{} takes a number, but let '{}' is {}", what, e.text,
                                    v->kind == LetValue::Kind::String ? "a string" : "true/false"));
          return std::nullopt;
        }
        if (models_.count(e.text)) {
          error(e.span, fmt::format("{} takes a number, but '{}' is a model", what, e.text));
          return std::nullopt;
        }
        error(e.span, fmt::format("unknown name '{}'{}", e.text, did_you_mean(e.text, let_names())));
        return std::nullopt;
      }
      case Expr::Kind::Neg: {
        auto v = number(*e.items[0], what);
        if (!v) return std::nullopt;
        return arith(Num{true, 0, 0, false}, '-', *v, e.span);
      }
      case Expr::Kind::Arith: {
        auto acc = number(*e.items[0], what);
        for (size_t i = 1; i < e.items.size(); ++i) {
          auto rhs = number(*e.items[i], what);
          if (!acc || !rhs) return std::nullopt;
          acc = arith(*acc, e.ops[i - 1], *rhs, e.span);
        }
        return acc;
      }
      default:
        error(e.span, fmt::format("{} takes a number, not {}", what, kind_of(e)));
        return std::nullopt;
    }
  }

  // A unit where a plain number belongs; names the bytes unless it is one literal.
  void not_a_size(const Expr& e, const Num& n, const std::string& what) {
    std::string text = source_text(e.span);
    if (e.kind != Expr::Kind::Number)
      text += n.is_int ? fmt::format(", which is {} bytes", n.i) : fmt::format(", which is {:.6g} bytes", n.d);
    error(e.span, fmt::format("{} takes a plain number, not a size ({})", what, text));
  }

  // A plain (unit-less) number.
  std::optional<double> real(const Expr& e, const std::string& what) {
    auto n = number(e, what);
    if (!n) return std::nullopt;
    if (n->is_size) {
      not_a_size(e, *n, what);
      return std::nullopt;
    }
    return n->value();
  }

  // A plain real number with `value > 0` (or `>= 0` when zero is allowed).
  std::optional<double> positive_real(const Expr& e, const std::string& what, bool zero_ok = false) {
    auto v = real(e, what);
    if (!v) return std::nullopt;
    if (*v < 0 || (*v == 0 && !zero_ok)) {
      error(e.span, fmt::format("{} must be {}, not {}", what, zero_ok ? "zero or more" : "positive", show(*v)));
      return std::nullopt;
    }
    return v;
  }

  // A plain whole number at least `min`.
  std::optional<int64_t> integer(const Expr& e, const std::string& what, int64_t min) {
    auto n = number(e, what);
    if (!n) return std::nullopt;
    if (n->is_size) {
      not_a_size(e, *n, what);
      return std::nullopt;
    }
    int64_t v = n->i;
    if (!n->is_int) {
      if (n->d != std::floor(n->d) || std::fabs(n->d) >= 9.2e18) {
        std::string text = source_text(e.span);
        std::string value = fmt::format("{:.6g}", n->d);
        error(e.span, text == value ? fmt::format("{} must be a whole number, not {}", what, value)
                                    : fmt::format("{} must be a whole number, but {} is {}", what, text, value));
        return std::nullopt;
      }
      v = static_cast<int64_t>(n->d);
    }
    if (v < min) {
      error(e.span, fmt::format("{} must be at least {}, not {}", what, min, v));
      return std::nullopt;
    }
    return v;
  }

  // `auto` (nullopt inside) or a whole number >= 1.
  std::optional<std::optional<int64_t>> count_or_auto(const Expr& e, const std::string& what) {
    if (e.kind == Expr::Kind::Auto) return std::optional<int64_t>{};
    if (e.kind == Expr::Kind::String || e.kind == Expr::Kind::Bool || e.kind == Expr::Kind::List ||
        e.kind == Expr::Kind::Call) {
      error(e.span, fmt::format("{} takes a whole number or auto, not {}", what, kind_of(e)));
      return std::nullopt;
    }
    auto v = integer(e, what, 1);
    if (!v) return std::nullopt;
    return std::optional<int64_t>{*v};
  }

  std::optional<bool> boolean(const Expr& e, const std::string& what) {
    if (e.kind == Expr::Kind::Bool) return e.flag;
    if (e.kind == Expr::Kind::Name && lets_.count(e.text)) {
      const LetValue* v = let_value(e.text, e.span, 0);
      if (v == nullptr) return std::nullopt;
      if (v->kind == LetValue::Kind::Bool) return v->flag;
    }
    error(e.span, fmt::format("{} takes true or false, not {}", what, kind_of(e)));
    return std::nullopt;
  }

  std::optional<std::string> string(const Expr& e, const std::string& what) {
    if (e.kind == Expr::Kind::String) return e.text;
    if (e.kind == Expr::Kind::Name && lets_.count(e.text)) {
      const LetValue* v = let_value(e.text, e.span, 0);
      if (v == nullptr) return std::nullopt;
      if (v->kind == LetValue::Kind::String) return v->str;
    }
    error(e.span, fmt::format("{} takes a string in double quotes, not {}", what, kind_of(e)));
    return std::nullopt;
  }

  // A non-empty path string, made absolute relative to its file.
  std::optional<std::string> path(const Expr& e, const std::string& what) {
    auto s = string(e, what);
    if (!s) return std::nullopt;
    if (s->empty()) {
      error(e.span, fmt::format("{} must not be an empty path", what));
      return std::nullopt;
    }
    return absolute_path(*s, e.span);
  }

  // One of a fixed set of bare words (`mode = frozen`).
  std::optional<std::string> word(const Expr& e, const std::string& what, const std::vector<std::string>& allowed) {
    if (e.kind == Expr::Kind::Name) {
      for (const auto& w : allowed)
        if (w == e.text) return w;
      error(e.span, fmt::format("{} must be {}, not '{}'{}", what, quoted(allowed), e.text,
                                did_you_mean(e.text, allowed)));
      return std::nullopt;
    }
    error(e.span, fmt::format("{} must be {}, not {}", what, quoted(allowed), kind_of(e)));
    return std::nullopt;
  }

  std::optional<std::vector<double>> number_list(const Expr& e, const std::string& what) {
    if (e.kind != Expr::Kind::List) {
      error(e.span, fmt::format("{} takes a list such as [1, 2], not {}", what, kind_of(e)));
      return std::nullopt;
    }
    std::vector<double> out;
    bool ok = true;
    for (const auto& item : e.items) {
      auto v = real(*item, what);
      if (v) out.push_back(*v);
      ok &= v.has_value();
    }
    if (!ok) return std::nullopt;
    return out;
  }

  // Named arguments of call `e` to `callee`; `positional` may name the one
  // argument that may be given without its name (first position only).
  std::optional<Args> args(const Expr& e, const std::vector<std::string>& accepted,
                           const std::vector<std::string>& required, const std::string& positional = "") {
    Args out;
    bool ok = true;
    for (size_t i = 0; i < e.items.size(); ++i) {
      std::string name = e.arg_names[i];
      Span at = e.arg_name_spans[i];
      if (name.empty()) {
        if (i == 0 && !positional.empty()) {
          name = positional;
        } else {
          error(e.items[i]->span, fmt::format("the arguments of '{}' are named: write '{}: ...'", e.text,
                                              accepted.empty() ? "name" : accepted[std::min(i, accepted.size() - 1)]));
          ok = false;
          continue;
        }
      }
      if (std::find(accepted.begin(), accepted.end(), name) == accepted.end()) {
        error(at, accepted.empty() ? fmt::format("'{}' takes no arguments", e.text)
                                   : fmt::format("unknown parameter '{}' of '{}'{} (it takes {})", name, e.text,
                                                 did_you_mean(name, accepted), quoted(accepted, "and")));
        ok = false;
        continue;
      }
      if (out.values.count(name)) {
        error(at, fmt::format("parameter '{}' of '{}' is given twice", name, e.text));
        ok = false;
        continue;
      }
      out.values[name] = e.items[i].get();
      out.name_spans[name] = at;
    }
    std::vector<std::string> missing;
    for (const auto& r : required)
      if (!out.values.count(r)) missing.push_back(r);
    if (!missing.empty() && ok) {
      error(e.span, fmt::format("'{}' needs {}", e.text, quoted(missing, "and")));
      ok = false;
    }
    if (!ok) return std::nullopt;
    return out;
  }

  // --------------------------------------------------------------- models
  std::optional<ModelSpec> model_named(const std::string& name, Span use) {
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

  std::optional<ModelSpec> model_expr(const Expr& e) {
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
        auto n = integer(*v, fmt::format("'{}'", name), 1);
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

  // --------------------------------------------------------------- blocks
  // Reads the entries of a block, reporting unknown, misplaced and repeated
  // keys. `blocks` are the keys that take `{ ... }`; the rest take `= value;`.
  struct Keys {
    std::map<std::string, const Entry*> set;  // the well-formed entries
    std::set<std::string> mentioned;          // every known key written, and those a misspelling suggests
    auto find(const std::string& k) const { return set.find(k); }
    auto end() const { return set.end(); }
    size_t count(const std::string& k) const { return set.count(k); }
    // Reports a required key that is absent (and not merely misspelled or misplaced).
    bool missing(const std::string& k) const { return !set.count(k) && !mentioned.count(k); }
  };
  Keys entries(const Block& b, const std::vector<std::string>& values, const std::vector<std::string>& blocks,
               const std::string& in) {
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

  void one_block(const Stmt& s, const Stmt*& first, const char* what) {
    if (first == nullptr) {
      first = &s;
      return;
    }
    error(s.span, fmt::format("a second '{}' block: a program has exactly one, and the first is at {}", what,
                              where(first->span, s.span)));
  }

  // ------------------------------------------------------------- sections
  Condition condition(const Expr& e, bool& ok) {
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

  // One term of a loss: cross_entropy, kl(temperature: T), or `w * term`.
  std::optional<LossTerm> loss_term(const Expr& e) {
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

  std::vector<LossTerm> loss(const Expr& e, bool& ok) {
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

  void read_section(const Stmt& s) {
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
    if (auto it = keys.find("consumes"); it != keys.end()) {
      const Expr& list = *it->second->value;
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
      }
    }
    if (auto it = keys.find("when"); it != keys.end()) {
      bool cond_ok = true;
      Condition c = condition(*it->second->value, cond_ok);
      if (cond_ok) sec.when = std::move(c);
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
    if (auto it = keys.find("recompute"); it != keys.end())
      if (auto b = boolean(*it->second->value, "'recompute'")) sec.recompute = *b;
    info.model_ok = ok;
    program_.sections.push_back(std::move(sec));
    infos_.push_back(info);
  }

  // ---------------------------------------------------------------- flows
  void read_flow(const Stmt& s) {
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

  // Width and vocabulary agreement across one edge (when both models resolved).
  void check_edge(const std::string& a, const std::string& b, FlowKind kind, Span edge) {
    const Section* from = program_.find_section(a);
    const Section* to = program_.find_section(b);
    if (!from || !to || !info(a).model_ok || !info(b).model_ok) return;
    if (kind == FlowKind::Activations) {
      if (from->model.output_width() != to->model.input_width())
        error(edge, fmt::format("flow {} -> {}: '{}' emits width {} but '{}' takes width {}", a, b, a,
                                from->model.output_width(), b, to->model.input_width()));
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

  // Depth-first search over the flow graph; reports one cycle with its path.
  void check_flow_cycles() {
    std::map<std::string, int> color;  // 0 new, 1 on the path, 2 done
    std::vector<std::string> path;
    std::vector<size_t> edge_path;
    bool found = false;
    // Iterative DFS: the graph can be as long as the program.
    for (const std::string& root : section_names_) {
      if (found || color[root] != 0) continue;
      std::vector<std::pair<std::string, size_t>> stack{{root, 0}};
      color[root] = 1;
      path = {root};
      while (!stack.empty() && !found) {
        auto& [node, next] = stack.back();
        size_t f = next;
        while (f < program_.flows.size() && program_.flows[f].from != node) ++f;
        if (f == program_.flows.size()) {
          color[node] = 2;
          stack.pop_back();
          path.pop_back();
          continue;
        }
        next = f + 1;
        const std::string& to = program_.flows[f].to;
        if (color[to] == 1) {
          std::string cycle;
          size_t start = std::find(path.begin(), path.end(), to) - path.begin();
          for (size_t k = start; k < path.size(); ++k) cycle += path[k] + " -> ";
          error(flow_spans_[f], fmt::format("the flows form a cycle: {}{}", cycle, to));
          found = true;
        } else if (color[to] == 0) {
          color[to] = 1;
          path.push_back(to);
          stack.push_back({to, 0});
        }
      }
    }
  }

  // Rules that need the whole program: loss placement, consumes vs mix,
  // micro_batch vs global_batch.
  void check_sections_against_program() {
    for (size_t i = 0; i < program_.sections.size(); ++i) {
      const Section& sec = program_.sections[i];
      const SectionInfo& si = infos_[i];
      bool leaves = false, logits_in = false;
      for (const Flow& f : program_.flows) {
        leaves |= f.from == sec.name;
        logits_in |= f.to == sec.name && f.kind == FlowKind::Logits;
      }
      if (!sec.loss.empty() && si.model_ok && flows_ok_) {
        if (!leaves && !std::holds_alternative<TransformerSpec>(sec.model.spec))
          error(si.loss_span, fmt::format("section '{}' has a 'loss' but it is not a transformer and no flow leaves it",
                                          sec.name));
        for (const LossTerm& t : sec.loss)
          if (t.kind == LossKind::KL && !logits_in)
            error(si.loss_span, fmt::format("section '{}' has a kl loss but no 'logits' flow comes into it", sec.name));
      }
      if (data_read_ && mix_ok_ && !program_.data.mix.empty()) {
        for (size_t k = 0; k < sec.consumes.size(); ++k) {
          bool present = false;
          for (const MixEntry& m : program_.data.mix) present |= m.modalities.has(sec.consumes[k]);
          if (!present)
            error(si.consume_spans[k], fmt::format("section '{}' consumes '{}' but no 'mix' entry of the data has it",
                                                   sec.name, modality_name(sec.consumes[k])));
        }
      }
      if (sec.micro_batch && program_.train.global_batch > 0 && *sec.micro_batch > program_.train.global_batch)
        error(si.micro_batch_span, fmt::format("'micro_batch' ({}) of section '{}' is larger than 'global_batch' ({})",
                                               *sec.micro_batch, sec.name, program_.train.global_batch));
    }
  }

  // A frozen section takes no gradient, so none can flow back through it to a
  // trainable section feeding it activations: reported at that flow.
  void check_frozen_sections() {
    for (size_t f = 0; f < program_.flows.size(); ++f) {
      const Flow& flow = program_.flows[f];
      const Section* from = program_.find_section(flow.from);
      const Section* to = program_.find_section(flow.to);
      if (flow.kind == FlowKind::Activations && from && to && to->mode == Mode::Frozen && from->mode == Mode::Train)
        error(flow_spans_[f], fmt::format("flow {} -> {}: section '{}' is frozen but takes activations from '{}', "
                                          "which trains: gradients cannot pass back through a frozen section "
                                          "(freeze '{}' too, or train '{}')",
                                          flow.from, flow.to, flow.to, flow.from, flow.from, flow.to));
    }
  }

  // ----------------------------------------------------------------- data
  std::optional<Distribution> distribution(const Expr& e, const std::string& what) {
    static const std::vector<std::string> kinds = {"uniform", "lognormal", "choice"};
    Distribution d;
    if (e.kind != Expr::Kind::Call) {
      if (e.kind == Expr::Kind::Name && !lets_.count(e.text)) {
        error(e.span, fmt::format("{} takes a number or a distribution (uniform, lognormal, choice), not {}", what,
                                  kind_of(e)));
        return std::nullopt;
      }
      auto v = integer(e, what, 1);
      if (!v) return std::nullopt;
      d.kind = Distribution::Kind::Constant;
      d.value = static_cast<double>(*v);
      return d;
    }
    if (e.text == "uniform") {
      auto a = args(e, {"min", "max"}, {"min", "max"});
      if (!a) return std::nullopt;
      auto lo = integer(*a->get("min"), "'min'", 1);
      auto hi = integer(*a->get("max"), "'max'", 1);
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
      auto cap = integer(*a->get("max"), "'max'", 1);
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
        if ((*vs)[i] < 1 || (*vs)[i] != std::floor((*vs)[i])) {
          error(values.items[i]->span, fmt::format("choice values are whole numbers of at least 1, not {}", show((*vs)[i])));
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

  void read_mix(const Block& b, Span key_span) {
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

  void read_data(const Stmt& s) {
    auto keys = entries(*s.block, {"source", "text_tokens", "images", "audio_frames"}, {"mix"}, "in the data block");
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
    if (auto it = keys.find("text_tokens"); it != keys.end()) d.text_tokens = distribution(*it->second->value, "'text_tokens'");
    else if (synthetic && keys.missing("text_tokens"))
      error(s.span, "the data block has no 'text_tokens' (a synthetic source draws lengths from it)");
    if (auto it = keys.find("images"); it != keys.end()) d.images = distribution(*it->second->value, "'images'");
    if (auto it = keys.find("audio_frames"); it != keys.end()) d.audio_frames = distribution(*it->second->value, "'audio_frames'");
    data_read_ = true;
  }

  // ---------------------------------------------------------------- train
  void read_train(const Stmt& s) {
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
      if (auto v = integer(*value(key), fmt::format("'{}'", key), 1)) (std::string(key) == "steps" ? t.steps : t.global_batch) = *v;
    }
    if (const Expr* e = value("seed"))
      if (auto v = integer(*e, "'seed'", 0)) t.seed = static_cast<uint64_t>(*v);
    if (const Expr* e = value("optimizer")) {
      if (e->kind == Expr::Kind::Name && e->text == "adamw") {
      } else if (e->kind == Expr::Kind::Call && e->text == "adamw") {
        if (auto a = args(*e, {"lr", "betas", "eps", "weight_decay"}, {})) {
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
        error(e->span, fmt::format("'optimizer' takes adamw(lr: ..., betas: [..], eps: ..., weight_decay: ...), not {}{}",
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

  // ---------------------------------------------------------------- state
  struct LetEntry {
    const Stmt* stmt = nullptr;
    enum class State { Todo, Busy, Done } state = State::Todo;
    std::optional<LetValue> value;
  };
  struct ModelEntry {
    const Stmt* stmt = nullptr;
    enum class State { Todo, Busy, Done } state = State::Todo;
    std::optional<ModelSpec> spec;
  };
  // What the checks across sections need to know of a section's source.
  struct SectionInfo {
    Span name_span, loss_span, micro_batch_span;
    std::vector<Span> consume_spans;
    bool model_ok = false;
  };
  const SectionInfo& info(const std::string& name) const {
    for (size_t i = 0; i < program_.sections.size(); ++i)
      if (program_.sections[i].name == name) return infos_[i];
    return infos_.front();
  }

  const std::vector<SourceFile>& files_;
  const std::vector<Decl>& decls_;
  Reporter& rep_;
  Program program_;
  std::map<std::string, Span> defined_;  // lets and models share one namespace
  std::map<std::string, LetEntry> lets_;
  std::map<std::string, ModelEntry> models_;
  std::vector<const Stmt*> model_order_;
  std::vector<std::string> section_names_;
  std::vector<SectionInfo> infos_;
  std::vector<Span> flow_spans_;  // parallel to program_.flows
  bool data_read_ = false;
  bool flows_ok_ = true;  // every flow statement named known sections and kinds
  bool mix_ok_ = true;    // every mix entry was well-formed
  int let_depth_ = 0;    // how many lets deep the current evaluation is
  int model_depth_ = 0;  // how many model aliases deep
};

}  // namespace

std::optional<Program> check_program(const std::vector<SourceFile>& files, const std::vector<Decl>& decls,
                                     Reporter& rep) {
  return Checker(files, decls, rep).run();
}

}  // namespace maestro::sect
