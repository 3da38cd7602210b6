// The chat format RWKV's world models were trained on, which their checkpoints do not ship as a
// Jinja template: "System: ...\n\n", then "User: ...\n\nAssistant: ...\n\n" turns, a prompt
// ending in "Assistant:", and "\n\n" ending a turn (so a blank line inside a message would end
// it early: runs of newlines inside a message become one).
#pragma once

#include <string>
#include <string_view>

namespace recur::text {

/// What ends the assistant's turn in this format; a stop sequence for the server.
inline constexpr std::string_view kWorldChatTurnEnd = "\n\n";

/// The prompt text of `messages_json`, an OpenAI-style array of {"role", "content"} messages
/// (roles system, user, assistant; content a string, null, or a list of {"type": "text", "text"}
/// parts joined with "\n"). Each message's content has its leading and trailing whitespace
/// removed, "\r\n" read as "\n", and every run of newlines made one. With
/// add_generation_prompt the text ends in "Assistant:", or with `think` in "Assistant: <think":
/// RWKV7-G1's think mode, where the model closes the tag itself and writes its thought up to
/// "</think>" (ReplyFormat::opens_thought reads such a prompt). Bad JSON, an empty list, an
/// unknown role or a content of another type is an ArgumentError naming the message's index.
std::string world_chat_prompt(std::string_view messages_json, bool add_generation_prompt, bool think = false);

}  // namespace recur::text
