#include "text/world_chat.h"

#include <fmt/format.h>

#include "recur/error.h"
#include "util/json.h"

namespace recur::text {

namespace {

constexpr const char* kCall = "world_chat_prompt";

std::string content_text(const json::Value& content, std::size_t index) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.string();
  if (!content.is_array())
    throw ArgumentError(fmt::format("{}: messages[{}].content must be a string, null or a list of "
                                    "text parts, not {}", kCall, index, content.kind_name()));
  std::string out;
  for (std::size_t k = 0; k < content.array().size(); ++k) {
    const json::Value& part = content.array()[k];
    const json::Value* type = part.is_object() ? part.find("type") : nullptr;
    const json::Value* text = part.is_object() ? part.find("text") : nullptr;
    if (!type || !type->is_string() || type->string() != "text" || !text || !text->is_string())
      throw ArgumentError(fmt::format("{}: messages[{}].content[{}] must be a text part "
                                      "({{\"type\": \"text\", \"text\": \"...\"}})", kCall, index, k));
    if (k) out += '\n';
    out += text->string();
  }
  return out;
}

// The text as it may stand inside a turn: trimmed, one newline where there were several.
std::string tidy(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    if (text[i] == '\n' && !out.empty() && out.back() == '\n') continue;
    out += text[i];
  }
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::size_t begin = 0, end = out.size();
  while (begin < end && blank(out[begin])) ++begin;
  while (end > begin && blank(out[end - 1])) --end;
  return out.substr(begin, end - begin);
}

}  // namespace

std::string world_chat_prompt(std::string_view messages_json, bool add_generation_prompt, bool think) {
  json::Value messages;
  try {
    messages = json::parse(messages_json, "messages");
  } catch (const FormatError& e) {
    throw ArgumentError(fmt::format("{}: the messages are not JSON: {}", kCall, e.what()));
  }
  if (!messages.is_array())
    throw ArgumentError(fmt::format("{}: messages must be a list, not {}", kCall, messages.kind_name()));
  if (messages.array().empty()) throw ArgumentError(fmt::format("{}: messages is empty", kCall));
  std::string out;
  for (std::size_t i = 0; i < messages.array().size(); ++i) {
    const json::Value& m = messages.array()[i];
    if (!m.is_object())
      throw ArgumentError(fmt::format("{}: messages[{}] must be an object, not {}", kCall, i, m.kind_name()));
    const json::Value* role = m.find("role");
    if (!role || !role->is_string())
      throw ArgumentError(fmt::format("{}: messages[{}].role must be a string", kCall, i));
    const std::string& r = role->string();
    const char* label = r == "system" ? "System" : r == "user" ? "User" : r == "assistant" ? "Assistant" : nullptr;
    if (!label)
      throw ArgumentError(fmt::format("{}: messages[{}].role '{}' is not system, user or assistant "
                                      "(the RWKV world format has no other turns)", kCall, i, r));
    const json::Value* content = m.find("content");
    out += fmt::format("{}: {}{}", label, tidy(content ? content_text(*content, i) : std::string()),
                       kWorldChatTurnEnd);
  }
  if (add_generation_prompt) out += think ? "Assistant: <think" : "Assistant:";
  return out;
}

}  // namespace recur::text
