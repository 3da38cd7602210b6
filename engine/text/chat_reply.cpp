// Reading a reply back into an assistant message (recur/chat_reply.h). Each format is read by
// hand: where the text is what the model writes, a call is taken only when it parses whole, and
// everything else stays text.
#include "recur/chat_reply.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "recur/chat_template.h"
#include "recur/error.h"
#include "util/json.h"

namespace recur {

namespace {

using json::quote;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t skip_space(std::string_view s, std::size_t at) {
  while (at < s.size() && space(s[at])) ++at;
  return at;
}

std::string_view trim_left(std::string_view s) { return s.substr(skip_space(s, 0)); }

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view trim(std::string_view s) { return trim_right(trim_left(s)); }

bool starts(std::string_view s, std::size_t at, std::string_view with) {
  return s.size() - std::min(at, s.size()) >= with.size() && s.compare(at, with.size(), with) == 0;
}

// The length of the longest tail of `s` that is a proper prefix of `marker`: text that the next
// piece may turn into the marker.
std::size_t marker_tail(std::string_view s, std::string_view marker) {
  for (std::size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

std::optional<json::Value> try_parse(std::string_view text) {
  try {
    return json::parse(text, "reply");
  } catch (const FormatError&) {
    return std::nullopt;
  }
}

// The request's tools: each name with its parameters' schema (null when it has none).
struct Tools {
  json::Value root;
  std::vector<std::pair<std::string, const json::Value*>> functions;

  explicit Tools(std::string_view tools_json) {
    if (trim(tools_json).empty()) return;
    try {
      root = json::parse(tools_json, "parse_reply] [tools");
    } catch (const FormatError& e) {
      throw ArgumentError(e.what());
    }
    if (!root.is_array())
      throw ArgumentError(fmt::format("[parse_reply] tools is {}, not an array", root.kind_name()));
    for (std::size_t i = 0; i < root.array().size(); ++i) {
      const json::Value& t = root.array()[i];
      const json::Value* f = t.is_object() ? t.find("function") : nullptr;
      const json::Value* name = f && f->is_object() ? f->find("name") : nullptr;
      if (!name || !name->is_string())
        throw ArgumentError(fmt::format("[parse_reply] tools[{}] is not {{\"type\": \"function\", \"function\": "
                                        "{{\"name\": ...}}}}", i));
      const json::Value* parameters = f->find("parameters");
      functions.emplace_back(name->string(), parameters && parameters->is_object() ? parameters : nullptr);
    }
  }
  bool empty() const { return functions.empty(); }
  // Whether `name` is a tool of the request; `schema` gets its parameters' schema.
  bool find(std::string_view name, const json::Value** schema = nullptr) const {
    for (const auto& [n, p] : functions)
      if (n == name) {
        if (schema) *schema = p;
        return true;
      }
    return false;
  }
};

// The JSON types a parameter's schema allows ("type": "integer" or ["integer", "null"]); empty
// when it says none.
std::set<std::string> schema_types(const json::Value* parameters, std::string_view key) {
  std::set<std::string> types;
  const json::Value* properties = parameters ? parameters->find("properties") : nullptr;
  const json::Value* p = properties && properties->is_object() ? properties->find(key) : nullptr;
  const json::Value* type = p && p->is_object() ? p->find("type") : nullptr;
  if (type && type->is_string()) types.insert(type->string());
  if (type && type->is_array())
    for (const auto& t : type->array())
      if (t.is_string()) types.insert(t.string());
  return types;
}

// A Qwen XML parameter's value as JSON: a string unless the schema allows another type and the
// value parses as JSON of that type (Python's True, False and None too: the template writes a
// non-string value with Jinja's `| string`).
std::string typed_value(std::string_view value, const std::set<std::string>& types) {
  const auto allows = [&](const char* t) { return types.count(t) > 0; };
  const bool only_string = types.empty() || (types.size() == 1 && allows("string"));
  if (!only_string) {
    if (allows("boolean") && (value == "True" || value == "False")) return value == "True" ? "true" : "false";
    if (allows("null") && value == "None") return "null";
    if (auto parsed = try_parse(value)) {
      const bool fits = (parsed->is_integer() && (allows("integer") || allows("number"))) ||
                        (parsed->is_number() && allows("number")) || (parsed->is_bool() && allows("boolean")) ||
                        (parsed->is_null() && allows("null")) || (parsed->is_object() && allows("object")) ||
                        (parsed->is_array() && allows("array"));
      if (fits) {
        std::string out;
        json::write(*parsed, out);
        return out;
      }
    }
  }
  return quote(value);
}

struct Call {
  std::string name, arguments;
};

// Qwen's XML call at `at` (which starts with <tool_call>): the call and where it ends, or
// nothing when it does not parse whole. A value ends at the first "\n</parameter>" that the
// next parameter or the function's end follows, so that a value may hold "</parameter>".
std::optional<std::pair<Call, std::size_t>> read_xml_call(std::string_view s, std::size_t at, const Tools& tools) {
  std::size_t q = skip_space(s, at + kCallOpen.size());
  if (!starts(s, q, kFunctionOpen)) return std::nullopt;
  q += kFunctionOpen.size();
  const std::size_t name_end = s.find('>', q);
  if (name_end == std::string_view::npos || s.substr(q, name_end - q).find('\n') != std::string_view::npos)
    return std::nullopt;
  Call call{std::string(trim(s.substr(q, name_end - q))), ""};
  const json::Value* schema = nullptr;
  tools.find(call.name, &schema);
  q = name_end + 1;
  std::set<std::string> keys;
  std::string arguments = "{";
  for (;;) {
    q = skip_space(s, q);
    if (starts(s, q, kFunctionClose)) {
      q = skip_space(s, q + kFunctionClose.size());
      if (!starts(s, q, kCallClose)) return std::nullopt;
      call.arguments = arguments + "}";
      return std::make_pair(std::move(call), q + kCallClose.size());
    }
    if (!starts(s, q, kParameterOpen)) return std::nullopt;
    q += kParameterOpen.size();
    const std::size_t key_end = s.find('>', q);
    if (key_end == std::string_view::npos || s.substr(q, key_end - q).find('\n') != std::string_view::npos)
      return std::nullopt;
    const std::string key(trim(s.substr(q, key_end - q)));
    if (!keys.insert(key).second) return std::nullopt;  // a key twice is no JSON object
    q = key_end + 1;
    if (q < s.size() && s[q] == '\n') ++q;
    std::size_t end = std::string_view::npos;
    for (std::size_t e = s.find(kParameterClose, q); e != std::string_view::npos; e = s.find(kParameterClose, e + 1)) {
      const std::size_t next = skip_space(s, e + kParameterClose.size());
      if (starts(s, next, kParameterOpen) || starts(s, next, kFunctionClose)) {
        end = e;
        break;
      }
    }
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view value = s.substr(q, end - q);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    arguments += (keys.size() > 1 ? "," : "") + quote(key) + ":" + typed_value(value, schema_types(schema, key));
    q = end + kParameterClose.size();
  }
}

// A call written as JSON: {"name": ..., "arguments": {...}} ("parameters" for Llama 3's), the
// arguments an object or a string holding one.
std::optional<Call> json_call(const json::Value& v) {
  if (!v.is_object()) return std::nullopt;
  const json::Value* name = v.find("name");
  const json::Value* arguments = v.find("arguments");
  if (!arguments) arguments = v.find("parameters");
  if (!name || !name->is_string() || !arguments) return std::nullopt;
  Call call{name->string(), ""};
  if (arguments->is_object()) {
    json::write(*arguments, call.arguments);
  } else if (arguments->is_string()) {
    auto inner = try_parse(arguments->string());
    if (!inner || !inner->is_object()) return std::nullopt;
    json::write(*inner, call.arguments);
  } else {
    return std::nullopt;
  }
  return call;
}

// The JSON call inside <tool_call> tags at `at`: the first closing tag after which the body
// parses (a string argument may hold "</tool_call>").
std::optional<std::pair<Call, std::size_t>> read_tagged_call(std::string_view s, std::size_t at) {
  const std::size_t body = at + kCallOpen.size();
  for (std::size_t e = s.find(kCallClose, body); e != std::string_view::npos; e = s.find(kCallClose, e + 1)) {
    if (auto v = try_parse(trim(s.substr(body, e - body))))
      if (auto call = json_call(*v)) return std::make_pair(std::move(*call), e + kCallClose.size());
  }
  return std::nullopt;
}

// A whole reply that is one JSON value of calls: {"tool_calls": [...]}, {"tool_call": {...}} or
// one call.
std::optional<std::vector<Call>> whole_json_calls(std::string_view text) {
  auto v = try_parse(trim(text));
  if (!v || !v->is_object()) return std::nullopt;
  std::vector<Call> calls;
  if (const json::Value* list = v->find("tool_calls")) {
    if (!list->is_array() || list->array().empty()) return std::nullopt;
    for (const auto& c : list->array()) {
      auto call = json_call(c);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
  } else if (const json::Value* one = v->find("tool_call")) {
    auto call = json_call(*one);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  } else {
    auto call = json_call(*v);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kQwenXml: return "qwen-xml";
    case ToolCallFormat::kTaggedJson: return "tagged-json";
    case ToolCallFormat::kBareJson: return "bare-json";
    case ToolCallFormat::kGenericJson: return "generic-json";
  }
  return "?";
}

ReplyFormat ReplyFormat::detect(const ChatTemplate& chat) {
  // One call to a probe tool with one string argument, after a user message; each format writes
  // the tool's name in its own frame.
  static const char* const kMessages =
      R"([{"role":"user","content":"recur probe"},{"role":"assistant","content":"","tool_calls":[{"id":"call_0",)"
      R"("type":"function","function":{"name":"recur_probe_tool","arguments":{"recur_key":"recur_value"}}}]}])";
  static const char* const kTools =
      R"([{"type":"function","function":{"name":"recur_probe_tool","description":"probe",)"
      R"("parameters":{"type":"object","properties":{"recur_key":{"type":"string"}}}}}])";
  ReplyFormat format;
  std::string out;
  try {
    out = chat.render(kMessages, kTools, false);
  } catch (const Error&) {
    return format;
  }
  if (out.find("<function=recur_probe_tool>") != std::string::npos) {
    format.tool_calls = ToolCallFormat::kQwenXml;
  } else if (out.find("<tool_call>") != std::string::npos && out.find("recur_probe_tool") != std::string::npos) {
    format.tool_calls = ToolCallFormat::kTaggedJson;
    // The spaces the template writes inside the tags, around the call's JSON.
    const std::size_t open = out.rfind(kCallOpen), body = skip_space(out, open + kCallOpen.size());
    const std::size_t close = out.find(kCallClose, body);
    if (body < out.size() && out[body] == '{' && close != std::string::npos) {
      std::size_t end = close;
      while (end > body && space(out[end - 1])) --end;
      format.call_open = out.substr(open, body - open);
      format.call_close = out.substr(end, close + kCallClose.size() - end);
    }
  } else if (out.find(R"("name": "recur_probe_tool")") != std::string::npos &&
             out.find(R"("parameters")") != std::string::npos) {
    format.tool_calls = ToolCallFormat::kBareJson;
  }
  return format;
}

bool ReplyFormat::opens_thought(std::string_view prompt) const {
  const std::string_view end = trim_right(prompt);
  return (end.size() >= think_open.size() && end.substr(end.size() - think_open.size()) == think_open) ||
         opens_thought_tag(prompt);
}

bool ReplyFormat::opens_thought_tag(std::string_view prompt) const {
  if (think_open.size() < 2 || think_open.back() != '>') return false;
  const std::string_view tag = std::string_view(think_open).substr(0, think_open.size() - 1);
  return prompt.size() >= tag.size() && prompt.substr(prompt.size() - tag.size()) == tag;
}

namespace {

// The grammar of a parameter's value in Qwen's XML form, read back by typed_value().
std::vector<GrammarPiece> xml_value(const json::Value& parameters, const std::string& parameters_json,
                                    const std::string& key, const std::string& where) {
  constexpr std::string_view kEnd = "\n</parameter>\n";
  const std::set<std::string> types = schema_types(&parameters, key);
  const json::Value* properties = parameters.find("properties");
  const json::Value* p = properties && properties->is_object() ? properties->find(key) : nullptr;
  if (types.empty() || (types.size() == 1 && types.count("string"))) {
    // Read back as the raw text: a string.
    if (p && p->is_object()) {
      for (const auto& [k, v] : p->object())
        if (k == "anyOf" || k == "oneOf" || k == "$ref" || k == "properties" || k == "items" || k == "prefixItems")
          throw ArgumentError(fmt::format("{}: a parameter without a \"type\" is read back as a string in this "
                                          "template's XML calls, so '{}' cannot be enforced: give it a \"type\"", where, k));
      const json::Value* listed = p->find("enum") ? p->find("enum") : p->find("const");
      if (listed) {
        std::vector<std::vector<GrammarPiece>> options;
        const auto add = [&](const json::Value& v) {
          if (v.is_string()) options.push_back({GrammarPiece::bytes(v.string() + std::string(kEnd))});
        };
        if (listed->is_array() && p->find("enum")) {
          for (const auto& v : listed->array()) add(v);
        } else {
          add(*listed);
        }
        if (options.empty())
          throw ArgumentError(fmt::format("{}: enum or const has no string, which this template's XML calls write", where));
        return {GrammarPiece::choice(std::move(options))};
      }
    }
    return {GrammarPiece::tagged_text(std::string(kParameterClose), true), GrammarPiece::bytes("\n")};
  }
  if (types.count("string"))
    throw ArgumentError(fmt::format("{}: \"string\" among other types cannot be enforced in this template's XML "
                                    "calls (a value that reads as another type would be taken as one)", where));
  std::string pointer = "#/properties/";
  for (const char c : key) pointer += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return {GrammarPiece::schema(parameters_json, pointer), GrammarPiece::bytes(std::string(kEnd))};
}

}  // namespace

std::shared_ptr<const JsonGrammar> tool_call_grammar(const ReplyFormat& format, const ReplyOptions& options,
                                                     std::string_view only) {
  const Tools tools(options.tools_json);
  if (tools.empty()) throw ArgumentError("[tool_call_grammar] no tools to call");
  const bool xml = format.tool_calls == ToolCallFormat::kQwenXml;
  std::vector<std::vector<GrammarPiece>> calls;
  for (std::size_t i = 0; i < tools.functions.size(); ++i) {
    const auto& [name, parameters] = tools.functions[i];
    if (!only.empty() && name != only) continue;
    const std::string where = fmt::format("tools[{}].function.parameters", i);
    std::string parameters_json = R"({"type":"object","additionalProperties":false})";
    if (parameters) {
      parameters_json.clear();
      json::write(*parameters, parameters_json);
    }
    std::vector<GrammarPiece> call;
    try {
      if (xml) {
        if (name.find('>') != std::string::npos || name.find('\n') != std::string::npos)
          throw ArgumentError(fmt::format("tools[{}].function.name holds '>' or a newline, which this template's "
                                          "XML calls cannot write", i));
        call.push_back(GrammarPiece::bytes(name + ">\n"));
        const json::Value* properties = parameters ? parameters->find("properties") : nullptr;
        const json::Value* required = parameters ? parameters->find("required") : nullptr;
        std::vector<std::string> keys;
        if (required && required->is_array()) {
          if (properties && properties->is_object())
            for (const auto& [k, v] : properties->object())
              for (const auto& r : required->array())
                if (r.is_string() && r.string() == k) keys.push_back(k);
          for (const auto& r : required->array())
            if (r.is_string() && std::find(keys.begin(), keys.end(), r.string()) == keys.end()) keys.push_back(r.string());
        }
        for (const std::string& key : keys) {
          if (key.find('>') != std::string::npos || key.find('\n') != std::string::npos)
            throw ArgumentError(fmt::format("{}: the parameter '{}' holds '>' or a newline, which this template's "
                                            "XML calls cannot write", where, key));
          call.push_back(GrammarPiece::bytes(std::string(kParameterOpen) + key + ">\n"));
          for (auto& piece : xml_value(*parameters, parameters_json, key, fmt::format("{}.properties.{}", where, key)))
            call.push_back(std::move(piece));
        }
        call.push_back(GrammarPiece::bytes("</function>\n</tool_call>"));
        // Checked alone, so that an error names the tool.
        JsonGrammar::sequence(call);
      } else {
        const char* arguments = format.tool_calls == ToolCallFormat::kBareJson ? "parameters" : "arguments";
        const char* end = format.tool_calls == ToolCallFormat::kGenericJson ? "}}" : "}";
        call.push_back(GrammarPiece::bytes(quote(name).substr(1) + ",\"" + arguments + "\":"));
        call.push_back(GrammarPiece::schema(parameters_json));
        call.push_back(GrammarPiece::bytes(format.tool_calls == ToolCallFormat::kTaggedJson ? end + format.call_close
                                                                                          : std::string(end)));
        JsonGrammar::sequence(call);
      }
    } catch (const ArgumentError& e) {
      const std::string what = e.what();
      throw ArgumentError(what.rfind("tools[", 0) == 0 ? what : fmt::format("{}: {}", where, what));
    }
    calls.push_back(std::move(call));
  }
  if (calls.empty()) throw ArgumentError(fmt::format("[tool_call_grammar] no tool is named '{}'", only));
  std::vector<GrammarPiece> reply;
  if (options.in_thought) {
    reply.push_back(GrammarPiece::tagged_text(format.think_close, true));
    reply.push_back(GrammarPiece::bytes("\n\n"));
  }
  switch (format.tool_calls) {
    case ToolCallFormat::kQwenXml: reply.push_back(GrammarPiece::bytes("<tool_call>\n<function=")); break;
    case ToolCallFormat::kTaggedJson: reply.push_back(GrammarPiece::bytes(format.call_open + R"({"name":")")); break;
    case ToolCallFormat::kBareJson: reply.push_back(GrammarPiece::bytes(R"({"name":")")); break;
    case ToolCallFormat::kGenericJson: reply.push_back(GrammarPiece::bytes(R"({"tool_call":{"name":")")); break;
  }
  reply.push_back(GrammarPiece::choice(std::move(calls)));
  return JsonGrammar::sequence(reply);
}

std::string ReplyMessage::to_json() const {
  std::string out = R"({"role":"assistant","content":)";
  out += content.empty() && !tool_calls.empty() ? "null" : quote(content);
  if (has_reasoning) out += R"(,"reasoning_content":)" + quote(reasoning);
  if (!tool_calls.empty()) {
    out += R"(,"tool_calls":[)";
    for (std::size_t i = 0; i < tool_calls.size(); ++i)
      out += fmt::format(R"({}{{"id":{},"type":"function","function":{{"name":{},"arguments":{}}}}})", i ? "," : "",
                         quote(tool_calls[i].id), quote(tool_calls[i].name), quote(tool_calls[i].arguments));
    out += ']';
  }
  return out + "}";
}

ReplyMessage parse_reply(std::string_view reply, const ReplyFormat& format, const ReplyOptions& options,
                         bool partial) {
  ReplyMessage m;
  const Tools tools(options.tools_json);
  const bool calls = options.parse_tool_calls && !tools.empty();

  // The thought: from the start (the prompt opened it) or from an opening marker that begins the
  // reply, to the closing marker.
  std::string_view rest = reply;
  std::size_t thought = std::string_view::npos;
  if (options.in_thought) {
    thought = options.in_thought_tag && !reply.empty() && reply.front() == '>' ? 1 : 0;
  } else {
    const std::string_view lead = trim_left(reply);
    if (lead.substr(0, format.think_open.size()) == format.think_open) {
      thought = reply.size() - lead.size() + format.think_open.size();
    } else if (partial && !lead.empty() && lead.size() < format.think_open.size() &&
               format.think_open.compare(0, lead.size(), lead) == 0) {
      return m;  // may yet be the opening marker
    }
  }
  if (thought != std::string_view::npos) {
    m.has_reasoning = true;
    const std::size_t close = reply.find(format.think_close, thought);
    std::string_view inside = reply.substr(thought, close == std::string_view::npos ? std::string_view::npos : close - thought);
    if (close == std::string_view::npos) {
      if (partial) inside.remove_suffix(marker_tail(inside, format.think_close));
      m.reasoning = std::string(trim(inside));
      return m;
    }
    m.reasoning = std::string(trim(inside));
    rest = trim_left(reply.substr(close + format.think_close.size()));
  }

  if (!calls) {
    m.content = std::string(rest);
    return m;
  }

  std::vector<Call> found;
  if (format.tool_calls == ToolCallFormat::kBareJson || format.tool_calls == ToolCallFormat::kGenericJson) {
    // The whole reply is the calls, or none of it is.
    if (!trim(rest).empty() && trim(rest).front() == '{') {
      if (partial) return m;
      auto whole = whole_json_calls(rest);
      bool known = whole.has_value() && (options.parallel || whole->size() == 1);
      if (known)
        for (const Call& c : *whole) known = known && tools.find(c.name);
      if (known) found = std::move(*whole);
    }
    if (found.empty()) m.content = std::string(partial ? trim_right(rest) : rest);
  } else {
    std::string content;
    std::size_t p = 0;
    for (;;) {
      const std::size_t at = (!options.parallel && !found.empty()) ? std::string_view::npos : rest.find(kCallOpen, p);
      if (at == std::string_view::npos) {
        std::string_view tail = rest.substr(p);
        if (partial) tail = trim_right(tail.substr(0, tail.size() - marker_tail(tail, kCallOpen)));
        else if (!found.empty()) tail = trim_right(tail);
        content += tail;
        break;
      }
      auto call = format.tool_calls == ToolCallFormat::kQwenXml ? read_xml_call(rest, at, tools) : read_tagged_call(rest, at);
      if (call && tools.find(call->first.name)) {
        content += trim_right(rest.substr(p, at - p));
        found.push_back(std::move(call->first));
        p = call->second;
        continue;
      }
      if (partial && !call) {
        // Not whole yet, or never: hold it back until the reply ends.
        content += trim_right(rest.substr(p, at - p));
        break;
      }
      // Text: a call to a tool the request did not give, a malformed call (to its closing tag)
      // or a cut one (to the end).
      std::size_t end = call ? call->second : rest.find(kCallClose, at);
      end = end == std::string_view::npos ? rest.size() : (call ? end : end + kCallClose.size());
      content += rest.substr(p, end - p);
      p = end;
    }
    m.content = std::move(content);
  }
  for (std::size_t i = 0; i < found.size(); ++i)
    m.tool_calls.push_back({fmt::format("call_{}_{}", options.id_base, i), std::move(found[i].name),
                            std::move(found[i].arguments)});
  return m;
}

}  // namespace recur
