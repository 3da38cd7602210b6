// The chat template's evaluator: statements with Jinja2's scoping (each loop iteration and each
// macro call has its own variables; `if` has none; namespaces are shared), expressions with
// Python's operators, Undefined as Jinja2's default Undefined, and the budget checked at every
// statement and expression node.
#include "text/template_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "recur/error.h"
#include "text/template_builtins.h"
#include "text/template_more.h"

namespace recur::detail {
namespace {

// Evaluator frames (statement bodies and expression nodes) nested at once.
constexpr int kMaxNesting = 1000;

class Renderer {
 public:
  Renderer(const TemplateProgram& program, const ChatTemplateLimits& limits)
      : program_(program), budget_(limits) {}

  std::string run(const TDict& globals) {
    frames_.push_back(globals);
    std::string out;
    out_ = &out;
    exec_body(program_.body);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail(Pos pos, const std::string& what) const {
    throw FormatError(where(program_.name, pos) + what);
  }

  void step(Pos pos) {
    if (!budget_.step())
      fail(pos, fmt::format("the step budget of {} steps is spent (ChatTemplateLimits::max_steps): the "
                            "template runs too long",
                            budget_.limits().max_steps));
  }

  void emit(const std::string& s, Pos pos) {
    if (out_->size() + s.size() > budget_.limits().max_bytes)
      fail(pos, fmt::format("the output passes the cap of {} bytes (ChatTemplateLimits::max_bytes)",
                            budget_.limits().max_bytes));
    out_->append(s);
  }

  TValue* find(const std::string& name) {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      for (auto& [k, v] : *f)
        if (k == name) return &v;
    return nullptr;
  }

  void assign(const std::string& name, TValue value) {
    for (auto& [k, v] : frames_.back())
      if (k == name) {
        v = std::move(value);
        return;
      }
    frames_.back().emplace_back(name, std::move(value));
  }

  // Bounds the evaluator's recursion (nested statements, expressions and macro calls
  // together), so that no template can overflow the stack.
  struct DepthGuard {
    DepthGuard(Renderer& r, Pos pos) : renderer(r) {
      if (++renderer.nesting_ > kMaxNesting)
        renderer.fail(pos, fmt::format("rendering nested deeper than {} levels", kMaxNesting));
    }
    ~DepthGuard() { --renderer.nesting_; }
    Renderer& renderer;
  };

  Flow exec_body(const Body& body) {
    const DepthGuard guard(*this, body.empty() ? Pos{} : body.front()->pos);
    for (const auto& s : body) {
      const Flow flow = exec(*s);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    step(s.pos);
    switch (s.kind) {
      case StmtKind::kText: emit(s.text, s.pos); return Flow::kNormal;
      case StmtKind::kOutput: emit(text_of(eval(*s.expr), s.expr->pos), s.pos); return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (!cond || eval(*cond).truthy()) return exec_body(body);
        return Flow::kNormal;
      case StmtKind::kFor: exec_for(s); return Flow::kNormal;
      case StmtKind::kSet: exec_set(s); return Flow::kNormal;
      case StmtKind::kSetBlock: assign(s.targets[0], TValue::string(capture(s.body, s.pos))); return Flow::kNormal;
      case StmtKind::kMacro: assign(s.macro->name, TValue::macro(s.macro.get())); return Flow::kNormal;
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec_body(s.body);
      case StmtKind::kFilterBlock: {
        TDict frame = {{kFilterBlockInput, TValue::string(capture(s.body, s.pos))}};
        frames_.push_back(std::move(frame));
        const TValue v = eval(*s.expr);
        frames_.pop_back();
        emit(text_of(v, s.pos), s.pos);
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  // The output of `body`, written aside.
  std::string capture(const Body& body, Pos pos) {
    std::string text;
    std::string* saved = out_;
    out_ = &text;
    exec_body(body);
    out_ = saved;
    try {
      budget_.allocate(text.size());
    } catch (const BuiltinError& e) {
      fail(pos, e.what());
    }
    return text;
  }

  // What {{ v }} prints. A list or dict goes through the string filter first, which bounds the
  // size of its repr and refuses a generator, before the text is built.
  std::string text_of(const TValue& v, Pos pos) {
    try {
      if (v.is_list() || v.is_mapping()) apply_filter("string", v, {}, budget_);
      return to_str(v, budget_);
    } catch (const BuiltinError& e) {
      fail(pos, e.what());
    }
  }

  void exec_set(const Stmt& s) {
    TValue value = eval(*s.expr);
    if (s.targets.size() == 1) {
      assign(s.targets[0], std::move(value));
      return;
    }
    TValue* ns = find(s.targets[0]);
    if (!ns || ns->kind() != TValue::Kind::kNamespace)
      fail(s.pos, fmt::format("cannot set '{}.{}': '{}' is not a namespace", s.targets[0], s.targets[1], s.targets[0]));
    for (auto& [k, v] : ns->mutable_members())
      if (k == s.targets[1]) {
        v = std::move(value);
        return;
      }
    ns->mutable_members().emplace_back(s.targets[1], std::move(value));
  }

  TList iterate(const TValue& v, Pos pos, const char* what) {
    if (v.is_list()) return v.items();
    TList out;
    if (v.is_undefined()) return out;  // Jinja2's Undefined walks as nothing
    if (v.kind() == TValue::Kind::kDict) {
      for (const auto& [k, x] : v.members()) out.push_back(decode_key(k));
    } else if (v.is_string()) {
      for (const char32_t c : decode_utf8(v.str())) out.push_back(TValue::string(encode_utf8(std::u32string(1, c))));
    } else {
      fail(pos, fmt::format("{} needs a list, a dict or a string, got {}", what, v.type_name()));
    }
    return out;
  }

  void bind_targets(const Stmt& s, TDict& frame, const TValue& item) {
    if (s.targets.size() == 1) {
      frame.emplace_back(s.targets[0], item);
      return;
    }
    if (!item.is_sequence() || item.items().size() != s.targets.size())
      fail(s.pos, fmt::format("cannot unpack a {} into {} loop variables", item.type_name(), s.targets.size()));
    for (std::size_t i = 0; i < s.targets.size(); ++i) frame.emplace_back(s.targets[i], item.items()[i]);
  }

  void exec_for(const Stmt& s) {
    const TValue iterable = eval(*s.expr);
    TList items = iterate(iterable, s.expr->pos, "a for loop");
    if (s.filter) {
      TList kept;
      for (const auto& item : items) {
        step(s.pos);
        frames_.emplace_back();
        bind_targets(s, frames_.back(), item);
        const bool keep = eval(*s.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      step(s.pos);  // an empty body still costs its iterations
      TDict loop = {{"index", TValue::integer(i + 1)},      {"index0", TValue::integer(i)},
                    {"revindex", TValue::integer(n - i)},   {"revindex0", TValue::integer(n - i - 1)},
                    {"first", TValue::boolean(i == 0)},     {"last", TValue::boolean(i == n - 1)},
                    {"length", TValue::integer(n)},         {"depth", TValue::integer(1)},
                    {"depth0", TValue::integer(0)}};
      if (i > 0) loop.emplace_back("previtem", items[static_cast<std::size_t>(i - 1)]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[static_cast<std::size_t>(i + 1)]);
      frames_.emplace_back();
      bind_targets(s, frames_.back(), items[static_cast<std::size_t>(i)]);
      frames_.back().emplace_back("loop", TValue::dict(std::move(loop)));
      const Flow flow = exec_body(s.body);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && !s.else_body.empty()) exec_body(s.else_body);
  }

  // A readable name for an expression in messages: "message.tool_calls", "messages[0]".
  static std::string describe(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kName: return e.name;
      case ExprKind::kGetAttr: return describe(*e.args[0]) + "." + e.name;
      case ExprKind::kGetItem:
        return describe(*e.args[1]) == "?" ? describe(*e.args[0]) + "[...]"
                                           : describe(*e.args[0]) + "[" + describe(*e.args[1]) + "]";
      case ExprKind::kLiteral: return e.literal.is_string() ? e.literal.repr() : e.literal.to_str();
      default: return "?";
    }
  }

 public:
  TValue eval(const Expr& e) {
    step(e.pos);
    const DepthGuard guard(*this, e.pos);
    try {
      return eval_node(e);
    } catch (const BuiltinError& error) {
      fail(e.pos, error.what());
    }
  }

 private:
  TValue eval_node(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: {
        const TValue* v = find(e.name);
        if (v) return *v;
        return known_function(e.name) ? TValue::function(e.name) : TValue();
      }
      case ExprKind::kList: {
        TList items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        budget_.allocate(items.size() * sizeof(TValue));
        return e.name == "tuple" ? TValue::tuple(std::move(items)) : TValue::list(std::move(items));
      }
      case ExprKind::kDict: return eval_dict(e);
      case ExprKind::kGetAttr: {
        const TValue obj = eval(*e.args[0]);
        if (obj.is_undefined())
          fail(e.pos, fmt::format("'{}' is undefined, so it has no attribute '{}'", describe(*e.args[0]), e.name));
        return obj.get(e.name);
      }
      case ExprKind::kGetItem: return eval_getitem(e);
      case ExprKind::kSlice: return eval_slice(e);
      case ExprKind::kCall: return eval_call(e);
      case ExprKind::kMethod: {
        const TValue self = eval(*e.args[0]);
        if (self.is_undefined())
          fail(e.pos, fmt::format("'{}' is undefined, so it has no method '{}'", describe(*e.args[0]), e.name));
        return call_method(e.name, self, eval_args(e, 1), budget_);
      }
      case ExprKind::kFilter: {
        const TValue input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        if (e.missing) fail(e.pos, fmt::format("no filter named '{}' (Jinja2 has none either)", e.name));
        return apply_filter(e.name, input, args, budget_);
      }
      case ExprKind::kTest: {
        const TValue input = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        if (e.missing) fail(e.pos, fmt::format("no test named '{}' (Jinja2 has none either)", e.name));
        return TValue::boolean(apply_test(e.name, input, args) != e.negate);
      }
      case ExprKind::kNot: return TValue::boolean(!eval(*e.args[0]).truthy());
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        const TValue v = eval(*e.args[0]);
        if (!v.is_number()) fail(e.pos, fmt::format("bad operand type for unary {}: {}", e.kind == ExprKind::kNeg ? '-' : '+', v.type_name()));
        if (e.kind == ExprKind::kPos) return v.kind() == TValue::Kind::kBool ? TValue::integer(v.as_int()) : v;
        if (v.kind() == TValue::Kind::kFloat) return TValue::real(-v.as_double());
        if (v.as_int() == std::numeric_limits<std::int64_t>::min()) fail(e.pos, "integer overflow");
        return TValue::integer(-v.as_int());
      }
      case ExprKind::kBinary: return eval_binary(e);
      case ExprKind::kCompare: return eval_compare(e);
      case ExprKind::kAnd: {
        TValue a = eval(*e.args[0]);
        return a.truthy() ? eval(*e.args[1]) : a;
      }
      case ExprKind::kOr: {
        TValue a = eval(*e.args[0]);
        return a.truthy() ? a : eval(*e.args[1]);
      }
      case ExprKind::kCond:
        if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : TValue();
    }
    return TValue();
  }

  CallArgs eval_args(const Expr& e, std::size_t first) {
    CallArgs args;
    for (std::size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  TValue eval_dict(const Expr& e) {
    TDict members;
    for (std::size_t i = 0; i < e.args.size(); ++i) {
      const TValue key = eval(*e.args[i]);
      bool ok = true;
      const std::string stored = key.kind() == TValue::Kind::kBool ? std::string() : encode_key(key, ok);
      if (!ok || key.kind() == TValue::Kind::kBool)
        fail(e.args[i]->pos, fmt::format("unsupported construct: a dict key that is a {}", key.type_name()));
      TValue value = eval(*e.args2[i]);
      bool replaced = false;
      for (auto& [k, v] : members)
        if (k == stored) {
          v = value;
          replaced = true;
        }
      if (!replaced) members.emplace_back(stored, std::move(value));
    }
    budget_.allocate(members.size() * (sizeof(TValue) + 32));
    return TValue::dict(std::move(members));
  }

  TValue eval_getitem(const Expr& e) {
    const TValue obj = eval(*e.args[0]);
    const TValue key = eval(*e.args[1]);
    if (obj.is_undefined())
      fail(e.pos, fmt::format("'{}' is undefined, so it has no item {}", describe(*e.args[0]), key.repr()));
    if (obj.is_mapping()) return obj.get_key(key);
    const bool int_key = key.kind() == TValue::Kind::kInt || key.kind() == TValue::Kind::kBool;
    if (!int_key) return TValue();  // Jinja2 gives Undefined where Python raises
    if (obj.is_sequence()) {
      const auto n = static_cast<std::int64_t>(obj.items().size());
      const std::int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
      return i >= 0 && i < n ? obj.items()[static_cast<std::size_t>(i)] : TValue();
    }
    if (obj.is_string()) {
      const std::u32string u = decode_utf8(obj.str());
      const auto n = static_cast<std::int64_t>(u.size());
      const std::int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
      if (i < 0 || i >= n) return TValue();
      std::string c = encode_utf8(u.substr(static_cast<std::size_t>(i), 1));
      return obj.is_markup() ? TValue::markup(std::move(c)) : TValue::string(std::move(c));  // markupsafe wraps []
    }
    return TValue();
  }

  // Python's slice.indices and the walk it gives, negative steps included.
  TValue eval_slice(const Expr& e) {
    const TValue obj = eval(*e.args[0]);
    if (obj.is_undefined()) fail(e.pos, fmt::format("'{}' is undefined, so it cannot be sliced", describe(*e.args[0])));
    std::int64_t part[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[static_cast<std::size_t>(k) + 1]) continue;
      const TValue v = eval(*e.args[static_cast<std::size_t>(k) + 1]);
      if (v.is_none()) continue;
      if (v.kind() != TValue::Kind::kInt && v.kind() != TValue::Kind::kBool)
        fail(e.pos, fmt::format("slice indices must be integers or none, got {}", v.type_name()));
      part[k] = v.as_int();
      given[k] = true;
    }
    const std::int64_t step_by = part[2];
    if (step_by == 0) fail(e.pos, "a slice step of 0");
    const bool is_string = obj.is_string();
    if (obj.is_list() && !obj.is_sequence()) return TValue();  // generators and views: Jinja2's Undefined
    if (!is_string && !obj.is_list()) fail(e.pos, fmt::format("a {} cannot be sliced", obj.type_name()));
    const std::u32string u = is_string ? decode_utf8(obj.str()) : std::u32string();
    const auto n = static_cast<std::int64_t>(is_string ? u.size() : obj.items().size());
    const auto clamp = [&](std::int64_t v, bool is_given, std::int64_t fallback) {
      if (!is_given) return fallback;
      if (v < 0) v += n;
      if (step_by > 0) return std::clamp<std::int64_t>(v, 0, n);
      return std::clamp<std::int64_t>(v, -1, n - 1);
    };
    const std::int64_t start = clamp(part[0], given[0], step_by > 0 ? 0 : n - 1);
    const std::int64_t stop = clamp(part[1], given[1], step_by > 0 ? n : -1);
    std::u32string su;
    TList items;
    for (std::int64_t i = start; step_by > 0 ? i < stop : i > stop; i += step_by) {
      if (is_string) su.push_back(u[static_cast<std::size_t>(i)]);
      else items.push_back(obj.items()[static_cast<std::size_t>(i)]);
    }
    if (is_string) return obj.is_markup() ? TValue::markup(encode_utf8(su)) : TValue::string(encode_utf8(su));
    budget_.allocate(items.size() * sizeof(TValue));
    return obj.is_tuple() ? TValue::tuple(std::move(items)) : TValue::list(std::move(items));
  }

  TValue eval_call(const Expr& e) {
    const TValue* callee = find(e.name);
    if (callee && callee->kind() == TValue::Kind::kMacro) return call_macro(e, *callee->macro_node());
    if (callee && callee->kind() != TValue::Kind::kFunction)
      fail(e.pos, fmt::format("'{}' is a {}, not something to call", e.name, callee->type_name()));
    const std::string function = callee ? callee->str() : e.name;
    if (!known_function(function)) fail(e.pos, fmt::format("'{}' is undefined, so it cannot be called", e.name));
    CallArgs args = eval_args(e, 0);
    try {
      return call_function(function, args, budget_);
    } catch (const RaisedError& raised) {
      throw ArgumentError(where(program_.name, e.pos) + "raise_exception: " + raised.what());
    }
  }

  TValue call_macro(const Expr& e, const MacroNode& m) {
    if (depth_ >= budget_.limits().max_call_depth)
      fail(e.pos, fmt::format("macro calls nested deeper than {} (ChatTemplateLimits::max_call_depth)",
                              budget_.limits().max_call_depth));
    if (e.args.size() > m.params.size())
      fail(e.pos, fmt::format("the macro '{}' takes {} arguments, got {}", m.name, m.params.size(), e.args.size()));
    TDict frame;
    CallArgs args = eval_args(e, 0);
    for (const auto& [k, v] : args.keyword)
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end())
        fail(e.pos, fmt::format("the macro '{}' has no parameter '{}'", m.name, k));
    // Macros see their arguments and the template's top-level variables, not the caller's.
    std::vector<TDict> saved(frames_.begin() + 1, frames_.end());
    frames_.resize(1);
    frames_.emplace_back();
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      TValue v;
      bool bound = false;
      if (i < args.positional.size()) {
        v = args.positional[i];
        bound = true;
      }
      for (const auto& [k, x] : args.keyword)
        if (k == m.params[i]) {
          v = x;
          bound = true;
        }
      if (!bound && m.defaults[i]) v = eval(*m.defaults[i]);
      frames_.back().emplace_back(m.params[i], std::move(v));
    }
    ++depth_;
    std::string text;
    std::string* out = out_;
    out_ = &text;
    try {
      exec_body(m.body);
    } catch (...) {
      out_ = out;
      --depth_;
      frames_.resize(1);
      frames_.insert(frames_.end(), saved.begin(), saved.end());
      throw;
    }
    out_ = out;
    --depth_;
    frames_.resize(1);
    frames_.insert(frames_.end(), std::make_move_iterator(saved.begin()), std::make_move_iterator(saved.end()));
    budget_.allocate(text.size());
    return TValue::string(std::move(text));
  }

  TValue eval_binary(const Expr& e);
  TValue eval_compare(const Expr& e);
  bool contains(const TValue& container, const TValue& item, Pos pos);

  const TemplateProgram& program_;
  Budget budget_;
  std::vector<TDict> frames_;
  std::string* out_ = nullptr;
  int depth_ = 0;    // macro calls
  int nesting_ = 0;  // eval and exec_body frames
};

TValue Renderer::eval_binary(const Expr& e) {
  using K = TValue::Kind;
  const TValue a = eval(*e.args[0]);
  const TValue b = eval(*e.args[1]);
  const std::string& op = e.name;
  const auto type_error = [&]() {
    fail(e.pos, fmt::format("unsupported operand types for {}: {} and {}", op, a.type_name(), b.type_name()));
  };
  if (op == "~") {
    std::string s = text_of(a, e.pos) + text_of(b, e.pos);
    budget_.allocate(s.size());
    return TValue::string(std::move(s));
  }
  if (a.is_number() && b.is_number()) {
    const bool real = a.kind() == K::kFloat || b.kind() == K::kFloat;
    const double x = a.as_double(), y = b.as_double();
    const std::int64_t i = a.as_int(), j = b.as_int();
    std::int64_t r = 0;
    if (op == "+") {
      if (real) return TValue::real(x + y);
      if (__builtin_add_overflow(i, j, &r)) fail(e.pos, "integer overflow");
      return TValue::integer(r);
    }
    if (op == "-") {
      if (real) return TValue::real(x - y);
      if (__builtin_sub_overflow(i, j, &r)) fail(e.pos, "integer overflow");
      return TValue::integer(r);
    }
    if (op == "*") {
      if (real) return TValue::real(x * y);
      if (__builtin_mul_overflow(i, j, &r)) fail(e.pos, "integer overflow");
      return TValue::integer(r);
    }
    if (op == "/") {
      if (y == 0.0) fail(e.pos, "division by zero");
      return TValue::real(x / y);
    }
    if (op == "//" || op == "%") {
      if (real ? y == 0.0 : j == 0) fail(e.pos, op == "//" ? "integer division by zero" : "modulo by zero");
      if (real) {
        const double m = std::fmod(x, y);
        const double mod = (m != 0.0 && ((m < 0) != (y < 0))) ? m + y : m;
        return op == "%" ? TValue::real(mod) : TValue::real(std::floor((x - mod) / y + 0.5));
      }
      if (i == std::numeric_limits<std::int64_t>::min() && j == -1) fail(e.pos, "integer overflow");
      std::int64_t q = i / j, m = i % j;
      if (m != 0 && ((m < 0) != (j < 0))) {
        q -= 1;
        m += j;
      }
      return TValue::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (!real && j >= 0) {
        std::int64_t acc = 1;
        for (std::int64_t k = 0; k < j; ++k) {
          if (__builtin_mul_overflow(acc, i, &acc)) fail(e.pos, "integer overflow");
          if (acc == 0 || acc == 1) break;
          step(e.pos);
        }
        return TValue::integer(acc);
      }
      if (x == 0.0 && y < 0.0) fail(e.pos, "0.0 cannot be raised to a negative power");
      return TValue::real(std::pow(x, y));
    }
    type_error();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        // markupsafe: Markup + str escapes the str, and so does str + Markup (its __radd__).
        budget_.allocate(5 * (a.str().size() + b.str().size()));
        return TValue::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                              (b.is_markup() ? b.str() : html_escape(b.str())));
      }
      budget_.allocate(a.str().size() + b.str().size());
      return TValue::string(a.str() + b.str());
    }
    if (a.is_sequence() && b.is_sequence() && a.flavor() == b.flavor()) {
      budget_.allocate((a.items().size() + b.items().size()) * sizeof(TValue));
      TList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return TValue::list(std::move(items), a.flavor());
    }
    type_error();
  }
  if (op == "*" && (a.is_string() || a.is_sequence() || b.is_string() || b.is_sequence())) {
    const TValue& seq = a.is_string() || a.is_sequence() ? a : b;
    const TValue& count = &seq == &a ? b : a;
    if (count.kind() != K::kInt && count.kind() != K::kBool) type_error();
    const std::uint64_t unit = seq.is_string() ? seq.str().size() : seq.items().size() * sizeof(TValue);
    const std::int64_t n = unit == 0 ? 0 : std::max<std::int64_t>(0, count.as_int());
    if (unit > 0 && static_cast<std::uint64_t>(n) > budget_.limits().max_bytes / unit + 1)
      budget_.allocate(budget_.limits().max_bytes + 1);
    budget_.allocate(unit * static_cast<std::uint64_t>(n));
    if (seq.is_string()) {
      std::string s;
      for (std::int64_t k = 0; k < n; ++k) s += seq.str();
      return seq.is_markup() ? TValue::markup(std::move(s)) : TValue::string(std::move(s));
    }
    TList items;
    for (std::int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.items().begin(), seq.items().end());
    return TValue::list(std::move(items), seq.flavor());
  }
  if (op == "%" && a.is_string()) fail(e.pos, "unsupported construct: string formatting with '%'");
  type_error();
  return TValue();
}

bool Renderer::contains(const TValue& container, const TValue& item, Pos pos) {
  if (container.is_undefined()) return false;  // Python's `in` walks Jinja2's Undefined: nothing
  if (container.is_string()) {
    if (!item.is_string())
      fail(pos, fmt::format("'in <string>' needs a string on the left, got {}", item.type_name()));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.items())
      if (equal(x, item)) return true;
    return false;
  }
  if (container.is_mapping()) {
    if ((item.is_list() && !item.is_tuple()) || item.is_mapping())
      fail(pos, fmt::format("unhashable type: '{}'", item.type_name()));
    return !container.get_key(item).is_undefined();
  }
  fail(pos, fmt::format("'in' needs a string, a list or a dict on the right, got {}", container.type_name()));
}

TValue Renderer::eval_compare(const Expr& e) {
  TValue left = eval(*e.args[0]);
  for (std::size_t k = 0; k < e.ops.size(); ++k) {
    TValue right = eval(*e.args[k + 1]);
    const std::string& op = e.ops[k];
    bool result = false;
    if (op == "==") {
      result = equal(left, right);
    } else if (op == "!=") {
      result = !equal(left, right);
    } else if (op == "in" || op == "not in") {
      result = contains(right, left, e.pos) == (op == "in");
    } else {
      bool ok = true;
      if (op == "<") result = less(left, right, ok);
      else if (op == ">") result = less(right, left, ok);
      else if (op == "<=") result = !less(right, left, ok);
      else result = !less(left, right, ok);
      if (!ok) fail(e.pos, fmt::format("'{}' cannot order a {} and a {}", op, left.type_name(), right.type_name()));
    }
    if (!result) return TValue::boolean(false);
    left = std::move(right);
  }
  return TValue::boolean(true);
}

}  // namespace

std::string render_program(const TemplateProgram& program, const TDict& globals, const ChatTemplateLimits& limits) {
  Renderer renderer(program, limits);
  return renderer.run(globals);
}

}  // namespace recur::detail
