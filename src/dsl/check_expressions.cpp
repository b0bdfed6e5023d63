// Expression evaluation for the checker (checker.h): names and lets (with
// cycle and depth checks), arithmetic on numbers with units, and the typed
// readers every block uses (integers, reals, sizes, words, strings, paths,
// lists, the named arguments of a call).
#include "dsl/checker.h"

namespace maestro::sect {

std::optional<Modality> modality_of(const std::string& w) {
  for (int m = 0; m < kNumModalities; ++m)
    if (w == kModalities[m]) return static_cast<Modality>(m);
  return std::nullopt;
}

std::string join_words(const std::vector<std::string>& words, const char* last) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? fmt::format(" {} ", last) : ", ") + words[i];
  return out;
}

std::string quoted(const std::vector<std::string>& words, const char* last) {
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

std::string Checker::source_text(Span s) const {
  std::string line = files_[s.file].line(s.line);
  if (static_cast<size_t>(s.col - 1) >= line.size()) return "";
  return line.substr(s.col - 1, s.length);
}

std::string Checker::absolute_path(const std::string& p, Span at) const {
  fs::path path(p);
  if (path.is_absolute()) return path.lexically_normal().string();
  return (files_[at.file].absolute.parent_path() / path).lexically_normal().string();
}

void Checker::collect_names() {
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

std::vector<std::string> Checker::let_names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : lets_) out.push_back(k);
  return out;
}

const LetValue* Checker::let_value(const std::string& name, Span use, int depth) {
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

std::optional<Num> Checker::literal(const Expr& e) {
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

std::optional<Num> Checker::arith(Num a, char op, Num b, Span at) {
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

std::optional<Num> Checker::number(const Expr& e, const std::string& what) {
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

void Checker::not_a_size(const Expr& e, const Num& n, const std::string& what) {
  std::string text = source_text(e.span);
  if (e.kind != Expr::Kind::Number)
    text += n.is_int ? fmt::format(", which is {} bytes", n.i) : fmt::format(", which is {:.6g} bytes", n.d);
  error(e.span, fmt::format("{} takes a plain number, not a size ({})", what, text));
}

std::optional<double> Checker::real(const Expr& e, const std::string& what) {
  auto n = number(e, what);
  if (!n) return std::nullopt;
  if (n->is_size) {
    not_a_size(e, *n, what);
    return std::nullopt;
  }
  return n->value();
}

std::optional<double> Checker::positive_real(const Expr& e, const std::string& what, bool zero_ok) {
  auto v = real(e, what);
  if (!v) return std::nullopt;
  if (*v < 0 || (*v == 0 && !zero_ok)) {
    error(e.span, fmt::format("{} must be {}, not {}", what, zero_ok ? "zero or more" : "positive", show(*v)));
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> Checker::integer(const Expr& e, const std::string& what, int64_t min, int64_t max) {
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
  if (v > max) {
    error(e.span, fmt::format("{} must be at most {}, not {}", what, max, v));
    return std::nullopt;
  }
  return v;
}

std::optional<std::optional<int64_t>> Checker::count_or_auto(const Expr& e, const std::string& what) {
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

std::optional<bool> Checker::boolean(const Expr& e, const std::string& what) {
  if (e.kind == Expr::Kind::Bool) return e.flag;
  if (e.kind == Expr::Kind::Name && lets_.count(e.text)) {
    const LetValue* v = let_value(e.text, e.span, 0);
    if (v == nullptr) return std::nullopt;
    if (v->kind == LetValue::Kind::Bool) return v->flag;
  }
  error(e.span, fmt::format("{} takes true or false, not {}", what, kind_of(e)));
  return std::nullopt;
}

std::optional<std::string> Checker::string(const Expr& e, const std::string& what) {
  if (e.kind == Expr::Kind::String) return e.text;
  if (e.kind == Expr::Kind::Name && lets_.count(e.text)) {
    const LetValue* v = let_value(e.text, e.span, 0);
    if (v == nullptr) return std::nullopt;
    if (v->kind == LetValue::Kind::String) return v->str;
  }
  error(e.span, fmt::format("{} takes a string in double quotes, not {}", what, kind_of(e)));
  return std::nullopt;
}

std::optional<std::string> Checker::path(const Expr& e, const std::string& what) {
  auto s = string(e, what);
  if (!s) return std::nullopt;
  if (s->empty()) {
    error(e.span, fmt::format("{} must not be an empty path", what));
    return std::nullopt;
  }
  return absolute_path(*s, e.span);
}

std::optional<std::string> Checker::word(const Expr& e, const std::string& what,
                                         const std::vector<std::string>& allowed) {
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

std::optional<std::vector<double>> Checker::number_list(const Expr& e, const std::string& what) {
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

std::optional<Args> Checker::args(const Expr& e, const std::vector<std::string>& accepted,
                                  const std::vector<std::string>& required, const std::string& positional) {
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

}  // namespace maestro::sect
