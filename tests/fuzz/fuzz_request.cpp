// Request bodies (serve::parse_completion: what POST /v1/completions runs on the body it was
// sent), every field, for the byte-level model. A body is refused with ApiError or accepted as
// a Request within the limits; anything else (a crash, another exception, an accepted request
// outside them) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "recur/error.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "serve/api.h"
#include "text/unicode.h"

namespace {

recur::serve::ServedModel g_served;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  recur::ModelConfig c;
  c.vocab_size = 300;  // the bytes and a few more
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_heads = 2;
  c.feature_map = recur::ModelFeatureMap::kElu;
  c.intermediate_size = 32;
  g_served.model = recur::Model::from_weights(c, recur::RandomWeights(c, 1));
  g_served.name = "recur-random";
  g_served.max_tokens_limit = 1 << 20;
  g_served.max_stop_bytes = 4096;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  recur::serve::Completion c;
  try {
    c = recur::serve::parse_completion(body, g_served);
  } catch (const recur::serve::ApiError& e) {
    // OpenAI's error object, valid UTF-8 whatever the body held.
    const std::string json = recur::serve::error_json(e.what(), e.type, e.param);
    if (e.status < 400 || e.status > 499 || recur::text::invalid_utf8_at(json) != std::string_view::npos) std::abort();
    return 0;
  }
  const recur::serve::Request& r = c.request;
  if (r.prompt.empty() && r.previous_id.empty()) std::abort();
  for (const int id : r.prompt)
    if (id < 0 || id >= g_served.model->config().vocab_size) std::abort();
  if (r.max_tokens < 0 || r.max_tokens > g_served.max_tokens_limit) std::abort();
  std::size_t stop_bytes = 0;
  for (const auto& s : r.stop) {
    if (s.empty() || recur::text::invalid_utf8_at(s) != std::string_view::npos) std::abort();
    stop_bytes += s.size();
  }
  if (stop_bytes > g_served.max_stop_bytes) std::abort();
  if (!r.previous_id.empty() && !recur::serve::valid_conversation_id(r.previous_id)) std::abort();
  if (r.logprobs > g_served.max_logprobs || (c.include_usage && !c.stream)) std::abort();
  return 0;
}
