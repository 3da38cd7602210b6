// Request bodies (serve::parse_completion: what POST /v1/completions runs on the body it was
// sent; serve::parse_chat_completion: what POST /v1/chat/completions runs, with a ChatML
// template), every field, for the byte-level model. A body is refused with ApiError or accepted as
// a Request within the limits; anything else (a crash, another exception, an accepted request
// outside them) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "recur/chat_template.h"
#include "recur/error.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "serve/api.h"
#include "text/unicode.h"

namespace {

recur::serve::ServedModel g_served, g_chat;

// A request the parser accepted must be within the limits.
void check(const recur::serve::Completion& c, const recur::serve::ServedModel& served) {
  const recur::serve::Request& r = c.request;
  if (r.prompt.empty() && r.previous_id.empty()) std::abort();
  for (const int id : r.prompt)
    if (id < 0 || id >= served.model->config().vocab_size) std::abort();
  if (r.max_tokens < 0 || r.max_tokens > served.max_tokens_limit) std::abort();
  std::size_t stop_bytes = 0;
  for (const auto& s : r.stop) {
    if (s.empty() || recur::text::invalid_utf8_at(s) != std::string_view::npos) std::abort();
    stop_bytes += s.size();
  }
  if (stop_bytes > served.max_stop_bytes) std::abort();
  if (!r.previous_id.empty() && !recur::serve::valid_conversation_id(r.previous_id)) std::abort();
  if (r.logprobs > served.max_logprobs || (c.include_usage && !c.stream)) std::abort();
}

// Parses `body` with `parse`; a refusal must be a 4xx with an error object of valid UTF-8.
template <typename Parse>
void run(std::string_view body, const recur::serve::ServedModel& served, Parse parse) {
  recur::serve::Completion c;
  try {
    c = parse(body, served);
  } catch (const recur::serve::ApiError& e) {
    const std::string json = recur::serve::error_json(e.what(), e.type, e.param);
    if (e.status < 400 || e.status > 499 || recur::text::invalid_utf8_at(json) != std::string_view::npos) std::abort();
    return;
  }
  check(c, served);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  recur::ModelConfig c;
  c.vocab_size = 300;  // the bytes and a few more
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_heads = 2;
  recur::models::linear::edit(c).feature_map = recur::models::linear::ModelFeatureMap::kElu;
  c.intermediate_size = 32;
  g_served.model = recur::Model::from_weights(c, recur::RandomWeights(c, 1));
  g_served.name = "recur-random";
  g_served.max_tokens_limit = 1 << 20;
  g_served.max_stop_bytes = 4096;
  g_chat = g_served;
  g_chat.chat_template = std::make_shared<const recur::ChatTemplate>(recur::ChatTemplate::parse(
      "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
      "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", "fuzz"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  run(body, g_served, recur::serve::parse_completion);
  run(body, g_chat, recur::serve::parse_chat_completion);
  return 0;
}
