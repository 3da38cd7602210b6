// The chat template's parser (a private header: template_parser.cpp reads the statements,
// template_expr_parser.cpp the expressions). Jinja2's grammar, its precedence and its postfix
// rules, for what chat templates use; anything else is refused at parse time, with its name and
// line:column, so that no template renders half-understood.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "recur/error.h"
#include "text/template_ast.h"

namespace recur::detail {

// Nesting deeper than this (brackets, statements) is refused: the tree is walked recursively.
inline constexpr int kMaxDepth = 64;
// Expression trees deeper than this are refused.
inline constexpr int kMaxExprDepth = 128;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_all();

 private:
  using Kind = Token::Kind;

  const Token& peek(std::size_t ahead = 0) const {
    return tokens_[std::min(at_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[std::min(at_++, tokens_.size() - 1)]; }
  bool is_op(const char* op, std::size_t ahead = 0) const {
    return peek(ahead).kind == Kind::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* name, std::size_t ahead = 0) const {
    return peek(ahead).kind == Kind::kName && peek(ahead).text == name;
  }
  [[noreturn]] void fail(Pos pos, const std::string& what) const { throw FormatError(where(name_, pos) + what); }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Kind::kText: return "text";
      case Kind::kBlockBegin: return "'{%'";
      case Kind::kBlockEnd: return "'%}'";
      case Kind::kVarBegin: return "'{{'";
      case Kind::kVarEnd: return "'}}'";
      case Kind::kName: return "'" + t.text + "'";
      case Kind::kString: return "a string";
      case Kind::kInt:
      case Kind::kFloat: return "a number";
      case Kind::kOp: return "'" + t.text + "'";
      case Kind::kEnd: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().pos, fmt::format("expected '{}', found {}", op, describe(peek())));
    ++at_;
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Kind::kName) fail(peek().pos, fmt::format("expected {}, found {}", what, describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Kind::kBlockEnd) fail(peek().pos, fmt::format("expected '%}}', found {}", describe(peek())));
    ++at_;
  }

  struct DepthGuard {
    DepthGuard(Parser& p, Pos pos) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail(pos, fmt::format("nesting deeper than {} levels", kMaxDepth));
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // Statements up to a tag named in `stops` (left unread past its name, which goes to `stop`).
  Body parse_body(const std::set<std::string>& stops, std::string& stop);
  std::unique_ptr<Stmt> make_stmt(StmtKind kind, Pos pos);
  std::unique_ptr<Stmt> parse_statement(const Token& tag);
  std::unique_ptr<Stmt> parse_if(Pos pos);
  std::unique_ptr<Stmt> parse_for(Pos pos);
  std::unique_ptr<Stmt> parse_set(Pos pos);
  std::unique_ptr<Stmt> parse_macro(Pos pos);

  // Records how deep the tree under `e` is. Chains (a.b.c..., a + b + c ..., x | f | g ...)
  // grow without recursion in the parser; the evaluator and the destructor recurse, so their
  // depth is capped here.
  void deepen(Expr& e) const;
  ExprPtr make(ExprKind kind, Pos pos);

  // Jinja2's precedence, lowest first: conditional, or, and, not, comparisons, + -, ~, * / // %,
  // **, unary - +, then postfix (. [] ()) and filters and tests.
  ExprPtr parse_expression();
  ExprPtr parse_or_no_cond();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(ExprPtr left, const Token& op, ExprPtr right);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr literal(TValue v, Pos pos);

  // A parenthesized expression, or a tuple.
  ExprPtr parse_paren();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_call(ExprPtr callee);

  // (positional..., name=value...) into args (after what is there) and kwargs.
  void parse_args(Expr& e);
  ExprPtr parse_filter_expr(ExprPtr node);

  // Jinja2 compiles the test and branches of an `if`, and the parts of a conditional
  // expression, in a "soft" frame, where a filter or test it does not know compiles into a
  // call that fails when it runs; anywhere else, compiling fails. A `for` body (its `if` and
  // `else` too), a macro, a block `set` and `{% generation %}` open a new, hard frame, even
  // inside an `if`. `pending_` holds the unknown names read since the innermost frame opened
  // and not yet covered by a soft construct.
  void missing(Expr& e) {
    e.missing = true;
    pending_.push_back(&e);
  }
  void soften(std::size_t mark) { pending_.resize(std::min(pending_.size(), mark)); }
  // A filter recur does not have: refused at once when Jinja2 has it (the template needs what
  // recur does not do), else left to Jinja2's rule above.
  void check_filter(Expr& e);

 public:
  // Calls of names that are neither built in nor a macro defined before them: refused unless
  // the macro turns up later in the template.
  void check_calls() const;
  // Filters and tests Jinja2 does not know either, outside any `if` or conditional expression
  // of their frame: refused, as Jinja2 refuses them when it compiles.
  void check_missing(std::size_t mark) const {
    if (pending_.size() > mark) {
      const Expr& e = *pending_[mark];
      fail(e.pos, fmt::format("no {} named '{}' (Jinja2 has none either)",
                              e.kind == ExprKind::kFilter ? "filter" : "test", e.name));
    }
  }

 private:
  std::vector<Token> tokens_;
  std::size_t at_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int loops_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, Pos>> calls_;
  std::vector<const Expr*> pending_;
};

}  // namespace recur::detail
