// The chat-template interpreter on untrusted templates: the input is a template's source,
// parsed and, when it parses, rendered over a fixed conversation with tools, under small limits.
// Any exception other than recur::Error, a crash, a sanitizer report or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "recur/chat_template.h"
#include "recur/error.h"

namespace {

const char* const kMessages = R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi <b>there</b> \u00e9\ud83d\ude00"},
  {"role": "assistant", "content": "<think>\nx\n</think>\n\nHello", "reasoning_content": "r",
   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
  {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": 1}"},
  {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}
])";
const char* const kTools = R"([{"type": "function", "function": {"name": "f", "description": "d",
  "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}}}}}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    recur::ChatTemplate t = recur::ChatTemplate::parse(source, "fuzz");
    recur::ChatTemplateLimits limits;
    limits.max_steps = 200000;
    limits.max_bytes = 1 << 20;
    limits.max_allocated_bytes = 32 << 20;
    t.set_limits(limits);
    t.set_special_tokens({{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    (void)t.render(kMessages, kTools, true);
    (void)t.render(kMessages, "", false, recur::ChatContent::kParts);
  } catch (const recur::Error&) {
  }
  return 0;
}
