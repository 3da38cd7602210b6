// ChatTemplate: where a model's template comes from, and the variables transformers renders it
// with (messages, tools, documents, add_generation_prompt, the special tokens).
#include "recur/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "recur/error.h"
#include "text/template_ast.h"
#include "text/template_eval.h"
#include "util/file.h"
#include "util/json.h"

namespace recur {

namespace {

constexpr std::uint64_t kMaxFileBytes = std::uint64_t(64) << 20;
// The special tokens transformers passes to the template (its SPECIAL_TOKENS_ATTRIBUTES).
constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

std::optional<std::string> read_optional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  auto text = detail::read_file(path.string(), kMaxFileBytes);
  if (!text)
    throw FormatError(fmt::format("[ChatTemplate::load] {}: cannot read the file (not a regular file, or over {} bytes)",
                                  path.string(), kMaxFileBytes));
  return text;
}

// A token as tokenizer_config.json writes it: a string, or an AddedToken object with "content".
std::optional<std::string> token_text(const json::Value& v) {
  if (v.is_string()) return v.string();
  if (v.is_object())
    if (const json::Value* c = v.find("content"); c && c->is_string()) return c->string();
  return std::nullopt;
}

// Request JSON is the caller's argument: its errors are ArgumentErrors.
json::Value parse_argument(std::string_view text, const char* what) {
  try {
    return json::parse(text, std::string("ChatTemplate::render] [") + what);
  } catch (const FormatError& e) {
    throw ArgumentError(e.what());
  }
}

// A message's content as the template is given it: a string as it is; a list of parts as the
// list when `as_list`, else its texts joined with "\n". Only text parts are taken, whichever way
// they are passed: recur's models read text, and a template given an image part would write its
// placeholder (<start_of_image>) for an image the model never sees.
detail::TValue content_value(const json::Value& content, std::size_t i, bool as_list) {
  if (content.is_string() || content.is_null()) return detail::TValue::from_json(content);
  if (!content.is_array())
    throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}].content is {}, not a string, "
                                    "an array of parts or null", i, content.kind_name()));
  std::string text;
  for (std::size_t p = 0; p < content.array().size(); ++p) {
    const json::Value& part = content.array()[p];
    const json::Value* type = part.is_object() ? part.find("type") : nullptr;
    const json::Value* body = part.is_object() ? part.find("text") : nullptr;
    if (type && type->is_string() && type->string() != "text")
      throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}].content[{}] is of type '{}': only "
                                      "text parts are taken ({{\"type\": \"text\", \"text\": ...}}); "
                                      "images, audio and files cannot be given to recur's models",
                                      i, p, type->string()));
    if (!type || !type->is_string() || !body || !body->is_string())
      throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}].content[{}] is not a text part "
                                      "({{\"type\": \"text\", \"text\": ...}})", i, p));
    text += (p ? "\n" : "") + body->string();
  }
  if (as_list) return detail::TValue::from_json(content);
  return detail::TValue::string(std::move(text));
}

// The variables transformers renders with, but `messages`, which the caller puts first.
detail::TDict base_globals(detail::TValue tools, bool add_generation_prompt,
                           const std::map<std::string, std::string>& special_tokens,
                           const std::string& additional_json) {
  detail::TDict globals = {{"tools", std::move(tools)},
                           {"documents", detail::TValue::none()},
                           {"add_generation_prompt", detail::TValue::boolean(add_generation_prompt)}};
  for (const auto& [k, v] : special_tokens) globals.emplace_back(k, detail::TValue::string(v));
  if (!additional_json.empty())
    globals.emplace_back("additional_special_tokens",
                         detail::TValue::from_json(json::parse(additional_json, "ChatTemplate] [additional_special_tokens")));
  return globals;
}

// The probe's text: plain ASCII, so that Python's repr and tojson print it as it is.
constexpr std::string_view kProbeMarker = "recur-content-parts-probe";

// Whether `program` walks a list of content parts (ChatTemplate::content_parts). The probe is
// one user message whose content is one text part holding the marker, with the generation
// prompt. A template that prints the list itself (`{{ message.content }}` is Python's repr,
// `| tojson` is JSON) shows the marker too, but as the quoted value of a key, `'text':
// 'marker'` or `"text":"marker"`: those occurrences do not count. A template that fails on a
// list (a `+` of a string and a list) does not walk parts.
bool walks_parts(const detail::TemplateProgram& program, const std::map<std::string, std::string>& special_tokens,
                 const std::string& additional_json, const ChatTemplateLimits& limits) {
  detail::TDict part = {{"type", detail::TValue::string("text")},
                        {"text", detail::TValue::string(std::string(kProbeMarker))}};
  detail::TDict message = {{"role", detail::TValue::string("user")},
                           {"content", detail::TValue::list({detail::TValue::dict(std::move(part))})}};
  std::string out;
  try {
    detail::TDict globals = base_globals(detail::TValue::none(), true, special_tokens, additional_json);
    globals.insert(globals.begin(), {"messages", detail::TValue::list({detail::TValue::dict(std::move(message))})});
    // A probe is a few thousand steps for a real template; these bounds keep one that loops
    // from slowing every load.
    ChatTemplateLimits bounded = limits;
    bounded.max_steps = std::min<std::uint64_t>(bounded.max_steps, 200'000);
    bounded.max_bytes = std::min<std::uint64_t>(bounded.max_bytes, std::uint64_t(1) << 20);
    bounded.max_allocated_bytes = std::min<std::uint64_t>(bounded.max_allocated_bytes, std::uint64_t(32) << 20);
    out = detail::render_program(program, globals, bounded);
  } catch (const Error&) {
    return false;
  }
  for (std::size_t at = out.find(kProbeMarker); at != std::string::npos; at = out.find(kProbeMarker, at + 1)) {
    // Back over the opening quote and any spaces: a ':' there makes it a printed value.
    std::size_t k = at;
    if (k > 0 && (out[k - 1] == '\'' || out[k - 1] == '"')) {
      --k;
      while (k > 0 && out[k - 1] == ' ') --k;
      if (k > 0 && out[k - 1] == ':') continue;
    }
    return true;
  }
  return false;
}

}  // namespace

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(std::string_view source, const std::string& name) {
  ChatTemplate t;
  t.default_ = detail::parse_template(source, name);
  t.probe_content_parts();
  return t;
}

const std::string& ChatTemplate::name() const {
  return default_ ? default_->name : tool_use_->name;
}

ChatTemplate ChatTemplate::load(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw FormatError(fmt::format("[ChatTemplate::load] {}: not a directory", model_dir));
  ChatTemplate t;
  std::optional<json::Value> config;
  const auto config_path = dir / "tokenizer_config.json";
  if (auto text = read_optional(config_path)) {
    config = json::parse(*text, "ChatTemplate::load] " + config_path.string() + ": [json");
    if (!config->is_object())
      throw FormatError(fmt::format("[ChatTemplate::load] {}: not a JSON object", config_path.string()));
    for (const char* key : kSpecialTokens)
      if (const json::Value* v = config->find(key))
        if (auto s = token_text(*v)) t.special_tokens_[key] = *s;
    if (const json::Value* extra = config->find("additional_special_tokens"); extra && extra->is_array()) {
      std::string list = "[";
      for (const auto& e : extra->array())
        if (auto s = token_text(e)) list += (list.size() > 1 ? "," : "") + json::quote(*s);
      t.additional_json_ = list + "]";
    }
  }
  // Where transformers looks: chat_template.jinja first, then chat_template.json, then the
  // tokenizer's config.
  const auto read_entry = [&](const json::Value& v, const std::string& where) {
    if (v.is_string()) {
      t.default_ = detail::parse_template(v.string(), where);
      return;
    }
    if (!v.is_array())
      throw FormatError(fmt::format("[ChatTemplate::load] {}: chat_template is {}, not a string or a list",
                                    where, v.kind_name()));
    for (const auto& e : v.array()) {
      const json::Value* name = e.is_object() ? e.find("name") : nullptr;
      const json::Value* body = e.is_object() ? e.find("template") : nullptr;
      if (!name || !name->is_string() || !body || !body->is_string())
        throw FormatError(fmt::format("[ChatTemplate::load] {}: each named template needs a string 'name' and 'template'", where));
      if (name->string() == "default") t.default_ = detail::parse_template(body->string(), where + "[default]");
      if (name->string() == "tool_use") t.tool_use_ = detail::parse_template(body->string(), where + "[tool_use]");
    }
    if (!t.default_ && !t.tool_use_)
      throw FormatError(fmt::format("[ChatTemplate::load] {}: no template named 'default' or 'tool_use'", where));
  };
  if (auto text = read_optional(dir / "chat_template.jinja")) {
    t.default_ = detail::parse_template(*text, (dir / "chat_template.jinja").string());
  } else if (auto json_text = read_optional(dir / "chat_template.json")) {
    const std::string where = (dir / "chat_template.json").string();
    const json::Value root = json::parse(*json_text, "ChatTemplate::load] " + where + ": [json");
    const json::Value* v = root.is_object() ? root.find("chat_template") : nullptr;
    if (!v) throw FormatError(fmt::format("[ChatTemplate::load] {}: no 'chat_template'", where));
    read_entry(*v, where);
  } else if (const json::Value* v = config ? config->find("chat_template") : nullptr; v && !v->is_null()) {
    read_entry(*v, config_path.string() + ":chat_template");
  } else {
    throw FormatError(fmt::format("[ChatTemplate::load] {}: the model has no chat template (no "
                                  "chat_template.jinja, chat_template.json, or chat_template in "
                                  "tokenizer_config.json)",
                                  model_dir));
  }
  t.probe_content_parts();
  return t;
}

void ChatTemplate::probe_content_parts() {
  default_walks_ = default_ && walks_parts(*default_, special_tokens_, additional_json_, limits_);
  tool_use_walks_ = tool_use_ && walks_parts(*tool_use_, special_tokens_, additional_json_, limits_);
}

void ChatTemplate::set_special_tokens(std::map<std::string, std::string> tokens) {
  special_tokens_ = std::move(tokens);
  probe_content_parts();
}

ChatContent ChatTemplate::content_parts(bool with_tools) const {
  const bool walks = with_tools && tool_use_ ? tool_use_walks_ : default_ ? default_walks_ : tool_use_walks_;
  return walks ? ChatContent::kParts : ChatContent::kString;
}

std::string ChatTemplate::render(std::string_view messages_json, std::string_view tools_json,
                                 bool add_generation_prompt, ChatContent content,
                                 std::string_view extra_json) const {
  const json::Value messages = parse_argument(messages_json, "messages");
  if (!messages.is_array())
    throw ArgumentError(fmt::format("[ChatTemplate::render] messages is {}, not an array", messages.kind_name()));
  detail::TValue tools = detail::TValue::none();
  if (!tools_json.empty()) {
    const json::Value parsed = parse_argument(tools_json, "tools");
    if (!parsed.is_array())
      throw ArgumentError(fmt::format("[ChatTemplate::render] tools is {}, not an array", parsed.kind_name()));
    tools = detail::TValue::from_json(parsed);
  }
  const bool with_tools = tools.is_list();
  const detail::TemplateProgram* program = with_tools && tool_use_ ? tool_use_.get() : default_.get();
  if (!program)
    throw ArgumentError("[ChatTemplate::render] the model's only template is 'tool_use', and no tools were given");
  const bool as_list = content == ChatContent::kParts ||
                       (content == ChatContent::kAuto && content_parts(with_tools) == ChatContent::kParts);
  detail::TList list;
  for (std::size_t i = 0; i < messages.array().size(); ++i) {
    const json::Value& m = messages.array()[i];
    if (!m.is_object()) throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}] is {}, not an object", i, m.kind_name()));
    const json::Value* role = m.find("role");
    if (!role || !role->is_string())
      throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}] has no string 'role'", i));
    detail::TDict members;
    for (const auto& [key, value] : m.object())
      members.emplace_back(key, key == "content" ? content_value(value, i, as_list) : detail::TValue::from_json(value));
    list.push_back(detail::TValue::dict(std::move(members)));
  }
  detail::TDict globals = base_globals(std::move(tools), add_generation_prompt, special_tokens_, additional_json_);
  globals.insert(globals.begin(), {"messages", detail::TValue::list(std::move(list))});
  if (!extra_json.empty()) {
    const json::Value extra = parse_argument(extra_json, "extra variables");
    if (!extra.is_object())
      throw ArgumentError(fmt::format("[ChatTemplate::render] the extra variables are {}, not an object", extra.kind_name()));
    for (const auto& [key, value] : extra.object()) {
      auto it = std::find_if(globals.begin(), globals.end(), [&key = key](const auto& g) { return g.first == key; });
      if (it != globals.end()) it->second = detail::TValue::from_json(value);
      else globals.emplace_back(key, detail::TValue::from_json(value));
    }
  }
  return detail::render_program(*program, globals, limits_);
}

std::string ChatTemplate::render_context(std::string_view context_json) const {
  const json::Value context = parse_argument(context_json, "context");
  if (!context.is_object())
    throw ArgumentError(fmt::format("[ChatTemplate::render_context] the context is {}, not an object", context.kind_name()));
  detail::TDict globals;
  for (const auto& [k, v] : context.object()) globals.emplace_back(k, detail::TValue::from_json(v));
  const bool with_tools = context.find("tools") && context.find("tools")->is_array();
  const detail::TemplateProgram* program = with_tools && tool_use_ ? tool_use_.get() : default_.get();
  if (!program) throw ArgumentError("[ChatTemplate::render_context] no template for a request without tools");
  return detail::render_program(*program, globals, limits_);
}

}  // namespace recur
