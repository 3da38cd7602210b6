// The chat template's expressions, with Jinja2's precedence (lowest first: conditional, or,
// and, not, comparisons, + -, ~, * / // %, **, unary - +), then postfix (. [] ()) and filters
// and tests. Names of filters, tests, methods and functions outside the supported subset are
// refused here.
#include "text/template_builtins.h"
#include "text/template_parser.h"

namespace recur::detail {

void Parser::deepen(Expr& e) const {
  int d = 0;
  for (const auto& c : e.args) d = c ? std::max(d, c->depth) : d;
  for (const auto& c : e.args2) d = std::max(d, c->depth);
  for (const auto& [k, c] : e.kwargs) d = std::max(d, c->depth);
  e.depth = d + 1;
  if (e.depth > kMaxExprDepth) fail(e.pos, fmt::format("an expression nested deeper than {} levels", kMaxExprDepth));
}

ExprPtr Parser::make(ExprKind kind, Pos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

ExprPtr Parser::parse_expression() {
  DepthGuard guard(*this, peek().pos);
  const std::size_t mark = pending_.size();
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
    soften(mark);
  }
  return expr;
}

ExprPtr Parser::parse_or_no_cond() {
  DepthGuard guard(*this, peek().pos);
  return parse_or();
}

ExprPtr Parser::parse_or() {
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

ExprPtr Parser::parse_and() {
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

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    auto e = make(ExprKind::kNot, next().pos);
    DepthGuard guard(*this, e->pos);
    e->args.push_back(parse_not());
    deepen(*e);
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::binary(ExprPtr left, const Token& op, ExprPtr right) {
  auto e = make(ExprKind::kBinary, op.pos);
  e->name = op.text;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  deepen(*e);
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = next();
    left = binary(std::move(left), op, parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const Token& op = next();
    left = binary(std::move(left), op, parse_math2());
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = next();
    left = binary(std::move(left), op, parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& op = next();
    left = binary(std::move(left), op, parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::literal(TValue v, Pos pos) {
  auto e = make(ExprKind::kLiteral, pos);
  e->literal = std::move(v);
  return e;
}

ExprPtr Parser::parse_paren() {
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

ExprPtr Parser::parse_list() {
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

ExprPtr Parser::parse_dict() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr node) {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
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

void Parser::parse_args(Expr& e) {
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

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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
      check_filter(*e);
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
      if (!known_test(e->name)) {
        if (jinja2_test(e->name)) fail(e->pos, fmt::format("unsupported test '{}'", e->name));
        missing(*e);
      }
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

}  // namespace recur::detail
