// A chat template after lexing and parsing: tokens, expressions, statements, and the parser's
// entry point. The evaluator (template_eval.cpp) walks these trees.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/template_value.h"

namespace recur::detail {

/// 1-based line and column in the template's source.
struct Pos {
  int line = 1;
  int column = 1;
};

struct Token {
  enum class Kind { kText, kBlockBegin, kBlockEnd, kVarBegin, kVarEnd, kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind;
  Pos pos;
  std::string text;  // the data, the name, the string's value or the operator
  std::int64_t int_value = 0;
  double float_value = 0.0;
};

/// The template's tokens with Hugging Face's whitespace control applied (trim_blocks and
/// lstrip_blocks on, `-` and `+` markers), newlines normalized to "\n" and one trailing
/// newline dropped, as Jinja2 does. Throws FormatError("[ChatTemplate] NAME:L:C: ...").
std::vector<Token> lex_template(std::string_view source, const std::string& name);

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args: the items; name "tuple" for a tuple
  kDict,      // kwargs: key expressions in args, values in args2 (pairwise)
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]], missing parts null
  kCall,      // args[0](args[1..], kwargs)
  kMethod,    // args[0].name(args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..]); negate
  kNot,       // not args[0]
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kBinary,    // args[0] op args[1]: + - * / // % ** ~
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in, not in
  kAnd,
  kOr,
  kCond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  Pos pos;
  TValue literal;
  std::string name;  // the variable, attribute, method, filter, test or operator
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> args2;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negate = false;
  // A filter or test Jinja2 does not know, in a place where it only fails when it runs
  // (template_parser.h, Parser::missing).
  bool missing = false;
  int depth = 1;  // of the tree under this node (the parser caps it)
};

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kScope, kFilterBlock };

// The name a `{% filter %}` block's text is bound to while its filters run: no template can
// write it.
inline constexpr const char* kFilterBlockInput = "\x01filter block";

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroNode {
  std::string name;
  Pos pos;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null where there is none
  Body body;
};

struct Stmt {
  StmtKind kind;
  Pos pos;
  std::string text;                                   // kText
  ExprPtr expr;                                       // output, set value, for's iterable, filter block's filters
  std::vector<std::pair<ExprPtr, Body>> branches;     // if/elif (condition) and else (null)
  std::vector<std::string> targets;                   // for's names; set's name, or ns and attr
  ExprPtr filter;                                     // for ... if filter
  Body body;                                          // for, set block, generation
  Body else_body;                                     // for's else
  std::unique_ptr<MacroNode> macro;                   // kMacro
};

struct TemplateProgram {
  std::string name;
  Body body;
};

/// Parses a template; every construct outside the supported subset is a FormatError naming
/// it and its line:column.
std::shared_ptr<const TemplateProgram> parse_template(std::string_view source, const std::string& name);

/// "[ChatTemplate] NAME:L:C: " for messages.
std::string where(const std::string& name, Pos pos);

}  // namespace recur::detail
