// Parses one .sect file with the ANTLR-generated parser (grammar/Sect.g4) and
// turns ANTLR's parse tree into the front end's own syntax tree (ast.h).
// Lexical mistakes (stray characters, unterminated strings and comments,
// nesting too deep) are caught on the token stream before parsing; syntax
// errors are phrased in words by an error strategy that knows the grammar.
// The parse runs in SLL mode first and falls back to full LL only on error.
#include <fmt/format.h>

#include "SectLexer.h"
#include "SectParser.h"
#include "antlr4-runtime.h"
#include "dsl/source.h"

namespace maestro::sect {
namespace {

using maestro_sect::SectLexer;
using maestro_sect::SectParser;

constexpr int kMaxNesting = 200;

int token_length(const antlr4::Token* t) {
  if (t->getType() == antlr4::Token::EOF) return 1;
  const std::string text = t->getText();
  size_t nl = text.find('\n');
  size_t len = nl == std::string::npos ? text.size() : nl;
  return len == 0 ? 1 : static_cast<int>(len);
}

Span token_span(int file, const antlr4::Token* t) {
  return Span{file, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1,
              token_length(t)};
}

bool is_keyword(size_t type) {
  switch (type) {
    case SectLexer::IMPORT: case SectLexer::LET: case SectLexer::MODEL: case SectLexer::SECTION:
    case SectLexer::FLOW: case SectLexer::DATA: case SectLexer::TRAIN: case SectLexer::TRUE:
    case SectLexer::FALSE: case SectLexer::AND: case SectLexer::OR: case SectLexer::NOT:
    case SectLexer::AUTO:
      return true;
    default:
      return false;
  }
}

std::string found_text(const antlr4::Token* t) {
  if (t->getType() == antlr4::Token::EOF) return "the end of the file";
  return fmt::format("'{}'", t->getText());
}

// The expected token set in words a user knows.
std::string expected_words(const antlr4::misc::IntervalSet& set, const antlr4::dfa::Vocabulary& vocab) {
  auto has = [&](size_t type) { return set.contains(type); };
  if (has(SectLexer::NUMBER) && has(SectLexer::STRING) && has(SectLexer::IDENT)) return "a value";
  if (has(SectLexer::IMPORT) && has(SectLexer::SECTION)) return "a statement (import, let, model, section, flow, data or train)";
  std::vector<std::string> words;
  for (size_t type : set.toList()) {
    if (type == antlr4::Token::EOF) words.push_back("the end of the file");
    else if (type == SectLexer::IDENT) words.push_back("a name");
    else if (type == SectLexer::NUMBER) words.push_back("a number");
    else if (type == SectLexer::STRING) words.push_back("a string");
    else if (type == SectLexer::MODEL || type == SectLexer::DATA || type == SectLexer::TRAIN) {
      if (!has(SectLexer::IDENT)) words.push_back(std::string(vocab.getLiteralName(type)));
    } else {
      std::string lit = vocab.getLiteralName(type);
      words.push_back(lit.empty() ? std::string(vocab.getSymbolicName(type)) : lit);
    }
  }
  if (words.empty()) return "something else";
  std::string out = words[0];
  for (size_t i = 1; i < words.size(); ++i) out += (i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

// What the parser was reading, for "expected ';' after the value of 'x'".
std::string after_what(antlr4::ParserRuleContext* ctx) {
  for (auto* c = ctx; c != nullptr; c = dynamic_cast<antlr4::ParserRuleContext*>(c->parent)) {
    if (auto* a = dynamic_cast<SectParser::AssignEntryContext*>(c))
      return a->key() ? fmt::format(" after the value of '{}'", a->key()->getText()) : "";
    if (auto* l = dynamic_cast<SectParser::LetStmtContext*>(c))
      return l->IDENT() ? fmt::format(" after the value of '{}'", l->IDENT()->getText()) : "";
    if (auto* m = dynamic_cast<SectParser::ModelStmtContext*>(c))
      return m->IDENT() ? fmt::format(" after the value of '{}'", m->IDENT()->getText()) : "";
    if (dynamic_cast<SectParser::ImportStmtContext*>(c)) return " after the import path";
    if (dynamic_cast<SectParser::FlowStmtContext*>(c)) return " at the end of the flow";
  }
  return "";
}

// Turns each syntax error into one message at the right place, then lets
// ANTLR's default strategy recover so later errors are reported too.
class WordedErrorStrategy : public antlr4::DefaultErrorStrategy {
 public:
  WordedErrorStrategy(int file, Reporter& rep) : file_(file), rep_(rep) {}

 protected:
  void reportNoViableAlternative(antlr4::Parser* p, const antlr4::NoViableAltException& e) override {
    // `key value;`: a block entry whose key is followed by neither '=' nor '{'.
    antlr4::Token* start = e.getStartToken();
    antlr4::Token* found = e.getOffendingToken();
    if ((dynamic_cast<SectParser::EntryContext*>(p->getContext()) || dynamic_cast<SectParser::BlockContext*>(p->getContext())) && start && found && start != found &&
        found->getTokenIndex() == start->getTokenIndex() + 1) {
      rep_.error(token_span(file_, found), fmt::format("expected '=' or '{{' after '{}', found {}", start->getText(),
                                                       found_text(found)));
      return;
    }
    report_unexpected(p, found);
  }
  void reportInputMismatch(antlr4::Parser* p, const antlr4::InputMismatchException& e) override {
    report_unexpected(p, e.getOffendingToken());
  }
  void reportFailedPredicate(antlr4::Parser* p, const antlr4::FailedPredicateException& e) override {
    report_unexpected(p, e.getOffendingToken());
  }
  void reportUnwantedToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    report_unexpected(p, p->getCurrentToken());
  }
  void reportMissingToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    report_unexpected(p, p->getCurrentToken());
  }

 private:
  void report_unexpected(antlr4::Parser* p, antlr4::Token* found) {
    antlr4::misc::IntervalSet expected = p->getExpectedTokens();
    const auto& vocab = p->getVocabulary();
    // A statement keyword where a block's entries go: the block was left open.
    size_t close_brace = 0;
    for (size_t type : expected.toList())
      if (vocab.getLiteralName(type) == "'}'") close_brace = type;
    if (found != nullptr && close_brace != 0 && is_keyword(found->getType()) &&
        found->getType() != SectLexer::MODEL && found->getType() != SectLexer::DATA &&
        found->getType() != SectLexer::TRAIN) {
      rep_.error(token_span(file_, found), fmt::format("expected '}}' to close the block before '{}'", found->getText()));
      return;
    }
    if (found != nullptr && is_keyword(found->getType()) && expected.contains(static_cast<size_t>(SectLexer::IDENT)) &&
        !expected.contains(found->getType())) {
      rep_.error(token_span(file_, found),
                 fmt::format("'{}' is a reserved word and cannot be used as a name", found->getText()));
      return;
    }
    std::string want = expected_words(expected, vocab);
    std::string context = want == "';'" ? after_what(p->getContext()) : "";
    // A missing `;` is shown right after the token it should follow.
    antlr4::Token* previous = p->getTokenStream()->LT(-1);
    if (want == "';'" && previous != nullptr) {
      Span s = token_span(file_, previous);
      s.col += s.length;
      s.length = 1;
      rep_.error(s, fmt::format("expected ';'{}, found {}", context, found_text(found)));
      return;
    }
    rep_.error(token_span(file_, found), fmt::format("expected {}{}, found {}", want, context, found_text(found)));
  }

  int file_;
  Reporter& rep_;
};

// Bracket depth and runs of prefix operators, so that neither the parser nor
// the checker ever recurses more than kMaxNesting levels.
bool check_tokens(const std::vector<antlr4::Token*>& tokens, int file, Reporter& rep) {
  bool ok = true;
  int depth = 0, prefix_run = 0;
  bool depth_reported = false;
  for (antlr4::Token* t : tokens) {
    const std::string text = t->getText();
    switch (t->getType()) {
      case SectLexer::STRAY:
        rep.error(token_span(file, t), fmt::format("unexpected character '{}'", text));
        ok = false;
        continue;
      case SectLexer::UNTERMINATED_STRING:
        rep.error(token_span(file, t), "unterminated string: a string must end with '\"' on the same line");
        ok = false;
        continue;
      case SectLexer::UNTERMINATED_COMMENT:
        rep.error(Span{file, static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1, 2},
                  "unterminated comment: '/*' has no matching '*/'");
        ok = false;
        continue;
      default:
        break;
    }
    if (text == "(" || text == "[" || text == "{") ++depth;
    if (text == ")" || text == "]" || text == "}") depth = std::max(0, depth - 1);
    bool prefix = text == "-" || t->getType() == SectLexer::NOT;
    prefix_run = prefix ? prefix_run + 1 : 0;
    if ((depth > kMaxNesting || prefix_run > kMaxNesting) && !depth_reported) {
      rep.error(token_span(file, t), fmt::format("expression nested more than {} levels deep", kMaxNesting));
      depth_reported = true;
      ok = false;
    }
  }
  return ok;
}

// ------------------------------------------------- parse tree -> syntax tree
class Builder {
 public:
  Builder(int file, Reporter& rep) : file_(file), rep_(rep) {}
  bool ok = true;

  File file(SectParser::FileContext* ctx) {
    File f;
    for (auto* s : ctx->stmt()) f.stmts.push_back(stmt(s));
    return f;
  }

 private:
  Span span(antlr4::Token* t) { return token_span(file_, t); }
  Span span(antlr4::tree::TerminalNode* n) { return span(n->getSymbol()); }
  // From the first token of `ctx` to its last one when both are on one line.
  Span span(antlr4::ParserRuleContext* ctx) {
    Span s = span(ctx->getStart());
    antlr4::Token* stop = ctx->getStop();
    if (stop != nullptr && stop->getLine() == ctx->getStart()->getLine() &&
        stop->getStopIndex() >= ctx->getStart()->getStartIndex()) {
      int end = static_cast<int>(stop->getCharPositionInLine()) + token_length(stop);
      s.length = std::max(1, end - (s.col - 1));
    }
    return s;
  }

  Stmt stmt(SectParser::StmtContext* ctx) {
    Stmt s;
    s.span = span(ctx->getStart());
    if (auto* c = dynamic_cast<SectParser::ImportStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Import;
      s.name_span = span(c->STRING());
      ok &= decode_string(c->STRING()->getText(), s.name_span, s.name, rep_);
    } else if (auto* c = dynamic_cast<SectParser::LetStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Let;
      s.name = c->IDENT()->getText();
      s.name_span = span(c->IDENT());
      s.value = expr(c->expr());
    } else if (auto* c = dynamic_cast<SectParser::ModelStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Model;
      s.name = c->IDENT()->getText();
      s.name_span = span(c->IDENT());
      s.value = expr(c->expr());
    } else if (auto* c = dynamic_cast<SectParser::SectionStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Section;
      s.name = c->IDENT()->getText();
      s.name_span = span(c->IDENT());
      s.block = block(c->block());
    } else if (auto* c = dynamic_cast<SectParser::FlowStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Flow;
      auto idents = c->IDENT();
      bool has_kind = c->children.size() >= 2 &&
                      c->children[c->children.size() - 3]->getText() == ":";
      size_t n = has_kind ? idents.size() - 1 : idents.size();
      for (size_t i = 0; i < n; ++i) {
        s.chain.push_back(idents[i]->getText());
        s.chain_spans.push_back(span(idents[i]));
      }
      if (has_kind) {
        s.flow_kind = idents.back()->getText();
        s.flow_kind_span = span(idents.back());
      }
    } else if (auto* c = dynamic_cast<SectParser::DataStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Data;
      s.block = block(c->block());
    } else if (auto* c = dynamic_cast<SectParser::TrainStmtContext*>(ctx)) {
      s.kind = Stmt::Kind::Train;
      s.block = block(c->block());
    }
    return s;
  }

  std::unique_ptr<Block> block(SectParser::BlockContext* ctx) {
    auto b = std::make_unique<Block>();
    b->open = span(ctx->getStart());
    for (auto* e : ctx->entry()) {
      Entry entry;
      if (auto* a = dynamic_cast<SectParser::AssignEntryContext*>(e)) {
        entry.key = a->key()->getText();
        entry.key_span = span(a->key());
        entry.value = expr(a->expr());
      } else if (auto* k = dynamic_cast<SectParser::BlockEntryContext*>(e)) {
        entry.key = k->key()->getText();
        entry.key_span = span(k->key());
        entry.block = block(k->block());
      }
      b->entries.push_back(std::move(entry));
    }
    return b;
  }

  // A chain `x op y op z` of one precedence level; one operand stays itself.
  template <class Ctx, class Sub>
  ExprPtr chain(Ctx* ctx, const std::vector<Sub*>& operands, Expr::Kind kind, ExprPtr (Builder::*sub)(Sub*)) {
    if (operands.size() == 1) return (this->*sub)(operands[0]);
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->span = span(ctx);
    for (auto* child : ctx->children) {
      if (auto* term = dynamic_cast<antlr4::tree::TerminalNode*>(child)) {
        if (kind == Expr::Kind::Arith) e->ops.push_back(term->getText()[0]);
      } else {
        e->items.push_back((this->*sub)(dynamic_cast<Sub*>(child)));
      }
    }
    return e;
  }

  ExprPtr expr(SectParser::ExprContext* ctx) { return chain(ctx, ctx->andExpr(), Expr::Kind::Or, &Builder::and_expr); }
  ExprPtr and_expr(SectParser::AndExprContext* ctx) {
    return chain(ctx, ctx->notExpr(), Expr::Kind::And, &Builder::not_expr);
  }
  ExprPtr not_expr(SectParser::NotExprContext* ctx) {
    if (ctx->sumExpr() != nullptr) return sum(ctx->sumExpr());
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Not;
    e->span = span(ctx);
    e->items.push_back(not_expr(ctx->notExpr()));
    return e;
  }
  ExprPtr sum(SectParser::SumExprContext* ctx) { return chain(ctx, ctx->product(), Expr::Kind::Arith, &Builder::product); }
  ExprPtr product(SectParser::ProductContext* ctx) { return chain(ctx, ctx->unary(), Expr::Kind::Arith, &Builder::unary); }
  ExprPtr unary(SectParser::UnaryContext* ctx) {
    if (ctx->primary() != nullptr) return primary(ctx->primary());
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::Neg;
    e->span = span(ctx);
    e->items.push_back(unary(ctx->unary()));
    return e;
  }

  ExprPtr primary(SectParser::PrimaryContext* ctx) {
    if (auto* p = dynamic_cast<SectParser::ParenExprContext*>(ctx)) return expr(p->expr());
    auto e = std::make_unique<Expr>();
    e->span = span(ctx);
    if (auto* n = dynamic_cast<SectParser::NumberLitContext*>(ctx)) {
      e->kind = Expr::Kind::Number;
      e->text = n->getText();
    } else if (auto* s = dynamic_cast<SectParser::StringLitContext*>(ctx)) {
      e->kind = Expr::Kind::String;
      ok &= decode_string(s->getText(), e->span, e->text, rep_);
    } else if (auto* b = dynamic_cast<SectParser::BoolLitContext*>(ctx)) {
      e->kind = Expr::Kind::Bool;
      e->flag = b->TRUE() != nullptr;
    } else if (dynamic_cast<SectParser::AutoLitContext*>(ctx)) {
      e->kind = Expr::Kind::Auto;
    } else if (auto* r = dynamic_cast<SectParser::NameRefContext*>(ctx)) {
      e->kind = Expr::Kind::Name;
      e->text = r->getText();
    } else if (auto* c = dynamic_cast<SectParser::CallExprContext*>(ctx)) {
      e->kind = Expr::Kind::Call;
      e->text = c->IDENT()->getText();
      for (auto* a : c->arg()) {
        e->arg_names.push_back(a->IDENT() ? a->IDENT()->getText() : "");
        e->arg_name_spans.push_back(a->IDENT() ? span(a->IDENT()) : span(a));
        e->items.push_back(expr(a->expr()));
      }
    } else if (auto* l = dynamic_cast<SectParser::ListExprContext*>(ctx)) {
      e->kind = Expr::Kind::List;
      for (auto* item : l->expr()) e->items.push_back(expr(item));
    }
    return e;
  }

  int file_;
  Reporter& rep_;
};

}  // namespace

bool decode_string(const std::string& literal, Span span, std::string& out, Reporter& rep) {
  out.clear();
  for (size_t i = 1; i + 1 < literal.size(); ++i) {
    char c = literal[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    char next = literal[++i];
    switch (next) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      default:
        rep.error(Span{span.file, span.line, span.col + static_cast<int>(i) - 1, 2},
                  fmt::format("unknown escape '\\{}' in string (use \\\" \\\\ \\n or \\t)", next));
        return false;
    }
  }
  return true;
}

bool parse_file(SourceFile& file, int file_index, Reporter& rep) {
  antlr4::ANTLRInputStream input(file.text);
  SectLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  if (!check_tokens(tokens.getTokens(), file_index, rep)) return false;

  SectParser parser(&tokens);
  parser.removeErrorListeners();
  SectParser::FileContext* tree = nullptr;
  // SLL first: fast and enough for every correct file of this grammar.
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  try {
    tree = parser.file();
  } catch (const antlr4::ParseCancellationException&) {
    tree = nullptr;
  }
  if (tree == nullptr) {
    // Full LL with worded, recovering error reports.
    tokens.seek(0);
    parser.reset();
    parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::LL);
    parser.setErrorHandler(std::make_shared<WordedErrorStrategy>(file_index, rep));
    size_t before = rep.count();
    tree = parser.file();
    if (rep.count() != before || parser.getNumberOfSyntaxErrors() > 0) return false;
  }
  Builder builder(file_index, rep);
  file.ast = builder.file(tree);
  return builder.ok;
}

}  // namespace maestro::sect
