// A model's reply read back as an OpenAI assistant message: the thought between the thinking
// markers goes to `reasoning_content`, tool calls written in the template's format go to
// `tool_calls`, and the rest stays `content`.
//
// The tool-call format is found once per template (ReplyFormat::detect), by rendering an
// assistant message that carries a tool call and looking at how the template wrote it back:
//   - kQwenXml: Qwen3.5 and Qwen3-Coder, `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n
//     </parameter>\n</function>\n</tool_call>`, each value typed by the tool's JSON schema;
//   - kTaggedJson: Hermes, Qwen2.5/Qwen3, Granite: `<tool_call>{"name": ..., "arguments": ...}
//     </tool_call>`;
//   - kBareJson: Llama 3.x: the whole reply is `{"name": ..., "parameters": ...}`;
//   - kGenericJson: a template that renders no call: the whole reply is `{"tool_call": {"name",
//     "arguments"}}` or `{"tool_calls": [...]}`.
// A call that does not parse, that is cut short, or that names a tool the request did not give
// is left in `content` as the text it was: nothing the model wrote is dropped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recur/json_schema.h"

namespace recur {

class ChatTemplate;

enum class ToolCallFormat { kQwenXml, kTaggedJson, kBareJson, kGenericJson };

/// "qwen-xml", "tagged-json", "bare-json", "generic-json".
const char* tool_call_format_name(ToolCallFormat format);

/// How a template's replies are written.
struct ReplyFormat {
  ToolCallFormat tool_calls = ToolCallFormat::kGenericJson;
  std::string think_open = "<think>";
  std::string think_close = "</think>";
  /// kTaggedJson: what the template writes around a call's JSON, spaces included, as found by
  /// detect() (Hermes and Qwen3 write "<tool_call>\n" and "\n</tool_call>").
  std::string call_open = "<tool_call>\n";
  std::string call_close = "\n</tool_call>";

  /// The format a template renders tool calls in, found by rendering one assistant message with
  /// a call (with tools given); a template that fails on it, or writes no call, gets the
  /// generic JSON form.
  static ReplyFormat detect(const ChatTemplate& chat);

  /// Whether a rendered prompt leaves the model inside a thought: its end (spaces and newlines
  /// aside) is an opening marker that no closing marker follows (Qwen3.5's generation prompt
  /// `<think>\n`, RWKV's ` <think>`), or the marker without its last byte (RWKV7-G1's think
  /// mode ends its prompt in `<think`: see opens_thought_tag).
  bool opens_thought(std::string_view prompt) const;
  /// Whether the prompt ends inside the opening marker itself (`<think`, its `>` missing): the
  /// model's first byte then closes the tag, and is no part of the thought.
  bool opens_thought_tag(std::string_view prompt) const;
};

/// What a parse is told about the request.
struct ReplyOptions {
  /// The reply starts inside a thought (ReplyFormat::opens_thought of the prompt).
  bool in_thought = false;
  /// The request's tools, a JSON array of {"type": "function", "function": {"name",
  /// "parameters"}} ("" or "[]": none, and then no call is parsed: every call is text).
  std::string tools_json;
  /// false: the calls stay text (tool_choice "none").
  bool parse_tool_calls = true;
  /// false: only the first call is parsed; later ones stay text (parallel_tool_calls false).
  bool parallel = true;
  /// Call ids are "call_" + id_base + "_" + the call's index: the same reply gives the same bytes.
  std::string id_base = "0";
  /// in_thought, and inside the opening marker itself (ReplyFormat::opens_thought_tag): a `>`
  /// that begins the reply completes the marker.
  bool in_thought_tag = false;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  ///< a JSON object, as compact JSON text
};

struct ReplyMessage {
  std::string content;
  std::string reasoning;  ///< reasoning_content ("" with has_reasoning false: none)
  bool has_reasoning = false;
  std::vector<ToolCall> tool_calls;

  /// {"role": "assistant", "content": ..., "reasoning_content": ..., "tool_calls": [...]}: the
  /// content null when there is none and there are calls, reasoning_content and tool_calls
  /// only when there are some.
  std::string to_json() const;
};

/// The grammar that holds a reply to one call to one of `options.tools_json`'s tools (or to
/// the tool `only`, when not empty), written as `format` writes calls, so that parse_reply reads
/// it back as that call: for tool_choice "required" or a named function.
///   - JSON forms: `{"name":"NAME","arguments":ARGS}` (Llama 3's "parameters"; the generic form
///     inside {"tool_call": ...}), ARGS a value of the tool's parameters schema (a tool without
///     one: {}), between call_open and call_close for kTaggedJson.
///   - kQwenXml: `<tool_call>\n<function=NAME>\n`, then each required parameter, in the order of
///     `properties`, as `<parameter=KEY>\nVALUE\n</parameter>\n`, then `</function>\n</tool_call>`.
///     A parameter typed "string" takes any text without "</parameter>" (its enum or const: one
///     of those, raw); another type takes a compact JSON value of its schema. Optional
///     parameters are left out.
/// With `options.in_thought`, the thought runs free first (the text before "\n" + think_close),
/// then "\n\n" and the call: a thinking model reasons, then calls. One call, whatever
/// options.parallel says. ArgumentError ("tools[i].function.parameters...: ...") for a schema
/// that the grammar does not cover or, in the XML form, a value type it cannot write (a
/// required parameter with no "type", or "string" in a list of types).
std::shared_ptr<const JsonGrammar> tool_call_grammar(const ReplyFormat& format, const ReplyOptions& options,
                                                     std::string_view only = {});

/// Reads a reply. `partial` reads a reply still being written: text that may yet become part of
/// a marker or of a call is held back, and trailing spaces and newlines too, so that each field
/// of a partial read is a prefix of the same field of every later read (partial or whole), and
/// tool_calls only grow. ArgumentError when tools_json is not an array of tools.
ReplyMessage parse_reply(std::string_view reply, const ReplyFormat& format, const ReplyOptions& options,
                         bool partial = false);

}  // namespace recur
