#include "chat_format.h"

#include <fmt/format.h>

#include <filesystem>

#include "recur/error.h"
#include "text/world_chat.h"
#include "util/file.h"
#include "util/json.h"

namespace recur::cli {
namespace {

// generation_config.json's "stop_strings" (transformers' GenerationConfig: a string or a list
// of strings); none when the file or the member is missing.
std::vector<std::string> stop_strings(const std::filesystem::path& dir) {
  const auto path = (dir / "generation_config.json").string();
  const auto text = detail::read_file(path);
  if (!text) return {};
  const json::Value v = json::parse(*text, "recur] " + path + ": [json");
  const json::Value* stops = v.is_object() ? v.find("stop_strings") : nullptr;
  if (!stops) return {};
  std::vector<std::string> out;
  if (stops->is_string() && !stops->string().empty()) out.push_back(stops->string());
  if (stops->is_array())
    for (const auto& s : stops->array()) {
      if (!s.is_string() || s.string().empty())
        throw FormatError(fmt::format("{}: stop_strings holds something other than a non-empty string", path));
      out.push_back(s.string());
    }
  if (!stops->is_string() && !stops->is_array())
    throw FormatError(fmt::format("{}: stop_strings is neither a string nor a list of strings", path));
  return out;
}

std::string shown(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return "\"" + printable(out) + "\"";
}

}  // namespace

void declare_chat_template_option(Args& args) {
  args.option("chat-template", "", "a chat template (Jinja, as chat_template.jinja) instead of the model's");
}

ChatFormat chat_format(const Args& args, const TextModel& tm, const std::string& way_out) {
  ChatFormat f;
  std::string dir = args.given("model") ? args.str("model") : tm.random ? "" : builtin_dir();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    dir = std::filesystem::path(dir).parent_path().string();
  if (args.given("chat-template")) {
    const std::string path = args.str("chat-template");
    ChatTemplate t = ChatTemplate::parse(read_input(path, "--chat-template"), path);
    if (!dir.empty()) {  // the model's special tokens (bos_token, eos_token) as variables
      try {
        t.set_special_tokens(ChatTemplate::load(dir).special_tokens());
      } catch (const Error&) {
      }
    }
    f.chat_template = std::make_shared<const ChatTemplate>(std::move(t));
  } else {
    std::string why = "the model has no chat template (it has no directory)";
    if (!dir.empty()) {
      try {
        f.chat_template = std::make_shared<const ChatTemplate>(ChatTemplate::load(dir));
      } catch (const Error& e) {
        why = e.what();
      }
    }
    if (!f.chat_template) {
      if (tm.tokenizer && tm.tokenizer->world_vocabulary()) {
        f.world = true;
        f.stop = {std::string(text::kWorldChatTurnEnd)};
        return f;
      }
      f.none = fmt::format("{}: {}", why, way_out);
      return f;
    }
  }
  if (!dir.empty()) f.stop = stop_strings(dir);
  return f;
}

std::string ChatFormat::describe() const {
  if (world) return "RWKV's world format (User: ... Assistant: ..., built in); a reply ends at a blank line";
  if (!chat_template) return "none";
  std::string stops;
  for (const auto& s : stop) stops += (stops.empty() ? "" : ", ") + shown(s);
  return fmt::format("{}{}", chat_template->name(),
                     stops.empty() ? std::string() : "; a reply also ends at " + stops);
}

}  // namespace recur::cli
