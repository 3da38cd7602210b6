// recur template: a conversation through a model's chat template, printed as the model sees it.
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "recur/chat_reply.h"
#include "recur/chat_template.h"
#include "recur/error.h"
#include "util/json.h"

namespace recur::cli {

namespace {

std::string extra_variables(const Args& args) {
  std::string extra;
  for (const std::string& item : args.all("set")) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ArgumentError("--set takes NAME=JSON (e.g. enable_thinking=false), got '" + item + "'");
    extra += (extra.empty() ? "{" : ",") + json::quote(item.substr(0, eq)) + ":" + item.substr(eq + 1);
  }
  if (!extra.empty()) extra += "}";
  return extra;
}

// --parse-reply: the message a reply's text becomes, as JSON. With --messages the reply follows
// that conversation's prompt (rendered with the generation prompt and --set), which says whether
// it starts inside a thought.
int parse_reply_command(const Args& args) {
  const int inputs = (args.str("parse-reply") == "-") + (args.given("tools") && args.str("tools") == "-") +
                     (args.given("messages") && args.str("messages") == "-");
  if (inputs > 1) throw ArgumentError("only one of --parse-reply, --messages and --tools can read standard input");
  const ChatTemplate chat = ChatTemplate::load(args.str("model"));
  const ReplyFormat format = ReplyFormat::detect(chat);
  ReplyOptions options;
  if (args.given("tools")) options.tools_json = read_input(args.str("tools"), "--tools", std::uint64_t(64) << 20);
  options.in_thought = args.flag_set("in-thought");
  if (args.given("messages")) {
    const std::string messages = read_input(args.str("messages"), "--messages", std::uint64_t(64) << 20);
    const std::string prompt = chat.render(messages, options.tools_json, true, ChatContent::kAuto, extra_variables(args));
    options.in_thought |= format.opens_thought(prompt);
    options.in_thought_tag = format.opens_thought_tag(prompt);
  }
  const std::string reply = read_input(args.str("parse-reply"), "--parse-reply", std::uint64_t(64) << 20);
  const std::string out = parse_reply(reply, format, options).to_json() + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  flush_stdout();
  return 0;
}

}  // namespace

int run_template(int argc, char** argv) {
  Args args("template",
            "Renders a conversation with a model's own chat template (the Jinja template in\n"
            "tokenizer_config.json, chat_template.jinja or chat_template.json) and prints the\n"
            "prompt text the model is given, byte for byte as Hugging Face's transformers renders it.");
  args.option("model", "", "model directory holding the chat template", 'm')
      .option("messages", "", "JSON file with the messages: an OpenAI-style array of {\"role\": ..., "
                              "\"content\": ...} ('-': standard input)")
      .option("tools", "", "JSON file with the tools: an array of {\"type\": \"function\", \"function\": {...}}")
      .option("parse-reply", "", "file with a reply's text ('-': standard input): print the assistant "
                                 "message it becomes (content, reasoning_content, tool_calls) as JSON, "
                                 "with the template's tool-call format; calls are read only to the "
                                 "--tools given")
      .flag("in-thought", "with --parse-reply: the reply starts inside a thought (the generation "
                          "prompt opened it; with --messages, found from the rendered prompt)")
      .flag("add-generation-prompt", "end with the start of the assistant's turn, as a request to "
                                     "the model does")
      .repeatable("set", "NAME=JSON: one more variable for the template, as apply_chat_template's "
                         "keyword arguments (--set enable_thinking=false)")
      .option("content-parts", "auto",
              "how a message's list of text parts reaches the template: 'list' as it is (for "
              "templates that walk parts, such as Gemma 3's), 'string' joined with newlines, "
              "'auto' whichever the template handles (found by rendering a probe); a bare "
              "--content-parts means 'list'")
      .footer("Examples:\n"
              "  echo '[{\"role\": \"user\", \"content\": \"Hello\"}]' > chat.json\n"
              "  recur template -m DIR --messages chat.json --add-generation-prompt\n"
              "  recur template -m DIR --messages chat.json --tools tools.json\n"
              "  recur template -m DIR --messages chat.json --add-generation-prompt --set enable_thinking=false\n"
              "  recur template -m DIR --parse-reply reply.txt --tools tools.json\n"
              "\n"
              "A template that uses a Jinja construct recur does not interpret is refused with the\n"
              "construct's name and line:column; raise_exception in the template (a role order it\n"
              "refuses, say) is reported with its message. docs/chat.md lists what is supported.");
  // The flag's old spelling, --content-parts without a value, still means 'list'.
  std::vector<std::string> words(argv, argv + argc);
  for (std::size_t i = 2; i < words.size(); ++i)
    if (words[i] == "--content-parts" && (i + 1 == words.size() || words[i + 1].rfind('-', 0) == 0))
      words[i] = "--content-parts=list";
  std::vector<char*> pointers;
  for (std::string& w : words) pointers.push_back(w.data());
  pointers.push_back(nullptr);
  if (!args.parse(argc, pointers.data(), 2)) return 0;
  const std::string parts = args.str("content-parts");
  if (parts != "auto" && parts != "list" && parts != "string")
    throw ArgumentError("--content-parts must be auto, list or string, got '" + printable(parts) + "'");
  const ChatContent content = parts == "list"     ? ChatContent::kParts
                              : parts == "string" ? ChatContent::kString
                                                  : ChatContent::kAuto;
  if (!args.given("model")) throw ArgumentError("give the model: -m DIR");
  if (args.given("parse-reply")) return parse_reply_command(args);
  if (!args.given("messages")) throw ArgumentError("give the conversation: --messages FILE.json ('-' for standard input)");
  if (args.given("tools") && args.str("tools") == "-" && args.str("messages") == "-")
    throw ArgumentError("--messages and --tools cannot both read standard input");
  const ChatTemplate chat = ChatTemplate::load(args.str("model"));
  const std::string messages = read_input(args.str("messages"), "--messages", std::uint64_t(64) << 20);
  const std::string tools = args.given("tools") ? read_input(args.str("tools"), "--tools", std::uint64_t(64) << 20) : "";
  const std::string extra = extra_variables(args);
  const std::string prompt =
      chat.render(messages, tools, args.flag_set("add-generation-prompt"), content, extra);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
