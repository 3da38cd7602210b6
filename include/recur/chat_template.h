// A model's chat template: the Jinja template in tokenizer_config.json (or chat_template.jinja,
// chat_template.json) that turns a conversation into the prompt text the model was trained on,
// rendered as Hugging Face's transformers renders it (Jinja2 with trim_blocks and lstrip_blocks,
// its tojson, raise_exception, strftime_now and the loop controls), byte for byte.
//
// recur interprets the subset of Jinja that chat templates use (docs/chat.md lists it). It is
// strict: a construct outside that subset is a FormatError at parse time naming it and its
// line:column, never a silently different prompt. Rendering is bounded: a step budget stops a
// template that would loop without end, and a byte cap stops one that would build an unbounded
// output or string.
//
// A ChatTemplate is immutable once parsed; share it between threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace recur {

namespace detail {
struct TemplateProgram;
}

/// What a rendering may spend.
struct ChatTemplateLimits {
  /// Statements and expression nodes evaluated in one rendering.
  std::uint64_t max_steps = 20'000'000;
  /// Bytes of output, and of any one string or list built while rendering.
  std::uint64_t max_bytes = std::uint64_t(64) << 20;
  /// Bytes of every string and list built in one rendering, together: bounds the memory and
  /// the time a template can spend on building values.
  std::uint64_t max_allocated_bytes = std::uint64_t(1) << 30;
  /// Macro calls nested inside each other.
  int max_call_depth = 20;
};

/// How `render` passes a message whose content is a list of parts ([{"type": "text", "text":
/// ...}, ...], OpenAI's form). Whatever the choice, only text parts are taken: an image, audio or
/// file part is an ArgumentError naming the message, the part and its type.
enum class ChatContent {
  /// As the template expects: the list when the template walks the parts itself, the joined
  /// string when it does not. Which one is found once, when the template is parsed or loaded,
  /// by rendering a probe message whose content is a list (`content_parts()` tells).
  kAuto,
  /// Text parts joined with "\n" into one string (what most templates expect: they concatenate
  /// content with strings, and print a list as Python's repr or render nothing for it).
  kString,
  /// The list as given, for templates that walk the parts themselves (Gemma 3's).
  kParts,
};

class ChatTemplate {
 public:
  /// Parses a template's source. `name` (a file, "tokenizer_config.json:chat_template") opens
  /// messages. Throws FormatError naming the construct and its line:column.
  static ChatTemplate parse(std::string_view source, const std::string& name = "chat_template");

  /// Loads a model directory's template: chat_template.jinja, else chat_template.json's
  /// "chat_template", else tokenizer_config.json's; a list of named templates keeps "default"
  /// and "tool_use". The special tokens (bos_token, eos_token, ... and
  /// additional_special_tokens) come from tokenizer_config.json when it is there. Throws
  /// FormatError when there is no template or it cannot be read.
  static ChatTemplate load(const std::string& model_dir);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ~ChatTemplate();

  /// Renders `messages_json`, an OpenAI-style array of {"role", "content", ...} objects (other
  /// members, such as tool_calls or reasoning_content, pass through), with `tools_json` (an
  /// array, or "" for none: the template sees `tools` as none) and add_generation_prompt, as
  /// transformers' apply_chat_template does: the special tokens are variables too.
  /// `extra_json`, when given, is a JSON object whose members are more variables (as
  /// apply_chat_template's keyword arguments: {"enable_thinking": false}), set last.
  /// `content` says how a content given as a list of text parts reaches the template: by
  /// default as the template expects (content_parts()).
  /// Bad JSON or messages are an ArgumentError; raise_exception in the template is an
  /// ArgumentError carrying its message; other rendering errors (a type error, the limits) are
  /// FormatErrors naming the template's line:column.
  std::string render(std::string_view messages_json, std::string_view tools_json = {},
                     bool add_generation_prompt = false,
                     ChatContent content = ChatContent::kAuto,
                     std::string_view extra_json = {}) const;

  /// Renders with the variables of `context_json`, a JSON object (each member one variable),
  /// and nothing else: no special tokens added, no content rewritten.
  std::string render_context(std::string_view context_json) const;

  /// The special tokens given to the template as variables (bos_token -> "<s>", ...).
  const std::map<std::string, std::string>& special_tokens() const { return special_tokens_; }
  /// Replaces them (for a template parsed from a string), and probes the template again.
  void set_special_tokens(std::map<std::string, std::string> tokens);
  /// additional_special_tokens, when tokenizer_config.json lists them (a JSON array, or "").
  const std::string& additional_special_tokens_json() const { return additional_json_; }
  /// Where the template came from.
  const std::string& name() const;
  /// Whether a separate template for requests with tools was loaded ("tool_use").
  bool has_tool_template() const { return tool_use_ != nullptr; }

  /// What ChatContent::kAuto gives the template used without tools (`with_tools` false) or with
  /// them: kParts when it walks a list of content parts, else kString. Found when the template
  /// was parsed or loaded: a user message whose content is one text part with a marker text is
  /// rendered, and the template walks parts when the marker appears other than as a value in a
  /// printed list (Python's repr or tojson of the parts); a template that fails on the probe
  /// does not walk parts.
  ChatContent content_parts(bool with_tools = false) const;

  void set_limits(const ChatTemplateLimits& limits) { limits_ = limits; }
  const ChatTemplateLimits& limits() const { return limits_; }

 private:
  ChatTemplate() = default;
  // Sets default_walks_ and tool_use_walks_ (content_parts()).
  void probe_content_parts();

  std::shared_ptr<const detail::TemplateProgram> default_;
  std::shared_ptr<const detail::TemplateProgram> tool_use_;
  std::map<std::string, std::string> special_tokens_;
  std::string additional_json_;
  ChatTemplateLimits limits_;
  bool default_walks_ = false;   // whether default_ walks a list of content parts
  bool tool_use_walks_ = false;  // and tool_use_
};

}  // namespace recur
