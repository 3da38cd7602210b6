// The chat template's parser: Jinja2's grammar (its precedence and its postfix rules) for the
// statements and expressions chat templates use. Anything else is refused here, at parse time,
// with its name and line:column, so that no template renders half-understood.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "recur/error.h"
#include "text/template_ast.h"
#include "text/template_builtins.h"

namespace recur::detail {
namespace {

// Nesting deeper than this (brackets, statements) is refused: the tree is walked recursively.
constexpr int kMaxDepth = 64;
// Expression trees deeper than this are refused.
constexpr int kMaxExprDepth = 128;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    std::string stop;
    Body body = parse_body({}, stop);
    return body;
  }

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
  Body parse_body(const std::set<std::string>& stops, std::string& stop) {
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.kind == Kind::kEnd) {
        if (!stops.empty()) fail(t.pos, fmt::format("the template ends inside a block: expected '{{% {} %}}'", *stops.rbegin()));
        return body;
      }
      if (t.kind == Kind::kText) {
        auto s = make_stmt(StmtKind::kText, t.pos);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == Kind::kVarBegin) {
        ++at_;
        auto s = make_stmt(StmtKind::kOutput, t.pos);
        s->expr = parse_expression();
        if (peek().kind != Kind::kVarEnd) fail(peek().pos, fmt::format("expected '}}}}', found {}", describe(peek())));
        ++at_;
        body.push_back(std::move(s));
      } else if (t.kind == Kind::kBlockBegin) {
        const Token& tag = peek(1);
        if (tag.kind != Kind::kName) fail(tag.pos, fmt::format("expected a tag name, found {}", describe(tag)));
        if (stops.count(tag.text)) {
          at_ += 2;
          stop = tag.text;
          return body;
        }
        at_ += 2;
        DepthGuard guard(*this, tag.pos);
        body.push_back(parse_statement(tag));
      } else {
        fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  std::unique_ptr<Stmt> make_stmt(StmtKind kind, Pos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement(const Token& tag) {
    const std::string& t = tag.text;
    if (t == "if") return parse_if(tag.pos);
    if (t == "for") return parse_for(tag.pos);
    if (t == "set") return parse_set(tag.pos);
    if (t == "macro") return parse_macro(tag.pos);
    if (t == "break" || t == "continue") {
      if (loops_ == 0) fail(tag.pos, fmt::format("'{}' outside a for loop", t));
      expect_block_end();
      return make_stmt(t == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag.pos);
    }
    if (t == "generation") {
      // transformers' own tag: marks the assistant's part for masks and renders its body as is.
      expect_block_end();
      auto s = make_stmt(StmtKind::kScope, tag.pos);
      std::string stop;
      s->body = parse_body({"endgeneration"}, stop);
      expect_block_end();
      return s;
    }
    static const std::set<std::string> kKnownEnds = {"endif", "endfor", "endset", "endmacro", "elif",
                                                     "else", "endgeneration"};
    if (kKnownEnds.count(t)) fail(tag.pos, fmt::format("'{}' without its opening tag", t));
    fail(tag.pos, fmt::format("unsupported tag '{}'", t));
  }

  std::unique_ptr<Stmt> parse_if(Pos pos) {
    auto s = make_stmt(StmtKind::kIf, pos);
    ExprPtr cond = parse_expression();
    expect_block_end();
    for (;;) {
      std::string stop;
      Body body = parse_body({"elif", "else", "endif"}, stop);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (stop == "endif") break;
      if (stop == "elif") {
        cond = parse_expression();
        expect_block_end();
        continue;
      }
      expect_block_end();
      Body else_body = parse_body({"endif"}, stop);
      s->branches.emplace_back(nullptr, std::move(else_body));
      break;
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_for(Pos pos) {
    auto s = make_stmt(StmtKind::kFor, pos);
    s->targets.push_back(expect_name("a loop variable"));
    while (is_op(",")) {
      ++at_;
      s->targets.push_back(expect_name("a loop variable"));
    }
    if (!is_name("in")) fail(peek().pos, fmt::format("expected 'in', found {}", describe(peek())));
    ++at_;
    s->expr = parse_or_no_cond();
    if (is_name("if")) {
      ++at_;
      s->filter = parse_or_no_cond();
    }
    if (is_name("recursive")) fail(peek().pos, "unsupported loop option 'recursive'");
    expect_block_end();
    ++loops_;
    std::string stop;
    s->body = parse_body({"else", "endfor"}, stop);
    --loops_;
    if (stop == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, stop);
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(Pos pos) {
    auto s = make_stmt(StmtKind::kSet, pos);
    s->targets.push_back(expect_name("a variable name"));
    if (is_op(".")) {
      ++at_;
      s->targets.push_back(expect_name("an attribute name"));
    } else if (is_op(",")) {
      fail(peek().pos, "unsupported construct: assignment to several names");
    }
    if (peek().kind == Kind::kBlockEnd) {
      if (s->targets.size() != 1) fail(pos, "unsupported construct: a block set of an attribute");
      ++at_;
      s->kind = StmtKind::kSetBlock;
      std::string stop;
      s->body = parse_body({"endset"}, stop);
      expect_block_end();
      return s;
    }
    if (is_op("|")) fail(peek().pos, "unsupported construct: a filtered block set");
    expect_op("=");
    s->expr = parse_expression();
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(Pos pos) {
    auto s = make_stmt(StmtKind::kMacro, pos);
    auto m = std::make_unique<MacroNode>();
    m->pos = pos;
    m->name = expect_name("a macro name");
    expect_op("(");
    while (!is_op(")")) {
      if (!m->params.empty()) expect_op(",");
      if (is_op(")")) break;
      m->params.push_back(expect_name("a parameter name"));
      ExprPtr fallback;
      if (is_op("=")) {
        ++at_;
        fallback = parse_expression();
      }
      m->defaults.push_back(std::move(fallback));
    }
    ++at_;
    expect_block_end();
    macros_.insert(m->name);
    std::string stop;
    const int loops = loops_;
    loops_ = 0;
    m->body = parse_body({"endmacro"}, stop);
    loops_ = loops;
    if (peek().kind == Kind::kName) ++at_;  // {% endmacro name %}
    expect_block_end();
    s->macro = std::move(m);
    return s;
  }

  // Records how deep the tree under `e` is. Chains (a.b.c..., a + b + c ..., x | f | g ...)
  // grow without recursion in the parser; the evaluator and the destructor recurse, so their
  // depth is capped here.
  void deepen(Expr& e) const {
    int d = 0;
    for (const auto& c : e.args) d = c ? std::max(d, c->depth) : d;
    for (const auto& c : e.args2) d = std::max(d, c->depth);
    for (const auto& [k, c] : e.kwargs) d = std::max(d, c->depth);
    e.depth = d + 1;
    if (e.depth > kMaxExprDepth) fail(e.pos, fmt::format("an expression nested deeper than {} levels", kMaxExprDepth));
  }

  ExprPtr make(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Jinja2's precedence, lowest first: conditional, or, and, not, comparisons, + -, ~, * / // %,
  // **, unary - +, then postfix (. [] ()) and filters and tests.
  ExprPtr parse_expression() {
    DepthGuard guard(*this, peek().pos);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Pos pos = next().pos;
      auto cond = make(ExprKind::kCond, pos);
      cond->args.push_back(parse_or());
      cond->args.push_back(std::move(expr));
      if (is_name("else")) {
        ++at_;
        cond->args.push_back(parse_expression());
      } else {
        cond->args.push_back(nullptr);
      }
      deepen(*cond);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr parse_or_no_cond() {
    DepthGuard guard(*this, peek().pos);
    return parse_or();
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = make(ExprKind::kOr, next().pos);
      e->args.push_back(std::move(left));
      e->args.push_back(parse_and());
      deepen(*e);
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = make(ExprKind::kAnd, next().pos);
      e->args.push_back(std::move(left));
      e->args.push_back(parse_not());
      deepen(*e);
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make(ExprKind::kNot, next().pos);
      DepthGuard guard(*this, e->pos);
      e->args.push_back(parse_not());
      deepen(*e);
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Pos pos = peek().pos;
    ExprPtr first = parse_math1();
    ExprPtr e;
    for (;;) {
      std::string op;
      if (peek().kind == Kind::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                       peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++at_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        at_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!e) {
        e = make(ExprKind::kCompare, pos);
        e->args.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->args.push_back(parse_math1());
    }
    if (e) deepen(*e);
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr binary(ExprPtr left, const Token& op, ExprPtr right) {
    auto e = make(ExprKind::kBinary, op.pos);
    e->name = op.text;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    deepen(*e);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& op = next();
      left = binary(std::move(left), op, parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, peek().pos);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      node = make(op.text == "-" ? ExprKind::kNeg : ExprKind::kPos, op.pos);
      node->args.push_back(parse_unary(false));
      deepen(*node);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Kind::kName: {
        ++at_;
        if (t.text == "true" || t.text == "True") return literal(TValue::boolean(true), t.pos);
        if (t.text == "false" || t.text == "False") return literal(TValue::boolean(false), t.pos);
        if (t.text == "none" || t.text == "None") return literal(TValue::none(), t.pos);
        auto e = make(ExprKind::kName, t.pos);
        e->name = t.text;
        return e;
      }
      case Kind::kString: {
        std::string s;
        const Pos pos = t.pos;
        while (peek().kind == Kind::kString) s += next().text;  // adjacent literals join
        return literal(TValue::string(std::move(s)), pos);
      }
      case Kind::kInt: ++at_; return literal(TValue::integer(t.int_value), t.pos);
      case Kind::kFloat: ++at_; return literal(TValue::real(t.float_value), t.pos);
      case Kind::kOp:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(t.pos, "expected an expression, found " + describe(t));
  }

  ExprPtr literal(TValue v, Pos pos) {
    auto e = make(ExprKind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  // A parenthesized expression, or a tuple.
  ExprPtr parse_paren() {
    const Pos pos = next().pos;
    if (is_op(")")) {
      ++at_;
      auto empty = make(ExprKind::kList, pos);
      empty->name = "tuple";
      return empty;
    }
    ExprPtr first = parse_expression();
    if (is_op(")")) {
      ++at_;
      return first;
    }
    auto e = make(ExprKind::kList, pos);
    e->name = "tuple";
    e->args.push_back(std::move(first));
    while (is_op(",")) {
      ++at_;
      if (is_op(")")) break;
      e->args.push_back(parse_expression());
    }
    expect_op(")");
    deepen(*e);
    return e;
  }

  ExprPtr parse_list() {
    auto e = make(ExprKind::kList, next().pos);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression());
    }
    ++at_;
    deepen(*e);
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(ExprKind::kDict, next().pos);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args2.push_back(parse_expression());
    }
    ++at_;
    deepen(*e);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      if (is_op(".")) {
        const Pos pos = next().pos;
        if (peek().kind == Kind::kInt) {  // x.0 is x[0] in Jinja2
          auto e = make(ExprKind::kGetItem, pos);
          e->args.push_back(std::move(node));
          e->args.push_back(literal(TValue::integer(next().int_value), pos));
          deepen(*e);
          node = std::move(e);
          continue;
        }
        const std::string attr = expect_name("an attribute name");
        if (is_op("(")) {
          auto e = make(ExprKind::kMethod, pos);
          e->name = attr;
          if (!known_method(attr)) fail(pos, fmt::format("unsupported method '{}'", attr));
          e->args.push_back(std::move(node));
          parse_args(*e);
          deepen(*e);
          node = std::move(e);
        } else {
          auto e = make(ExprKind::kGetAttr, pos);
          e->name = attr;
          e->args.push_back(std::move(node));
          deepen(*e);
          node = std::move(e);
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Pos pos = next().pos;
    ExprPtr parts[3];
    int colons = 0;
    for (;;) {
      if (is_op("]")) break;
      if (is_op(":")) {
        if (++colons > 2) fail(peek().pos, "a slice has at most three parts");
        ++at_;
        continue;
      }
      if (parts[colons]) fail(peek().pos, fmt::format("expected ']' or ':', found {}", describe(peek())));
      parts[colons] = parse_expression();
      if (colons == 0 && is_op(",")) fail(peek().pos, "unsupported construct: a tuple subscript");
    }
    ++at_;
    if (colons == 0) {
      if (!parts[0]) fail(pos, "an empty subscript");
      auto e = make(ExprKind::kGetItem, pos);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      deepen(*e);
      return e;
    }
    auto e = make(ExprKind::kSlice, pos);
    e->args.push_back(std::move(node));
    for (auto& p : parts) e->args.push_back(std::move(p));
    deepen(*e);
    return e;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Pos pos = peek().pos;
    if (callee->kind != ExprKind::kName)
      fail(pos, "unsupported construct: calling something other than a function or macro by name");
    auto e = make(ExprKind::kCall, callee->pos);
    e->name = callee->name;
    if (!known_function(e->name) && !macros_.count(e->name)) calls_.push_back({e->name, e->pos});
    parse_args(*e);
    deepen(*e);
    return e;
  }

  // (positional..., name=value...) into args (after what is there) and kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(peek().pos, "unsupported construct: '*' or '**' arguments");
      if (peek().kind == Kind::kName && is_op("=", 1)) {
        std::string key = next().text;
        ++at_;
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek().pos, "a positional argument after a keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    ++at_;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        ++at_;
        const Pos pos = peek().pos;
        auto e = make(ExprKind::kFilter, pos);
        e->name = expect_name("a filter name");
        while (is_op(".")) {
          ++at_;
          e->name += "." + expect_name("a filter name");
        }
        if (!known_filter(e->name)) fail(pos, fmt::format("unsupported filter '{}'", e->name));
        e->args.push_back(std::move(node));
        if (is_op("(")) parse_args(*e);
        deepen(*e);
          node = std::move(e);
      } else if (is_name("is")) {
        ++at_;
        auto e = make(ExprKind::kTest, peek().pos);
        if (is_name("not")) {
          ++at_;
          e->negate = true;
        }
        e->pos = peek().pos;
        e->name = expect_name("a test name");
        if (!known_test(e->name)) fail(e->pos, fmt::format("unsupported test '{}'", e->name));
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_args(*e);
        } else if (peek().kind == Kind::kString || peek().kind == Kind::kInt || peek().kind == Kind::kFloat ||
                   is_op("[") || is_op("{") ||
                   (peek().kind == Kind::kName && !is_name("else") && !is_name("or") && !is_name("and") &&
                    !is_name("if") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          e->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        deepen(*e);
          node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

 public:
  // Calls of names that are neither built in nor a macro defined before them: refused unless
  // the macro turns up later in the template.
  void check_calls() const {
    for (const auto& [name, pos] : calls_)
      if (!macros_.count(name)) fail(pos, fmt::format("unsupported function '{}'", name));
  }

 private:
  std::vector<Token> tokens_;
  std::size_t at_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int loops_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, Pos>> calls_;
};

}  // namespace

std::shared_ptr<const TemplateProgram> parse_template(std::string_view source, const std::string& name) {
  auto program = std::make_shared<TemplateProgram>();
  program->name = name;
  Parser parser(lex_template(source, name), name);
  program->body = parser.parse_all();
  parser.check_calls();
  return program;
}

}  // namespace recur::detail
