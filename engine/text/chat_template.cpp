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

}  // namespace

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(std::string_view source, const std::string& name) {
  ChatTemplate t;
  t.default_ = detail::parse_template(source, name);
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
  return t;
}

std::string ChatTemplate::render(std::string_view messages_json, std::string_view tools_json,
                                 bool add_generation_prompt, ChatContent content,
                                 std::string_view extra_json) const {
  const json::Value messages = parse_argument(messages_json, "messages");
  if (!messages.is_array())
    throw ArgumentError(fmt::format("[ChatTemplate::render] messages is {}, not an array", messages.kind_name()));
  detail::TList list;
  for (std::size_t i = 0; i < messages.array().size(); ++i) {
    const json::Value& m = messages.array()[i];
    if (!m.is_object()) throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}] is {}, not an object", i, m.kind_name()));
    const json::Value* role = m.find("role");
    if (!role || !role->is_string())
      throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}] has no string 'role'", i));
    detail::TDict members;
    for (const auto& [key, value] : m.object()) {
      if (key == "content" && value.is_array() && content == ChatContent::kString) {
        // OpenAI's text parts, joined into the one string most templates expect.
        std::string text;
        for (std::size_t p = 0; p < value.array().size(); ++p) {
          const json::Value& part = value.array()[p];
          const json::Value* type = part.is_object() ? part.find("type") : nullptr;
          const json::Value* body = part.is_object() ? part.find("text") : nullptr;
          if (!type || !type->is_string() || type->string() != "text" || !body || !body->is_string())
            throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}].content[{}] is not a text part "
                                            "({{\"type\": \"text\", \"text\": ...}})", i, p));
          text += (p ? "\n" : "") + body->string();
        }
        members.emplace_back(key, detail::TValue::string(std::move(text)));
      } else if (key == "content" && !value.is_array() && !value.is_string() && !value.is_null()) {
        throw ArgumentError(fmt::format("[ChatTemplate::render] messages[{}].content is {}, not a string, "
                                        "an array of parts or null", i, value.kind_name()));
      } else {
        members.emplace_back(key, detail::TValue::from_json(value));
      }
    }
    list.push_back(detail::TValue::dict(std::move(members)));
  }
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
  detail::TDict globals = {{"messages", detail::TValue::list(std::move(list))},
                           {"tools", tools},
                           {"documents", detail::TValue::none()},
                           {"add_generation_prompt", detail::TValue::boolean(add_generation_prompt)}};
  for (const auto& [k, v] : special_tokens_) globals.emplace_back(k, detail::TValue::string(v));
  if (!additional_json_.empty())
    globals.emplace_back("additional_special_tokens",
                         detail::TValue::from_json(json::parse(additional_json_, "ChatTemplate] [additional_special_tokens")));
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
