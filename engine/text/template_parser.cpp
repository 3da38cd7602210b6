// The chat template's parser: statements (if, for, set, macro, ...) and the entry point. The
// expressions are read in template_expr_parser.cpp.
#include "text/template_parser.h"

#include "text/template_builtins.h"

namespace recur::detail {

Body Parser::parse_all() {
  std::string stop;
  Body body = parse_body({}, stop);
  check_missing(0);
  return body;
}

Body Parser::parse_body(const std::set<std::string>& stops, std::string& stop) {
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

std::unique_ptr<Stmt> Parser::make_stmt(StmtKind kind, Pos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->pos = pos;
  return s;
}

std::unique_ptr<Stmt> Parser::parse_statement(const Token& tag) {
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
    const std::size_t mark = pending_.size();
    s->body = parse_body({"endgeneration"}, stop);
    check_missing(mark);
    expect_block_end();
    return s;
  }
  if (t == "filter") {
    // {% filter f(args) | g %}body{% endfilter %}: the body's text through the filters, in a
    // frame of its own (Jinja2's filter block).
    auto s = make_stmt(StmtKind::kFilterBlock, tag.pos);
    auto node = make(ExprKind::kName, tag.pos);
    node->name = kFilterBlockInput;
    const std::size_t mark = pending_.size();
    for (;;) {
      const Pos pos = peek().pos;
      auto e = make(ExprKind::kFilter, pos);
      e->name = expect_name("a filter name");
      check_filter(*e);
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_args(*e);
      deepen(*e);
      node = std::move(e);
      if (!is_op("|")) break;
      ++at_;
    }
    s->expr = std::move(node);
    expect_block_end();
    std::string stop;
    const int loops = loops_;
    loops_ = 0;  // its body is rendered aside: a break there is refused
    s->body = parse_body({"endfilter"}, stop);
    loops_ = loops;
    check_missing(mark);
    expect_block_end();
    return s;
  }
  static const std::set<std::string> kKnownEnds = {"endif", "endfor", "endset", "endmacro", "elif",
                                                   "else", "endgeneration", "endfilter"};
  if (kKnownEnds.count(t)) fail(tag.pos, fmt::format("'{}' without its opening tag", t));
  fail(tag.pos, fmt::format("unsupported tag '{}'", t));
}

std::unique_ptr<Stmt> Parser::parse_if(Pos pos) {
  auto s = make_stmt(StmtKind::kIf, pos);
  const std::size_t mark = pending_.size();
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
  soften(mark);
  return s;
}

std::unique_ptr<Stmt> Parser::parse_for(Pos pos) {
  auto s = make_stmt(StmtKind::kFor, pos);
  s->targets.push_back(expect_name("a loop variable"));
  while (is_op(",")) {
    ++at_;
    s->targets.push_back(expect_name("a loop variable"));
  }
  if (!is_name("in")) fail(peek().pos, fmt::format("expected 'in', found {}", describe(peek())));
  ++at_;
  s->expr = parse_or_no_cond();  // in the enclosing frame
  const std::size_t mark = pending_.size();
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
  check_missing(mark);
  expect_block_end();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_set(Pos pos) {
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
    const std::size_t mark = pending_.size();
    s->body = parse_body({"endset"}, stop);
    check_missing(mark);
    expect_block_end();
    return s;
  }
  if (is_op("|")) fail(peek().pos, "unsupported construct: a filtered block set");
  expect_op("=");
  s->expr = parse_expression();
  expect_block_end();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_macro(Pos pos) {
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
  const std::size_t mark = pending_.size();
  m->body = parse_body({"endmacro"}, stop);
  check_missing(mark);
  loops_ = loops;
  if (peek().kind == Kind::kName) ++at_;  // {% endmacro name %}
  expect_block_end();
  s->macro = std::move(m);
  return s;
}

void Parser::check_calls() const {
  for (const auto& [name, pos] : calls_)
    if (!macros_.count(name)) fail(pos, fmt::format("unsupported function '{}'", name));
}

std::shared_ptr<const TemplateProgram> parse_template(std::string_view source, const std::string& name) {
  auto program = std::make_shared<TemplateProgram>();
  program->name = name;
  Parser parser(lex_template(source, name), name);
  program->body = parser.parse_all();
  parser.check_calls();
  return program;
}

void Parser::check_filter(Expr& e) {
  if (known_filter(e.name)) return;
  if (jinja2_filter(e.name)) fail(e.pos, fmt::format("unsupported filter '{}'", e.name));
  missing(e);
}

}  // namespace recur::detail
