// The checker's shared parts (internal to dsl/): the values expressions
// evaluate to, the helpers every part uses, and the Checker class whose
// member functions are split by idea over check.cpp (the driver),
// check_expressions.cpp, builtin_models.cpp, check_blocks.cpp and
// check_rules.cpp.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dsl/check.h"

namespace maestro::sect {

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

inline std::string show(double v) { return fmt::format("{}", v); }

// A let's value: a number, a string or true/false.
struct LetValue {
  enum class Kind { Number, String, Bool } kind = Kind::Number;
  Num num;
  std::string str;
  bool flag = false;
};

inline const std::vector<std::string> kModalities = {"text", "image", "audio", "video"};

std::optional<Modality> modality_of(const std::string& w);

std::string join_words(const std::vector<std::string>& words, const char* last = "or");

std::string quoted(const std::vector<std::string>& words, const char* last = "or");

std::string kind_of(const Expr& e);

// The parameters of one built-in model, in the order of the spec.
struct Param {
  const char* name;
  enum class Type { Int, Real, Bool, Act } type;
  bool required;
};

const std::map<std::string, std::vector<Param>>& builtin_params();

std::vector<std::string> keys_of(const std::map<std::string, std::vector<Param>>& m);

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

  // The driver (check.cpp)
  std::optional<Program> run();

 private:
  const Stmt& stmt(const Decl& d) const { return files_[d.file].ast.stmts[d.stmt]; }
  void error(Span s, std::string msg) { rep_.error(s, std::move(msg)); }
  std::string where(Span place, Span from) const { return rep_.where(place, from); }

  // Expression evaluation (check_expressions.cpp): names, lets, numbers with units, typed values, call arguments
  std::string source_text(Span s) const;
  // Path `p` relative to the folder of the file that holds `at`, made absolute.
  std::string absolute_path(const std::string& p, Span at) const;
  void collect_names();
  std::vector<std::string> let_names() const;
  // Evaluates let `name` once (lets may be used before their definition);
  // reports a cycle at the let that closes it.
  const LetValue* let_value(const std::string& name, Span use, int depth);
  std::optional<Num> literal(const Expr& e);
  std::optional<Num> arith(Num a, char op, Num b, Span at);
  // A number-valued expression; `what` names its place ("'ffn'", "let 'x'").
  std::optional<Num> number(const Expr& e, const std::string& what);
  // A unit where a plain number belongs; names the bytes unless it is one literal.
  void not_a_size(const Expr& e, const Num& n, const std::string& what);
  // A plain (unit-less) number.
  std::optional<double> real(const Expr& e, const std::string& what);
  // A plain real number with `value > 0` (or `>= 0` when zero is allowed).
  std::optional<double> positive_real(const Expr& e, const std::string& what, bool zero_ok = false);
  // A plain whole number at least `min`.
  std::optional<int64_t> integer(const Expr& e, const std::string& what, int64_t min, int64_t max = INT64_MAX);
  // `auto` (nullopt inside) or a whole number >= 1.
  std::optional<std::optional<int64_t>> count_or_auto(const Expr& e, const std::string& what);
  std::optional<bool> boolean(const Expr& e, const std::string& what);
  std::optional<std::string> string(const Expr& e, const std::string& what);
  // A non-empty path string, made absolute relative to its file.
  std::optional<std::string> path(const Expr& e, const std::string& what);
  // One of a fixed set of bare words (`mode = frozen`).
  std::optional<std::string> word(const Expr& e, const std::string& what, const std::vector<std::string>& allowed);
  std::optional<std::vector<double>> number_list(const Expr& e, const std::string& what);
  // Named arguments of call `e` to `callee`; `positional` may name the one
  // argument that may be given without its name (first position only).
  std::optional<Args> args(const Expr& e, const std::vector<std::string>& accepted,
                           const std::vector<std::string>& required, const std::string& positional = "");

  // The built-in models (builtin_models.cpp): model declarations and calls to their specs
  std::optional<ModelSpec> model_named(const std::string& name, Span use);
  std::optional<ModelSpec> model_expr(const Expr& e);

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

  // Block readers (check_blocks.cpp): keys of a block, sections, flows, data, train
  Keys entries(const Block& b, const std::vector<std::string>& values, const std::vector<std::string>& blocks,
               const std::string& in);
  void one_block(const Stmt& s, const Stmt*& first, const char* what);
  Condition condition(const Expr& e, bool& ok);
  // One term of a loss: cross_entropy, kl(temperature: T), or `w * term`.
  std::optional<LossTerm> loss_term(const Expr& e);
  std::vector<LossTerm> loss(const Expr& e, bool& ok);
  void read_section(const Stmt& s);
  void read_flow(const Stmt& s);
  // Width and vocabulary agreement across one edge (when both models resolved).
  void check_edge(const std::string& a, const std::string& b, FlowKind kind, Span edge);
  std::optional<Distribution> distribution(const Expr& e, const std::string& what, int64_t max);  // values <= max
  void read_mix(const Block& b, Span key_span);
  void read_data(const Stmt& s);
  void read_train(const Stmt& s);

  // Program-wide rules (check_rules.cpp): what needs every section and flow read
  // Depth-first search over the flow graph; reports one cycle with its path.
  void check_flow_cycles();
  // Rules that need the whole program: loss placement, consumes vs mix,
  // micro_batch vs global_batch.
  void check_sections_against_program();
  // A frozen section takes no gradient, so none can flow back through it to a
  // trainable section feeding it activations: reported at that flow.
  void check_frozen_sections();

  // ----------------------------------------------------------------- state
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
    Span name_span, loss_span, micro_batch_span, when_span, dp_span;
    std::vector<Span> consume_spans;
    bool model_ok = false;
    bool recompute_written = false;
    bool when_written = false;  // else `when` follows `consumes` (check_consumes)
  };
  void check_consumes(const Section& sec, Span where);
  void check_against_synthetic_data(const Section& sec, const SectionInfo& si);
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
  Span text_tokens_span_, audio_frames_span_;  // the data block's distributions, where written
  bool flows_ok_ = true;  // every flow statement named known sections and kinds
  bool mix_ok_ = true;    // every mix entry was well-formed
  int let_depth_ = 0;    // how many lets deep the current evaluation is
  int model_depth_ = 0;  // how many model aliases deep
};

}  // namespace maestro::sect
