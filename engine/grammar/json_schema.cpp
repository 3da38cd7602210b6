// A JSON schema as a graph of nodes (object, array, string, number, integer, literals, choice,
// reference), and a matcher that runs it as a pushdown automaton over bytes: a stack of frames
// per live parse, one frame per value being written. anyOf branches that accept the same first
// byte fork the stack; a fork dies at the first byte its branch refuses.
#include "grammar/json_automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "util/check.h"
#include "util/json.h"

namespace recur {

using grammar::Node;
using Frame = JsonMatcher::Frame;
using Stack = JsonMatcher::Stack;

namespace {

constexpr const char* kCall = "JsonGrammar::compile";
constexpr std::size_t kMaxProperties = 64;   // the seen-set of an object is one 64-bit word
constexpr std::uint32_t kMaxMinItems = 4096;  // minItems beyond it: refused (a prefix-cost table)
constexpr std::size_t kMaxStacks = 64;        // live parses kept (identical ones merged)
constexpr std::uint32_t kMaxDigits = 15;      // integer and fraction digits
constexpr std::uint32_t kMaxExpDigits = 2;
constexpr std::uint32_t kAdditional = 0xFFFFFFFFu;
constexpr std::size_t kMaxAnyDepth = 32;      // nesting of objects and arrays of "any value"

std::size_t add_sat(std::size_t a, std::size_t b) {
  return a >= grammar::kInf - b ? grammar::kInf : a + b;
}

// The compact text of a JSON value: how enum and const values must be written.
void write_compact(const json::Value& v, std::string& out) {
  switch (v.kind()) {
    case json::Value::Kind::kNull: out += "null"; break;
    case json::Value::Kind::kBool: out += v.boolean() ? "true" : "false"; break;
    case json::Value::Kind::kNumber:
      out += v.is_integer() ? fmt::format("{}", v.integer()) : fmt::format("{}", v.number());
      break;
    case json::Value::Kind::kString: out += json::quote(v.string()); break;
    case json::Value::Kind::kArray:
      out += '[';
      for (std::size_t i = 0; i < v.array().size(); ++i) {
        if (i) out += ',';
        write_compact(v.array()[i], out);
      }
      out += ']';
      break;
    case json::Value::Kind::kObject:
      out += '{';
      for (std::size_t i = 0; i < v.object().size(); ++i) {
        if (i) out += ',';
        out += json::quote(v.object()[i].first);
        out += ':';
        write_compact(v.object()[i].second, out);
      }
      out += '}';
      break;
  }
}

std::string child(const std::string& path, std::string_view key) {
  std::string k;
  for (const char c : key) {
    if (c == '~') k += "~0";
    else if (c == '/') k += "~1";
    else k += c;
  }
  return path + "/" + k;
}

class Compiler {
 public:
  Compiler(const json::Value& root, std::vector<Node>& nodes) : root_(root), nodes_(nodes) {}

  int reference(const std::string& pointer, const std::string& path) {
    if (const auto it = by_pointer_.find(pointer); it != by_pointer_.end()) return it->second;
    const json::Value* target = resolve(pointer, path);
    const int alias = add(Node::kRef, pointer);
    by_pointer_[pointer] = alias;
    const int body = compile(*target, pointer);
    nodes_[std::size_t(alias)].options = {body};
    return alias;
  }

  int any_value() {
    if (any_ >= 0) return any_;
    any_ = add(Node::kChoice, "(any value)");
    const int object = add(Node::kObject, "(any object)");
    nodes_[std::size_t(object)].additional = any_;
    nodes_[std::size_t(object)].deep = true;
    const int array = add(Node::kArray, "(any array)");
    nodes_[std::size_t(array)].items = any_;
    nodes_[std::size_t(array)].deep = true;
    const int string = add(Node::kString, "(any string)");
    const int number = add(Node::kNumber, "(any number)");
    const int lit = add(Node::kLiteral, "(true, false, null)");
    nodes_[std::size_t(lit)].literals = {"false", "null", "true"};
    nodes_[std::size_t(any_)].options = {object, array, string, number, lit};
    return any_;
  }

  int any_object() {
    any_value();
    return any_ + 1;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw ArgumentError(fmt::format("[{}] {}: {}", kCall, path, what));
  }

  int add(Node::Kind kind, const std::string& path) {
    Node n;
    n.kind = kind;
    n.path = path;
    nodes_.push_back(std::move(n));
    return int(nodes_.size() - 1);
  }

  const json::Value* resolve(const std::string& pointer, const std::string& path) {
    if (pointer.empty() || pointer[0] != '#')
      fail(path, fmt::format("$ref '{}' is not in this schema (only '#' and '#/...' pointers are)", pointer));
    const json::Value* v = &root_;
    std::size_t at = 1;
    while (at < pointer.size()) {
      if (pointer[at] != '/') fail(path, fmt::format("$ref '{}' is not a JSON pointer", pointer));
      const std::size_t end = std::min(pointer.find('/', at + 1), pointer.size());
      std::string key;
      for (std::size_t i = at + 1; i < end; ++i) {
        if (pointer[i] == '~' && i + 1 < end && (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
          key += pointer[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += pointer[i];
        }
      }
      const json::Value* next = nullptr;
      if (v->is_object()) {
        next = v->find(key);
      } else if (v->is_array()) {
        char* stop = nullptr;
        const unsigned long i = std::strtoul(key.c_str(), &stop, 10);
        if (!key.empty() && *stop == 0 && i < v->array().size()) next = &v->array()[i];
      }
      if (!next) fail(path, fmt::format("$ref '{}' points at nothing", pointer));
      v = next;
      at = end;
    }
    return v;
  }

  static bool one_of(std::string_view k, std::initializer_list<std::string_view> list) {
    return std::find(list.begin(), list.end(), k) != list.end();
  }

  std::uint32_t count(const json::Value& s, const char* key, const std::string& path) {
    const json::Value* v = s.find(key);
    if (!v->is_integer() || v->integer() < 0 || v->integer() > INT32_MAX)
      fail(child(path, key), fmt::format("{} must be a non-negative integer", key));
    return std::uint32_t(v->integer());
  }

  int compile(const json::Value& s, const std::string& path) {
    if (s.is_bool()) {
      if (!s.boolean()) fail(path, "the schema false accepts nothing");
      return any_value();
    }
    if (!s.is_object()) fail(path, fmt::format("a schema must be an object or a boolean, not {}", s.kind_name()));
    // Keywords recur enforces, and annotations that assert nothing.
    for (const auto& [k, v] : s.object()) {
      if (one_of(k, {"type", "enum", "const", "properties", "required", "additionalProperties",
                     "items", "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "$ref",
                     "$defs", "definitions", "title", "description", "default", "examples",
                     "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly", "nullable"}))
        continue;
      fail(child(path, k), fmt::format("the keyword '{}' is not supported in structured output", k));
    }
    const auto assertions_beside = [&](const char* what) {
      for (const auto& [k, v] : s.object())
        if (k != what && one_of(k, {"type", "enum", "const", "properties", "required",
                                    "additionalProperties", "items", "prefixItems", "minItems",
                                    "maxItems", "anyOf", "oneOf", "$ref"}))
          fail(child(path, k), fmt::format("the keyword '{}' beside '{}' is not supported", k, what));
    };
    if (const json::Value* ref = s.find("$ref")) {
      assertions_beside("$ref");
      if (!ref->is_string()) fail(child(path, "$ref"), "$ref must be a string");
      return reference(ref->string(), child(path, "$ref"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const json::Value* list = s.find(key)) {
        assertions_beside(key);
        if (!list->is_array() || list->array().empty())
          fail(child(path, key), fmt::format("{} must be a non-empty array of schemas", key));
        const int choice = add(Node::kChoice, child(path, key));
        std::vector<int> options;
        for (std::size_t i = 0; i < list->array().size(); ++i)
          options.push_back(compile(list->array()[i], child(child(path, key), std::to_string(i))));
        nodes_[std::size_t(choice)].options = std::move(options);
        return choice;
      }
    }
    // The types this schema allows.
    std::vector<std::string> types;
    if (const json::Value* t = s.find("type")) {
      if (t->is_string()) {
        types.push_back(t->string());
      } else if (t->is_array() && !t->array().empty()) {
        for (const auto& e : t->array()) {
          if (!e.is_string()) fail(child(path, "type"), "type must be a string or an array of strings");
          types.push_back(e.string());
        }
      } else {
        fail(child(path, "type"), "type must be a string or a non-empty array of strings");
      }
      for (const auto& ty : types)
        if (!one_of(ty, {"object", "array", "string", "number", "integer", "boolean", "null"}))
          fail(child(path, "type"), fmt::format("the type '{}' is not a JSON schema type", ty));
    }
    if (const json::Value* nullable = s.find("nullable"); nullable && nullable->is_bool() && nullable->boolean() && !types.empty())
      types.push_back("null");
    const auto allows = [&](std::string_view ty) {
      return types.empty() || std::find(types.begin(), types.end(), ty) != types.end() ||
             (ty == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
    };
    // enum and const: the values themselves, of the allowed types.
    if (s.find("enum") || s.find("const")) {
      if (s.find("enum") && s.find("const")) fail(child(path, "const"), "give 'enum' or 'const', not both");
      const char* key = s.find("enum") ? "enum" : "const";
      const json::Value& v = *s.find(key);
      std::vector<const json::Value*> values;
      if (s.find("enum")) {
        if (!v.is_array() || v.array().empty()) fail(child(path, "enum"), "enum must be a non-empty array");
        for (const auto& e : v.array()) values.push_back(&e);
      } else {
        values.push_back(&v);
      }
      const int lit = add(Node::kLiteral, child(path, key));
      std::vector<std::string> literals;
      for (const json::Value* e : values) {
        const char* ty = e->is_null() ? "null" : e->is_bool() ? "boolean" : e->is_integer() ? "integer"
                         : e->is_number() ? "number" : e->is_string() ? "string" : e->is_array() ? "array" : "object";
        if (!allows(ty)) continue;
        std::string text;
        write_compact(*e, text);
        literals.push_back(std::move(text));
      }
      if (literals.empty()) fail(child(path, key), fmt::format("no value of {} has the schema's type", key));
      std::sort(literals.begin(), literals.end());
      literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
      nodes_[std::size_t(lit)].literals = std::move(literals);
      return lit;
    }
    if (types.empty()) {
      // No type: the keywords say which (anything that fits them is valid; recur writes the kind
      // they describe), and none means any value.
      const bool object = s.find("properties") || s.find("required") || s.find("additionalProperties");
      const bool array = s.find("items") || s.find("prefixItems") || s.find("minItems") || s.find("maxItems");
      if (object) types.push_back("object");
      if (array) types.push_back("array");
      if (types.empty()) return any_value();
    }
    std::vector<int> options;
    for (const auto& ty : types) {
      if (ty == "object") options.push_back(object(s, path));
      else if (ty == "array") options.push_back(array(s, path));
      else if (ty == "string") options.push_back(add(Node::kString, path));
      else if (ty == "number") options.push_back(add(Node::kNumber, path));
      else if (ty == "integer") options.push_back(add(Node::kInteger, path));
      else {
        const int lit = add(Node::kLiteral, path);
        nodes_[std::size_t(lit)].literals =
            ty == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"false", "true"};
        options.push_back(lit);
      }
    }
    if (options.size() == 1) return options[0];
    const int choice = add(Node::kChoice, child(path, "type"));
    nodes_[std::size_t(choice)].options = std::move(options);
    return choice;
  }

  int object(const json::Value& s, const std::string& path) {
    const int id = add(Node::kObject, path);
    std::vector<std::pair<std::string, int>> props;
    if (const json::Value* p = s.find("properties")) {
      if (!p->is_object()) fail(child(path, "properties"), "properties must be an object");
      for (const auto& [name, sub] : p->object()) {
        const std::string at = child(child(path, "properties"), name);
        for (const char c : name)
          if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20)
            fail(at, "a property name with a quote, a backslash or a control character is not supported");
        props.emplace_back(name, compile(sub, at));
      }
    }
    int additional = -1;
    if (const json::Value* a = s.find("additionalProperties")) {
      if (a->is_bool()) additional = a->boolean() ? any_value() : -1;
      else additional = compile(*a, child(path, "additionalProperties"));
    } else {
      additional = any_value();
    }
    std::vector<std::string> required;
    if (const json::Value* r = s.find("required")) {
      if (!r->is_array()) fail(child(path, "required"), "required must be an array of strings");
      for (const auto& e : r->array()) {
        if (!e.is_string()) fail(child(path, "required"), "required must be an array of strings");
        required.push_back(e.string());
        const bool declared = std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == e.string(); });
        if (!declared) {
          if (additional < 0)
            fail(child(path, "required"), fmt::format("'{}' is required but additionalProperties is false and properties has no '{}'",
                                                      e.string(), e.string()));
          props.emplace_back(e.string(), additional);
        }
      }
    }
    if (props.size() > kMaxProperties)
      fail(child(path, "properties"), fmt::format("{} properties, at most {} are supported", props.size(), kMaxProperties));
    std::sort(props.begin(), props.end());
    Node& n = nodes_[std::size_t(id)];
    for (std::size_t i = 0; i < props.size(); ++i) {
      n.names.push_back(props[i].first);
      n.props.push_back(props[i].second);
      if (std::find(required.begin(), required.end(), props[i].first) != required.end())
        n.required |= std::uint64_t(1) << i;
    }
    n.additional = additional;
    return id;
  }

  int array(const json::Value& s, const std::string& path) {
    const int id = add(Node::kArray, path);
    std::vector<int> prefix;
    if (const json::Value* p = s.find("prefixItems")) {
      if (!p->is_array()) fail(child(path, "prefixItems"), "prefixItems must be an array of schemas");
      for (std::size_t i = 0; i < p->array().size(); ++i)
        prefix.push_back(compile(p->array()[i], child(child(path, "prefixItems"), std::to_string(i))));
    }
    int items = -1;
    std::uint32_t max_items = std::numeric_limits<std::uint32_t>::max();
    if (const json::Value* it = s.find("items")) {
      if (it->is_array()) fail(child(path, "items"), "items as an array (draft 4 tuples) is not supported; use prefixItems");
      if (it->is_bool() && !it->boolean()) max_items = std::uint32_t(prefix.size());
      else items = compile(*it, child(path, "items"));
    } else {
      items = any_value();
    }
    std::uint32_t min_items = 0;
    if (s.find("minItems")) min_items = count(s, "minItems", path);
    if (s.find("maxItems")) max_items = std::min(max_items, count(s, "maxItems", path));
    if (min_items > kMaxMinItems)
      fail(child(path, "minItems"), fmt::format("minItems is {}, at most {} is supported", min_items, kMaxMinItems));
    if (min_items > max_items)
      fail(child(path, "minItems"), fmt::format("minItems is {} but at most {} items are allowed", min_items, max_items));
    Node& n = nodes_[std::size_t(id)];
    n.prefix = std::move(prefix);
    n.items = items;
    n.min_items = min_items;
    n.max_items = max_items;
    return id;
  }

  const json::Value& root_;
  std::vector<Node>& nodes_;
  std::map<std::string, int> by_pointer_;
  int any_ = -1;
};

// A sequence of pieces as one node (a kSequence of its parts, or the part alone). Each schema
// piece has its own compiler: its $refs point into its own text.
int compile_pieces(const std::vector<GrammarPiece>& pieces, std::vector<Node>& nodes, const std::string& path) {
  std::vector<int> parts;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const GrammarPiece& p = pieces[i];
    const std::string at = fmt::format("{}[{}]", path, i);
    const auto add = [&](Node::Kind kind) {
      Node n;
      n.kind = kind;
      n.path = at;
      nodes.push_back(std::move(n));
      parts.push_back(int(nodes.size() - 1));
      return &nodes.back();
    };
    switch (p.kind) {
      case GrammarPiece::Kind::kBytes:
        if (!p.text.empty()) add(Node::kLiteral)->literals = {p.text};
        break;
      case GrammarPiece::Kind::kSchema: {
        json::Value root;
        try {
          root = json::parse(p.text, "schema");
        } catch (const Error& e) {
          throw ArgumentError(fmt::format("[{}] {}: the schema is not JSON: {}", kCall, at, e.what()));
        }
        Compiler c(root, nodes);
        parts.push_back(c.reference(p.pointer, p.pointer));
        break;
      }
      case GrammarPiece::Kind::kText: {
        const std::string& tag = p.text;
        const bool ok = tag.size() >= 2 && tag[0] == '<' && tag.find('<', 1) == std::string::npos &&
                        tag.find('\n') == std::string::npos &&
                        std::all_of(tag.begin(), tag.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
        if (!ok)
          throw ArgumentError(fmt::format("[{}] {}: the closing tag '{}' must be printable ASCII that starts with "
                                          "its only '<'", kCall, at, tag));
        Node* n = add(Node::kText);
        n->literals = {tag};
        n->newline_before = p.newline_before;
        break;
      }
      case GrammarPiece::Kind::kChoice: {
        if (p.options.empty()) throw ArgumentError(fmt::format("[{}] {}: a choice of nothing", kCall, at));
        std::vector<int> options;
        for (std::size_t k = 0; k < p.options.size(); ++k)
          options.push_back(compile_pieces(p.options[k], nodes, fmt::format("{}/{}", at, k)));
        add(Node::kChoice)->options = std::move(options);
        break;
      }
    }
  }
  if (parts.empty()) throw ArgumentError(fmt::format("[{}] {}: an empty sequence", kCall, path));
  if (parts.size() == 1) return parts[0];
  Node n;
  n.kind = Node::kSequence;
  n.path = path;
  n.options = std::move(parts);
  nodes.push_back(std::move(n));
  return int(nodes.size() - 1);
}

// The concrete nodes a choice or reference stands for; a cycle of references with no value
// between them is refused.
void flatten(std::vector<Node>& nodes, int id, std::vector<char>& state) {
  Node& n = nodes[std::size_t(id)];
  if (state[std::size_t(id)] == 2) return;
  if (n.kind != Node::kChoice && n.kind != Node::kRef) {
    n.concrete = {id};
    state[std::size_t(id)] = 2;
    return;
  }
  if (state[std::size_t(id)] == 1)
    throw ArgumentError(fmt::format("[{}] {}: a $ref or anyOf that refers to itself with no value between", kCall, n.path));
  state[std::size_t(id)] = 1;
  std::vector<int> out;
  for (const int o : std::vector<int>(n.options)) {
    flatten(nodes, o, state);
    for (const int c : nodes[std::size_t(o)].concrete)
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  nodes[std::size_t(id)].concrete = std::move(out);
  state[std::size_t(id)] = 2;
}

void finish_grammar(grammar::Grammar& g) {
  std::vector<char> state(g.nodes.size(), 0);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) flatten(g.nodes, int(i), state);
  // The fewest bytes of each node's value, to a fixed point (recursion through $ref).
  auto& nodes = g.nodes;
  const auto item = [&](const Node& n, std::size_t i) { return i < n.prefix.size() ? n.prefix[i] : n.items; };
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& n : nodes) {
      std::size_t m = grammar::kInf;
      switch (n.kind) {
        case Node::kObject: {
          m = 2;
          int k = 0;
          for (std::size_t i = 0; i < n.names.size(); ++i)
            if (n.required >> i & 1) {
              m = add_sat(m, add_sat(n.names[i].size() + 3 + (k++ ? 1 : 0), nodes[std::size_t(n.props[i])].min_len));
            }
          break;
        }
        case Node::kArray:
          m = 2 + (n.min_items ? n.min_items - 1 : 0);
          for (std::size_t i = 0; i < n.min_items; ++i) m = add_sat(m, nodes[std::size_t(item(n, i))].min_len);
          break;
        case Node::kString: m = 2; break;
        case Node::kNumber:
        case Node::kInteger: m = 1; break;
        case Node::kLiteral:
          for (const auto& l : n.literals) m = std::min(m, l.size());
          break;
        case Node::kChoice:
        case Node::kRef:
          for (const int o : n.concrete) m = std::min(m, nodes[std::size_t(o)].min_len);
          break;
        case Node::kSequence:
          m = 0;
          for (const int o : n.options) m = add_sat(m, nodes[std::size_t(o)].min_len);
          break;
        case Node::kText: m = n.literals[0].size() + (n.newline_before ? 1 : 0); break;
      }
      if (m < n.min_len) {
        n.min_len = m;
        changed = true;
      }
    }
  }
  std::size_t largest = 0, longest_name = 0;
  for (Node& n : nodes) {
    if (n.min_len >= grammar::kInf)
      throw ArgumentError(fmt::format("[{}] {}: no finite JSON value satisfies this schema (a required "
                                      "property or item that contains itself)", kCall, n.path));
    largest = std::max(largest, n.min_len);
    for (const auto& name : n.names) longest_name = std::max(longest_name, name.size());
    if (n.kind == Node::kObject)
      for (std::size_t i = 0; i < n.names.size(); ++i)
        n.cost.push_back(n.names[i].size() + 3 + nodes[std::size_t(n.props[i])].min_len);
    if (n.kind == Node::kArray) {
      // tail[i]: the bytes of items i .. min_items-1, each with its comma.
      n.tail.assign(n.min_items + 1, 0);
      for (std::size_t i = n.min_items; i-- > 0;) n.tail[i] = n.tail[i + 1] + 1 + nodes[std::size_t(item(n, i))].min_len;
    }
  }
  g.growth = 2 * largest + 2 * longest_name + 16;
}

// ---- The automaton ----

enum FrameKind : std::uint8_t { kValue, kObjectFrame, kArrayFrame, kStringFrame, kNumberFrame, kLiteralFrame,
                                kSequenceFrame, kTextFrame };
// A text frame's phase bits: the last byte was a newline; the byte before the tag's partial
// match (its c bytes so far) was a newline.
enum : std::uint8_t { kLastNewline = 1, kNewlineBeforeMatch = 2 };
enum : std::uint8_t { kOpen, kFirst, kKeyStart, kKey, kColon, kAfter, kNext };  // objects, arrays
enum : std::uint8_t { kBody = 1, kEscape, kHex };                               // strings
enum : std::uint8_t { kSign = 1, kZero, kInt, kFrac0, kFrac, kExp0, kExpSign, kExp };  // numbers

Frame value_frame(int node) {
  Frame f;
  f.node = node;
  f.kind = kValue;
  return f;
}

Frame open(const grammar::Grammar& g, int node) {
  Frame f;
  f.node = node;
  const Node& n = g.nodes[std::size_t(node)];
  switch (n.kind) {
    case Node::kObject: f.kind = kObjectFrame; break;
    case Node::kArray: f.kind = kArrayFrame; break;
    case Node::kString: f.kind = kStringFrame; break;
    case Node::kNumber:
    case Node::kInteger: f.kind = kNumberFrame; break;
    case Node::kSequence: f.kind = kSequenceFrame; break;
    case Node::kText: f.kind = kTextFrame; break;
    default:
      f.kind = kLiteralFrame;
      f.a = 0;
      f.b = std::uint32_t(n.literals.size());
      break;
  }
  return f;
}

bool utf8_byte(Frame& f, unsigned char c);
enum class TextStep { kRefused, kTaken, kClosed };
TextStep text_byte(const Node& n, Frame& f, unsigned char c);

bool starts(const grammar::Grammar& g, int node, unsigned char c) {
  const Node& n = g.nodes[std::size_t(node)];
  switch (n.kind) {
    case Node::kSequence:
      for (const int o : g.nodes[std::size_t(n.options[0])].concrete)
        if (starts(g, o, c)) return true;
      return false;
    case Node::kText: {
      Frame f = open(g, node);
      return text_byte(n, f, c) != TextStep::kRefused;
    }
    case Node::kObject: return c == '{';
    case Node::kArray: return c == '[';
    case Node::kString: return c == '"';
    case Node::kNumber:
    case Node::kInteger: return c == '-' || (c >= '0' && c <= '9');
    default:
      for (const auto& l : n.literals)
        if (static_cast<unsigned char>(l[0]) == c) return true;
      return false;
  }
}

// UTF-8: a lead byte sets how many continuation bytes follow and the range of the next one
// (which rules out overlong forms and surrogates); returns false for a byte that cannot lead.
bool utf8_byte(Frame& f, unsigned char c) {
  if (f.utf8_need) {
    if (c < f.utf8_lo || c > f.utf8_hi) return false;
    --f.utf8_need;
    f.utf8_lo = 0x80;
    f.utf8_hi = 0xBF;
    return true;
  }
  if (c < 0x80) return true;
  f.utf8_lo = 0x80;
  f.utf8_hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) f.utf8_need = 1;
  else if (c == 0xE0) f.utf8_need = 2, f.utf8_lo = 0xA0;
  else if (c == 0xED) f.utf8_need = 2, f.utf8_hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) f.utf8_need = 2;
  else if (c == 0xF0) f.utf8_need = 3, f.utf8_lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) f.utf8_need = 3;
  else if (c == 0xF4) f.utf8_need = 3, f.utf8_hi = 0x8F;
  else return false;
  return true;
}

std::uint64_t all_names(const Node& n) {
  return n.names.size() == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << n.names.size()) - 1;
}
bool can_add_key(const Node& n, const Frame& f) { return n.additional >= 0 || (f.seen & all_names(n)) != all_names(n); }
bool required_done(const Node& n, const Frame& f) { return (f.seen & n.required) == n.required; }

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// One byte of a tagged text: the tag's first byte appears once in it, so a broken partial match
// starts over at this byte.
TextStep text_byte(const Node& n, Frame& f, unsigned char c) {
  const std::string& tag = n.literals[0];
  if (f.utf8_need) return utf8_byte(f, c) ? TextStep::kTaken : TextStep::kRefused;
  const bool newline = f.phase & kLastNewline;
  if (f.c > 0 && c == static_cast<unsigned char>(tag[f.c])) {
    if (++f.c < tag.size()) {
      f.phase &= std::uint8_t(~kLastNewline);
      return TextStep::kTaken;
    }
    // The whole tag: the text ends, if the tag may come here (else the text would hold it).
    return !n.newline_before || (f.phase & kNewlineBeforeMatch) ? TextStep::kClosed : TextStep::kRefused;
  }
  f.c = 0;
  if (c == static_cast<unsigned char>(tag[0])) {
    f.c = 1;
    f.phase = newline ? std::uint8_t(kNewlineBeforeMatch) : std::uint8_t(0);
    return TextStep::kTaken;
  }
  if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return TextStep::kRefused;
  if (c == 0x7F || !utf8_byte(f, c)) return TextStep::kRefused;
  f.phase = c == '\n' ? std::uint8_t(kLastNewline) : std::uint8_t(0);
  return TextStep::kTaken;
}

// The fewest bytes that end a tagged text from frame f.
std::size_t text_cost(const Node& n, const Frame& f) {
  const std::size_t tag = n.literals[0].size();
  if (f.c > 0 && (!n.newline_before || (f.phase & kNewlineBeforeMatch))) return tag - f.c;
  const bool newline = f.c == 0 && (f.phase & kLastNewline);
  return std::size_t(f.utf8_need) + (n.newline_before && !newline ? 1 : 0) + tag;
}

bool accepting(const grammar::Grammar& g, const Frame& f) {
  if (f.kind == kNumberFrame) return f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExp;
  if (f.kind == kLiteralFrame) {
    const auto& lits = g.nodes[std::size_t(f.node)].literals;
    return f.a < f.b && lits[f.a].size() == f.c;
  }
  return false;
}

// Feeds one byte to one parse. Returns whether it lives; parses that branch off (anyOf) are
// appended to `forks`.
bool step(const grammar::Grammar& g, Stack& s, unsigned char c, std::vector<Stack>& forks) {
  for (;;) {
    if (s.empty()) return false;
    Frame& f = s.back();
    const Node& n = g.nodes[std::size_t(f.node)];
    switch (f.kind) {
      case kValue: {
        const auto& opts = n.concrete;
        // An object or array of "any value" opens only below kMaxAnyDepth (a scalar may always
        // take its place, so no parse is left without a way on).
        const auto usable = [&](int o) {
          return starts(g, o, c) && !(g.nodes[std::size_t(o)].deep && s.size() > kMaxAnyDepth);
        };
        for (std::size_t k = 1; k < opts.size(); ++k) {
          if (!usable(opts[k])) continue;
          Stack copy = s;
          copy.back() = open(g, opts[k]);
          if (step(g, copy, c, forks)) forks.push_back(std::move(copy));
        }
        if (!usable(opts[0])) return false;
        f = open(g, opts[0]);
        continue;
      }
      case kObjectFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '{') return false;
            f.phase = kFirst;
            return true;
          case kFirst:
          case kAfter:
            if (c == '}') {
              if (!required_done(n, f)) return false;
              s.pop_back();
              return true;
            }
            if (f.phase == kAfter) {
              if (c != ',' || !can_add_key(n, f)) return false;
              f.phase = kKeyStart;
              return true;
            }
            [[fallthrough]];
          case kKeyStart:
            if (c != '"' || !can_add_key(n, f)) return false;
            f.phase = kKey;
            f.a = 0;
            f.b = std::uint32_t(n.names.size());
            f.c = 0;
            return true;
          case kKey: {
            if (c == '"' && !f.utf8_need) {
              const bool exact = f.a < f.b && n.names[f.a].size() == f.c;
              if (exact && !(f.seen >> f.a & 1)) {
                f.seen |= std::uint64_t(1) << f.a;
              } else if (n.additional >= 0 && !exact) {
                f.a = kAdditional;
              } else {
                return false;
              }
              f.phase = kColon;
              return true;
            }
            if (!f.utf8_need && (c < 0x20 || c == '\\' || c == '"')) return false;
            Frame t = f;
            if (!utf8_byte(t, c)) return false;
            // Narrow the names that begin with the key so far.
            std::uint32_t lo = t.a, hi = t.a;
            for (std::uint32_t i = t.a; i < t.b; ++i) {
              const std::string& name = n.names[i];
              const bool match = name.size() > t.c && static_cast<unsigned char>(name[t.c]) == c;
              if (match) {
                if (lo == hi) lo = i;
                hi = i + 1;
              }
            }
            if (lo == hi) lo = hi = t.b;
            if (n.additional < 0) {
              bool open_name = false;
              for (std::uint32_t i = lo; i < hi && !open_name; ++i) open_name = !(t.seen >> i & 1);
              if (!open_name) return false;
            }
            t.a = lo;
            t.b = hi;
            ++t.c;
            f = t;
            return true;
          }
          case kColon: {
            if (c != ':') return false;
            f.phase = kAfter;
            const int value = f.a == kAdditional ? n.additional : n.props[f.a];
            s.push_back(value_frame(value));
            return true;
          }
          default: return false;
        }
      case kArrayFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '[') return false;
            f.phase = kFirst;
            return true;
          case kFirst:
            if (c == ']') {
              if (n.min_items > 0) return false;
              s.pop_back();
              return true;
            }
            if (n.max_items == 0) return false;
            [[fallthrough]];
          case kNext: {
            const std::uint32_t i = f.a;
            f.phase = kAfter;
            ++f.a;
            s.push_back(value_frame(i < n.prefix.size() ? n.prefix[i] : n.items));
            continue;
          }
          case kAfter:
            if (c == ',') {
              if (f.a >= n.max_items) return false;
              f.phase = kNext;
              return true;
            }
            if (c == ']' && f.a >= n.min_items) {
              s.pop_back();
              return true;
            }
            return false;
          default: return false;
        }
      case kStringFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '"') return false;
            f.phase = kBody;
            return true;
          case kBody:
            if (!f.utf8_need) {
              if (c == '"') {
                s.pop_back();
                return true;
              }
              if (c == '\\') {
                f.phase = kEscape;
                return true;
              }
              if (c < 0x20) return false;
            }
            return utf8_byte(f, c);
          case kEscape:
            if (c == 'u') {
              f.phase = kHex;
              f.a = 4;
              return true;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
              f.phase = kBody;
              return true;
            }
            return false;
          case kHex:
            if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
            if (--f.a == 0) f.phase = kBody;
            return true;
          default: return false;
        }
      case kNumberFrame: {
        const bool integer = n.kind == Node::kInteger;
        switch (f.phase) {
          case kOpen:
          case kSign:
            if (c == '-' && f.phase == kOpen) {
              f.phase = kSign;
              return true;
            }
            if (c == '0') {
              f.phase = kZero;
              return true;
            }
            if (is_digit(c)) {
              f.phase = kInt;
              f.a = 1;
              return true;
            }
            return false;
          case kInt:
            if (is_digit(c) && f.a < kMaxDigits) {
              ++f.a;
              return true;
            }
            [[fallthrough]];
          case kZero:
            if (!integer && c == '.') {
              f.phase = kFrac0;
              return true;
            }
            if (!integer && (c == 'e' || c == 'E')) {
              f.phase = kExp0;
              return true;
            }
            break;  // the number ends before c
          case kFrac0:
          case kFrac:
            if (is_digit(c) && (f.phase == kFrac0 || f.a < kMaxDigits)) {
              f.a = f.phase == kFrac0 ? 1 : f.a + 1;
              f.phase = kFrac;
              return true;
            }
            if (f.phase == kFrac0) return false;
            if (c == 'e' || c == 'E') {
              f.phase = kExp0;
              return true;
            }
            break;
          case kExp0:
          case kExpSign:
            if ((c == '+' || c == '-') && f.phase == kExp0) {
              f.phase = kExpSign;
              return true;
            }
            if (!is_digit(c)) return false;
            f.phase = kExp;
            f.a = 1;
            return true;
          case kExp:
            if (is_digit(c) && f.a < kMaxExpDigits) {
              ++f.a;
              return true;
            }
            break;
          default: return false;
        }
        s.pop_back();  // a whole number: c belongs to what holds it
        continue;
      }
      case kSequenceFrame: {
        // The next part; the last one takes the sequence's place.
        const std::uint32_t i = f.a;
        if (std::size_t(i) + 1 == n.options.size()) {
          f = value_frame(n.options[i]);
          continue;
        }
        ++f.a;
        s.push_back(value_frame(n.options[i]));
        continue;
      }
      case kTextFrame:
        switch (text_byte(n, f, c)) {
          case TextStep::kRefused: return false;
          case TextStep::kTaken: return true;
          case TextStep::kClosed: s.pop_back(); return true;
        }
        return false;
      case kLiteralFrame: {
        const auto& lits = n.literals;
        // The literals in [a, b) share their first c bytes and are sorted: those with c next are
        // one run, found by binary search (an enum may hold thousands).
        const auto first = lits.begin() + std::ptrdiff_t(f.a), last = lits.begin() + std::ptrdiff_t(f.b);
        const auto byte_at = [&](const std::string& l) { return l.size() > f.c ? int(static_cast<unsigned char>(l[f.c])) : -1; };
        const auto run_lo = std::partition_point(first, last, [&](const std::string& l) { return byte_at(l) < int(c); });
        const auto run_hi = std::partition_point(run_lo, last, [&](const std::string& l) { return byte_at(l) == int(c); });
        const auto lo = std::uint32_t(run_lo - lits.begin()), hi = std::uint32_t(run_hi - lits.begin());
        if (lo == hi) {
          if (!accepting(g, f)) return false;
          s.pop_back();
          continue;
        }
        f.a = lo;
        f.b = hi;
        ++f.c;
        if (hi - lo == 1 && lits[lo].size() == f.c) s.pop_back();
        return true;
      }
      default: return false;
    }
  }
}

// The fewest bytes that finish this frame once the value it holds (the frame above it) is done.
std::size_t frame_cost(const grammar::Grammar& g, const Frame& f) {
  const Node& n = g.nodes[std::size_t(f.node)];
  const auto missing = [&](std::uint64_t seen, std::size_t& count) {
    std::size_t sum = 0;
    count = 0;
    const std::uint64_t m = n.required & ~seen;
    for (std::size_t i = 0; i < n.names.size(); ++i)
      if (m >> i & 1) {
        sum += n.cost[i];
        ++count;
      }
    return sum;
  };
  switch (f.kind) {
    case kValue: return n.min_len;
    case kObjectFrame: {
      std::size_t m = 0;
      const std::size_t sum = missing(f.seen, m);
      switch (f.phase) {
        case kOpen: return n.min_len;
        case kFirst: return sum + (m ? m - 1 : 0) + 1;
        case kAfter: return sum + m + 1;
        case kColon: {
          const int value = f.a == kAdditional ? n.additional : n.props[f.a];
          return 1 + g.nodes[std::size_t(value)].min_len + sum + m + 1;
        }
        case kKeyStart: {
          if (m) return sum + m;  // the first without a comma, and '}'
          std::size_t best = grammar::kInf;
          if (n.additional >= 0) best = 3 + g.nodes[std::size_t(n.additional)].min_len;
          for (std::size_t i = 0; i < n.names.size(); ++i)
            if (!(f.seen >> i & 1)) best = std::min(best, n.cost[i]);
          return best + 1;
        }
        case kKey: {
          std::size_t best = grammar::kInf;
          for (std::uint32_t i = f.a; i < f.b; ++i) {
            if (f.seen >> i & 1) continue;
            std::size_t mi = 0;
            const std::size_t rest = missing(f.seen | (std::uint64_t(1) << i), mi);
            const std::size_t c = n.names[i].size() - f.c + 2 + g.nodes[std::size_t(n.props[i])].min_len + rest + mi + 1;
            best = std::min(best, c);
          }
          if (n.additional >= 0) {
            const bool seen_exact = f.a < f.b && n.names[f.a].size() == f.c && !f.utf8_need;
            const std::size_t c = f.utf8_need + (seen_exact ? 1 : 0) + 2 +
                                  g.nodes[std::size_t(n.additional)].min_len + sum + m + 1;
            best = std::min(best, c);
          }
          return best;
        }
        default: return 0;
      }
    }
    case kArrayFrame:
      switch (f.phase) {
        case kOpen: return n.min_len;
        case kFirst: return n.min_items ? n.tail[0] : 1;  // tail counts a comma per item: one is ']'
        case kAfter: return (f.a < n.min_items ? n.tail[f.a] : 0) + 1;
        case kNext: {
          const int item = f.a < n.prefix.size() ? n.prefix[f.a] : n.items;
          return g.nodes[std::size_t(item)].min_len + (f.a + 1 < n.min_items ? n.tail[f.a + 1] : 0) + 1;
        }
        default: return 0;
      }
    case kStringFrame:
      switch (f.phase) {
        case kOpen: return 2;
        case kBody: return std::size_t(f.utf8_need) + 1;
        case kEscape: return 2;
        default: return std::size_t(f.a) + 1;
      }
    case kNumberFrame: return accepting(g, f) ? 0 : 1;
    case kSequenceFrame: {
      std::size_t sum = 0;
      for (std::size_t i = f.a; i < n.options.size(); ++i) sum = add_sat(sum, g.nodes[std::size_t(n.options[i])].min_len);
      return sum;
    }
    case kTextFrame: return text_cost(n, f);
    case kLiteralFrame: {
      std::size_t best = grammar::kInf;
      for (std::uint32_t i = f.a; i < f.b; ++i) best = std::min(best, g.nodes[std::size_t(f.node)].literals[i].size() - f.c);
      return best;
    }
    default: return 0;
  }
}

}  // namespace

// ---- JsonGrammar ----

JsonGrammar::JsonGrammar() : impl_(std::make_unique<Impl>()) {}
JsonGrammar::~JsonGrammar() = default;

std::shared_ptr<const JsonGrammar> JsonGrammar::compile(std::string_view schema) {
  json::Value root;
  try {
    root = json::parse(schema, "schema");
  } catch (const Error& e) {
    throw ArgumentError(fmt::format("[{}] the schema is not JSON: {}", kCall, e.what()));
  }
  std::shared_ptr<JsonGrammar> g(new JsonGrammar());
  Compiler c(root, g->impl_->g.nodes);
  g->impl_->g.root = c.reference("#", "#");
  finish_grammar(g->impl_->g);
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  std::shared_ptr<JsonGrammar> g(new JsonGrammar());
  json::Value none;
  Compiler c(none, g->impl_->g.nodes);
  g->impl_->g.root = c.any_object();
  finish_grammar(g->impl_->g);
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::sequence(const std::vector<GrammarPiece>& pieces) {
  std::shared_ptr<JsonGrammar> g(new JsonGrammar());
  g->impl_->g.root = compile_pieces(pieces, g->impl_->g.nodes, "sequence");
  finish_grammar(g->impl_->g);
  return g;
}

std::size_t JsonGrammar::min_bytes() const { return impl_->g.nodes[std::size_t(impl_->g.root)].min_len; }

// ---- JsonMatcher ----

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  if (!grammar_) detail::throw_argument("JsonMatcher", "grammar is null");
  stacks_.push_back(Stack{value_frame(grammar_->impl().g.root)});
}

bool JsonMatcher::advance(unsigned char byte) {
  const grammar::Grammar& g = grammar_->impl().g;
  std::size_t live = 0;
  std::vector<Stack> forks;
  for (const Stack& s : stacks_) {
    if (next_.size() <= live) next_.emplace_back();
    Stack& t = next_[live];
    t = s;
    if (step(g, t, byte, forks)) ++live;
  }
  for (Stack& f : forks) {
    if (next_.size() <= live) next_.emplace_back();
    next_[live++] = std::move(f);
  }
  if (live == 0) return false;
  // Identical parses (two branches that have become the same) are one.
  if (live > 1) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < live; ++i) {
      bool dup = false;
      for (std::size_t j = 0; j < kept && !dup; ++j) dup = grammar::same(next_[i], next_[j]);
      if (!dup && kept < kMaxStacks) {
        if (kept != i) std::swap(next_[kept], next_[i]);
        ++kept;
      }
    }
    live = kept;
  }
  std::swap(stacks_, next_);
  stacks_.resize(live);
  return true;
}

bool JsonMatcher::advance(std::string_view bytes) {
  const std::vector<Stack> saved = stacks_;
  for (const char c : bytes)
    if (!advance(static_cast<unsigned char>(c))) {
      stacks_ = saved;
      return false;
    }
  return true;
}

bool JsonMatcher::complete() const {
  const grammar::Grammar& g = grammar_->impl().g;
  for (const Stack& s : stacks_)
    if (s.empty() || (s.size() == 1 && accepting(g, s.back()))) return true;
  return false;
}

bool JsonMatcher::finished() const {
  for (const Stack& s : stacks_)
    if (!s.empty()) return false;
  return true;
}

std::size_t JsonMatcher::min_close() const {
  const grammar::Grammar& g = grammar_->impl().g;
  std::size_t best = grammar::kInf;
  for (const Stack& s : stacks_) {
    std::size_t sum = 0;
    for (const Frame& f : s) sum = add_sat(sum, frame_cost(g, f));
    best = std::min(best, sum);
  }
  return best;
}

bool JsonMatcher::in_plain_string() const {
  if (stacks_.size() != 1 || stacks_[0].empty()) return false;
  const Frame& f = stacks_[0].back();
  if (f.kind == kTextFrame) return f.c == 0 && f.phase == 0 && f.utf8_need == 0;
  return f.kind == kStringFrame && f.phase == kBody && f.utf8_need == 0;
}

bool json_grammar_accepts(const std::shared_ptr<const JsonGrammar>& grammar, std::string_view text) {
  JsonMatcher m(grammar);
  return m.advance(text) && m.complete();
}

}  // namespace recur
