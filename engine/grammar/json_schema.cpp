// A JSON schema compiled into a graph of nodes (object, array, string, number, integer,
// literals, choice, reference, sequence, tagged text): JsonGrammar. json_matcher.cpp runs the
// graph over bytes (JsonMatcher).
#include "grammar/json_automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "util/check.h"
#include "util/json.h"

namespace recur {

using grammar::add_sat;
using grammar::Node;
using Frame = JsonMatcher::Frame;
using Stack = JsonMatcher::Stack;

namespace {

constexpr const char* kCall = "JsonGrammar::compile";
constexpr std::size_t kMaxProperties = 64;   // the seen-set of an object is one 64-bit word
constexpr std::uint32_t kMaxMinItems = 4096;  // minItems beyond it: refused (a prefix-cost table)


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

}  // namespace recur
