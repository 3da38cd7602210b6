// Replies read back into assistant messages (recur/chat_reply.h): each tool-call format found
// from the published templates, calls rendered by the templates themselves read back to the same
// calls, the awkward replies, and a streamed reply's partial reads as prefixes of the whole.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "recur/chat_reply.h"
#include "recur/chat_template.h"
#include "recur/error.h"
#include "util/file.h"

namespace {

using recur::ChatTemplate;
using recur::ReplyFormat;
using recur::ReplyOptions;
using recur::ToolCallFormat;

const std::string kTemplates = std::string(RECUR_TEST_FIXTURES) + "/templates/llama.cpp/";

ChatTemplate load_template(const std::string& file) {
  auto text = recur::detail::read_file(kTemplates + file, std::uint64_t(1) << 20);
  REQUIRE(text);
  ChatTemplate t = ChatTemplate::parse(*text, file);
  t.set_special_tokens({{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  return t;
}

const char* const kTools = R"([
 {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {
   "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
   "opts": {"type": "object"}, "tags": {"type": "array"}, "code": {"type": "string"}}}}},
 {"type": "function", "function": {"name": "search", "description": "Search", "parameters": {"type": "object", "properties": {
   "q": {"type": "string"}}}}}])";

ReplyOptions with_tools(bool in_thought = false) {
  ReplyOptions o;
  o.tools_json = kTools;
  o.in_thought = in_thought;
  return o;
}

ReplyFormat format_of(ToolCallFormat f) {
  ReplyFormat r;
  r.tool_calls = f;
  return r;
}

// The reply a template renders for an assistant message with these calls: the conversation with
// it, less the prompt that asks for it and the end of the turn.
std::string rendered_reply(const ChatTemplate& t, const std::string& calls) {
  const std::string user = R"({"role": "user", "content": "Weather in Paris?"})";
  const std::string prompt = t.render("[" + user + "]", kTools, true);
  std::string whole = t.render("[" + user + R"(, {"role": "assistant", "content": "", "tool_calls": )" + calls + "}]",
                               kTools, false);
  REQUIRE(whole.substr(0, prompt.size()) == prompt);
  whole = whole.substr(prompt.size());
  for (const char* end : {"<|im_end|>\n", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>\n", "<|end_of_text|>"})
    if (whole.size() >= std::string(end).size() && whole.substr(whole.size() - std::string(end).size()) == end) {
      whole.resize(whole.size() - std::string(end).size());
      break;
    }
  return whole;
}

}  // namespace

TEST_CASE("each published template's tool-call format is found by rendering a call", "[reply]") {
  const std::vector<std::pair<const char*, ToolCallFormat>> cases = {
      {"Qwen3.5-4B.jinja", ToolCallFormat::kQwenXml},
      {"Qwen3-Coder.jinja", ToolCallFormat::kQwenXml},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kTaggedJson},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kTaggedJson},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kTaggedJson},
      {"ibm-granite-granite-4.0.jinja", ToolCallFormat::kTaggedJson},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kBareJson},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kBareJson},
      {"llama-cpp-rwkv-world.jinja", ToolCallFormat::kGenericJson},
  };
  for (const auto& [file, expected] : cases) {
    INFO(file);
    CHECK(std::string(recur::tool_call_format_name(ReplyFormat::detect(load_template(file)).tool_calls)) ==
          recur::tool_call_format_name(expected));
  }
}

TEST_CASE("calls a template renders read back as the same calls", "[reply]") {
  const std::string one = R"([{"type": "function", "function": {"name": "get_weather", "arguments":
      {"city": "Paris é 😀", "days": 3, "metric": false, "tags": ["a", "b"], "code": "two\nlines </parameter> x"}}}])";
  const std::string two = R"([{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                              {"type": "function", "function": {"name": "search", "arguments": {"q": "fjord"}}}])";
  const std::string args_one =
      R"({"city":"Paris é 😀","days":3,"metric":false,"tags":["a","b"],"code":"two\nlines </parameter> x"})";
  for (const char* file : {"Qwen3.5-4B.jinja", "Qwen3-Coder.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja",
                           "Qwen-Qwen3-0.6B.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                           "ibm-granite-granite-4.0.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"}) {
    INFO(file);
    const ChatTemplate t = load_template(file);
    const ReplyFormat format = ReplyFormat::detect(t);
    ReplyOptions options = with_tools(format.opens_thought(t.render(R"([{"role": "user", "content": "x"}])", kTools, true)));
    const std::string reply = rendered_reply(t, one);
    INFO(reply);
    auto m = recur::parse_reply(reply, format, options);
    REQUIRE(m.tool_calls.size() == 1);
    CHECK(m.tool_calls[0].name == "get_weather");
    CHECK(m.tool_calls[0].arguments == args_one);
    CHECK(m.tool_calls[0].id == "call_0_0");
    CHECK(m.content.empty());
    if (format.tool_calls == ToolCallFormat::kBareJson) continue;  // Llama 3.1's template takes one call
    const std::string reply2 = rendered_reply(t, two);
    INFO(reply2);
    m = recur::parse_reply(reply2, format, options);
    REQUIRE(m.tool_calls.size() == 2);
    CHECK(m.tool_calls[0].arguments == R"({"city":"Oslo"})");
    CHECK(m.tool_calls[1].name == "search");
    CHECK(m.tool_calls[1].arguments == R"({"q":"fjord"})");
    CHECK(m.tool_calls[1].id == "call_0_1");
  }
}

TEST_CASE("Qwen's XML calls: values typed by the schema, reasoning and text before, two calls", "[reply]") {
  const ReplyFormat xml = format_of(ToolCallFormat::kQwenXml);
  const std::string reply =
      "Which city?\nParis.\n</think>\n\nI will look.\n\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=tags>\nnot json\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=search>\n<parameter=q>\nline one\n</parameter> is text\n</parameter>\n</function>\n</tool_call>";
  auto m = recur::parse_reply(reply, xml, with_tools(true));
  CHECK(m.has_reasoning);
  CHECK(m.reasoning == "Which city?\nParis.");
  CHECK(m.content == "I will look.");
  REQUIRE(m.tool_calls.size() == 2);
  // A string stays a string though it reads as a number; a value that is no JSON stays a string.
  CHECK(m.tool_calls[0].arguments == R"({"city":"42","days":3,"metric":true,"opts":{"a":[1,2]},"tags":"not json"})");
  CHECK(m.tool_calls[1].arguments == R"({"q":"line one\n</parameter> is text"})");
  CHECK(m.to_json() ==
        R"({"role":"assistant","content":"I will look.","reasoning_content":"Which city?\nParis.","tool_calls":[)"
        R"({"id":"call_0_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"42\",\"days\":3,)"
        R"(\"metric\":true,\"opts\":{\"a\":[1,2]},\"tags\":\"not json\"}"}},{"id":"call_0_1","type":"function",)"
        R"("function":{"name":"search","arguments":"{\"q\":\"line one\\n</parameter> is text\"}"}}]})");

  // parallel_tool_calls false: the second call stays text.
  ReplyOptions one = with_tools(true);
  one.parallel = false;
  m = recur::parse_reply(reply, xml, one);
  REQUIRE(m.tool_calls.size() == 1);
  CHECK(m.content.find("<function=search>") != std::string::npos);
  // tool_choice none, or no tools: every call is text, as it was written.
  ReplyOptions none = with_tools(true);
  none.parse_tool_calls = false;
  m = recur::parse_reply(reply, xml, none);
  CHECK(m.tool_calls.empty());
  CHECK(m.content == reply.substr(reply.find("I will look.")));
  m = recur::parse_reply(reply, xml, ReplyOptions{true, "", true, true, "0"});
  CHECK(m.tool_calls.empty());
}

TEST_CASE("a malformed, cut or unknown call is text, never dropped", "[reply]") {
  const ReplyFormat xml = format_of(ToolCallFormat::kQwenXml);
  const std::string good = "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>";
  const std::string unknown = "<tool_call>\n<function=delete_all>\n</function>\n</tool_call>";
  const std::string broken = "<tool_call>\n<function=search>\n<oops>\n</function>\n</tool_call>";
  auto m = recur::parse_reply("A " + unknown + " B " + broken + "\n" + good, xml, with_tools());
  CHECK(m.content == "A " + unknown + " B " + broken);
  REQUIRE(m.tool_calls.size() == 1);
  CHECK(m.tool_calls[0].id == "call_0_0");
  for (std::size_t cut : {std::size_t(1), std::size_t(15), good.size() - 1}) {
    m = recur::parse_reply("Text " + good.substr(0, cut), xml, with_tools());
    CHECK(m.tool_calls.empty());
    CHECK(m.content == "Text " + good.substr(0, cut));
  }
  const ReplyFormat tagged = format_of(ToolCallFormat::kTaggedJson);
  m = recur::parse_reply("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a </tool_call> b\"}}\n</tool_call>",
                         tagged, with_tools());
  REQUIRE(m.tool_calls.size() == 1);
  CHECK(m.tool_calls[0].arguments == R"({"q":"a </tool_call> b"})");
  m = recur::parse_reply("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \n</tool_call> after", tagged, with_tools());
  CHECK(m.tool_calls.empty());
  CHECK(m.content == "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \n</tool_call> after");
  // Llama 3's bare JSON: the whole reply is one call, or it is all text.
  const ReplyFormat bare = format_of(ToolCallFormat::kBareJson);
  m = recur::parse_reply(R"({"name": "search", "parameters": {"q": "x"}})", bare, with_tools());
  REQUIRE(m.tool_calls.size() == 1);
  CHECK(m.to_json().find(R"("content":null)") != std::string::npos);
  for (const char* text : {R"({"name": "nope", "parameters": {}})", R"({"name": "search", "parameters": {"q": )",
                           R"(Sure: {"name": "search", "parameters": {}})", R"({"answer": 42})"}) {
    m = recur::parse_reply(text, bare, with_tools());
    CHECK(m.tool_calls.empty());
    CHECK(m.content == text);
  }
  const ReplyFormat generic = format_of(ToolCallFormat::kGenericJson);
  m = recur::parse_reply(R"({"tool_calls": [{"name": "search", "arguments": {"q": "1"}}, {"name": "search", "arguments": "{\"q\": \"2\"}"}]})",
                         generic, with_tools());
  REQUIRE(m.tool_calls.size() == 2);
  CHECK(m.tool_calls[1].arguments == R"({"q":"2"})");
  CHECK_THROWS_AS(recur::parse_reply("x", xml, ReplyOptions{false, "{}", true, true, "0"}), recur::ArgumentError);
}

TEST_CASE("reasoning: a thought the reply opens, one the prompt opened, one cut short, none", "[reply]") {
  const ReplyFormat f;
  auto m = recur::parse_reply("<think>\nhmm\n</think>\n\nParis.", f, {});
  CHECK(m.has_reasoning);
  CHECK(m.reasoning == "hmm");
  CHECK(m.content == "Paris.");
  m = recur::parse_reply("hmm, cut", f, ReplyOptions{true, "", true, true, "0"});
  CHECK(m.reasoning == "hmm, cut");
  CHECK(m.content.empty());
  m = recur::parse_reply("Paris. <think> is a tag\n", f, {});
  CHECK(!m.has_reasoning);
  CHECK(m.content == "Paris. <think> is a tag\n");
  CHECK(m.to_json() == R"({"role":"assistant","content":"Paris. <think> is a tag\n"})");
  CHECK(f.opens_thought("<|im_start|>assistant\n<think>\n"));
  CHECK(f.opens_thought("Assistant: <think>"));
  CHECK(!f.opens_thought("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // RWKV7-G1's think mode: the prompt ends inside the marker, the model's '>' closes it.
  CHECK(f.opens_thought("Assistant: <think"));
  CHECK(f.opens_thought_tag("Assistant: <think"));
  CHECK(!f.opens_thought_tag("Assistant: <think>"));
  CHECK(!f.opens_thought_tag("Assistant: <think>\n"));
  CHECK(!f.opens_thought("Assistant:"));
  ReplyOptions g1;
  g1.in_thought = g1.in_thought_tag = true;
  m = recur::parse_reply(">\nFrance's capital.\n</think>\nParis.", f, g1);
  CHECK(m.reasoning == "France's capital.");
  CHECK(m.content == "Paris.");
  m = recur::parse_reply("> is a quote", f, ReplyOptions{true, "", true, true, "0"});
  CHECK(m.reasoning == "> is a quote");  // without the tag open, a '>' is the thought's own
}

TEST_CASE("a streamed reply's partial reads are prefixes of the whole read", "[reply]") {
  const std::string call = "<tool_call>\n<function=search>\n<parameter=q>\nl1\n</parameter>\n</function>\n</tool_call>";
  const std::vector<std::pair<std::string, ReplyFormat>> replies = {
      {"<think>\nplan é\n</think>\n\nI look.\n\n" + call + "\n" + call + "\n", format_of(ToolCallFormat::kQwenXml)},
      {"A <tool_call> broken </tool_call> then " + call + " tail\n\n", format_of(ToolCallFormat::kQwenXml)},
      {"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"</tool_call>\"}}\n</tool_call>\n<tool_call>", format_of(ToolCallFormat::kTaggedJson)},
      {"  {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}", format_of(ToolCallFormat::kBareJson)},
      {"<thin", ReplyFormat()},
  };
  for (bool in_thought : {false, true})
    for (const auto& [reply, format] : replies) {
      INFO(reply);
      const auto whole = recur::parse_reply(reply, format, with_tools(in_thought));
      recur::ReplyMessage before;
      for (std::size_t n = 0; n <= reply.size(); ++n) {
        const auto part = recur::parse_reply(reply.substr(0, n), format, with_tools(in_thought), true);
        INFO(n);
        CHECK(whole.content.compare(0, part.content.size(), part.content) == 0);
        CHECK(whole.reasoning.compare(0, part.reasoning.size(), part.reasoning) == 0);
        // And of every later partial read: a stream sends each read's new tail.
        CHECK(part.content.compare(0, before.content.size(), before.content) == 0);
        CHECK(part.reasoning.compare(0, before.reasoning.size(), before.reasoning) == 0);
        CHECK(part.tool_calls.size() >= before.tool_calls.size());
        before = part;
        REQUIRE(part.tool_calls.size() <= whole.tool_calls.size());
        for (std::size_t i = 0; i < part.tool_calls.size(); ++i)
          CHECK(part.tool_calls[i].arguments == whole.tool_calls[i].arguments);
      }
    }
}
