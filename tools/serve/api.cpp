#include "serve/api.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "recur/error.h"
#include "util/json.h"

namespace recur::serve {

namespace {

using json::quote;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", param, message);
}

std::string number(double x) { return fmt::format("{}", x); }

const json::Value* field(const json::Value& body, const char* name) {
  const json::Value* v = body.find(name);
  return v && !v->is_null() ? v : nullptr;
}

double real(const json::Value& v, const char* name, double lo, double hi) {
  if (!v.is_number()) throw bad(name, fmt::format("'{}' must be a number, not {}", name, v.kind_name()));
  const double x = v.number();
  if (!(x >= lo && x <= hi))
    throw bad(name, fmt::format("'{}' is {}, expected {} to {}", name, x, lo, hi));
  return x;
}

std::int64_t integer(const json::Value& v, const char* name, std::int64_t lo, std::int64_t hi) {
  if (!v.is_integer())
    throw bad(name, fmt::format("'{}' must be an integer, not {}", name,
                                v.is_number() ? "a fraction" : v.kind_name()));
  const std::int64_t x = v.integer();
  if (x < lo || x > hi) throw bad(name, fmt::format("'{}' is {}, expected {} to {}", name, x, lo, hi));
  return x;
}

bool boolean(const json::Value& v, const char* name) {
  if (!v.is_bool()) throw bad(name, fmt::format("'{}' must be true or false, not {}", name, v.kind_name()));
  return v.boolean();
}

std::vector<int> encode(const std::string& text, const ServedModel& served, bool add_special) {
  try {
    if (served.tokenizer) return served.tokenizer->encode(text, add_special);
    return ByteTokenizer().encode(text);
  } catch (const ArgumentError& e) {
    throw bad("prompt", fmt::format("the prompt cannot be encoded: {}", e.what()));
  }
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  return fmt::format(R"({{"error":{{"message":{},"type":{},"param":{},"code":{}}}}})", quote(message),
                     quote(type), param.empty() ? "null" : quote(param),
                     code.empty() ? "null" : quote(code));
}

Completion parse_completion(std::string_view text, const ServedModel& served) {
  json::Value body;
  try {
    body = json::parse(text, "request body");
  } catch (const FormatError& e) {
    throw bad("", fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw bad("", fmt::format("the body must be a JSON object, not {}", body.kind_name()));
  static const char* const known[] = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logprobs",
      "stream", "stream_options", "n", "best_of", "echo", "presence_penalty", "frequency_penalty",
      "logit_bias", "suffix", "user", "previous_response_id", "ignore_eos", "return_token_ids"};
  for (const auto& [key, value] : body.object()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) throw bad(key, fmt::format("unrecognized request argument '{}'", key));
  }

  Completion c;
  Request& r = c.request;
  if (const auto* v = field(body, "model")) {
    if (!v->is_string()) throw bad("model", "'model' must be a string");
    if (v->string() != served.name)
      throw ApiError(404, "not_found_error", "model",
                     fmt::format("the model '{}' does not exist here; this server runs '{}'",
                                 v->string(), served.name));
  }
  // Options that would change what the model computes in ways this server does not offer are
  // refused, not ignored.
  for (const char* p : {"n", "best_of"})
    if (const auto* v = field(body, p); v && !(v->is_integer() && v->integer() == 1))
      throw bad(p, fmt::format("'{}' must be 1: this server returns one completion per request", p));
  if (const auto* v = field(body, "echo"); v && boolean(*v, "echo"))
    throw bad("echo", "'echo' is not supported: the response holds the completion only");
  for (const char* p : {"presence_penalty", "frequency_penalty"})
    if (const auto* v = field(body, p); v && real(*v, p, -2, 2) != 0.0)
      throw bad(p, fmt::format("'{}' is not supported (only 0)", p));
  if (const auto* v = field(body, "logit_bias"); v && !(v->is_object() && v->object().empty()))
    throw bad("logit_bias", "'logit_bias' is not supported");
  if (const auto* v = field(body, "suffix"); v)
    throw bad("suffix", "'suffix' is not supported");
  if (const auto* v = field(body, "user"); v && !v->is_string()) throw bad("user", "'user' must be a string");

  if (const auto* v = field(body, "previous_response_id")) {
    if (!v->is_string() || !ConversationStore::valid_id(v->string()))
      throw bad("previous_response_id", "'previous_response_id' must be an id this server returned");
    r.previous_id = v->string();
  }
  const bool continuing = !r.previous_id.empty();

  const json::Value* prompt = field(body, "prompt");
  if (!prompt) {
    if (!continuing) throw bad("prompt", "'prompt' is required (text, or an array of token ids)");
  } else if (prompt->is_string()) {
    // A continuation is encoded without what the tokenizer adds at a text's start (a BOS).
    r.prompt = encode(prompt->string(), served, !continuing);
  } else if (prompt->is_array()) {
    const auto& a = prompt->array();
    if (a.size() == 1 && a[0].is_string()) {
      r.prompt = encode(a[0].string(), served, !continuing);
    } else {
      const int V = served.model->config().vocab_size;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!a[i].is_integer())
          throw bad("prompt", a[i].is_string() || a[i].is_array()
                                  ? "one prompt per request: 'prompt' may be a string or an array of token ids"
                                  : fmt::format("prompt[{}] must be a token id, not {}", i, a[i].kind_name()));
        const auto id = a[i].integer();
        if (id < 0 || id >= V)
          throw bad("prompt", fmt::format("prompt[{}] is {}, expected a token id from 0 to {}", i, id, V - 1));
        r.prompt.push_back(int(id));
      }
    }
  } else {
    throw bad("prompt", fmt::format("'prompt' must be a string or an array of token ids, not {}", prompt->kind_name()));
  }
  if (r.prompt.empty() && !continuing) throw bad("prompt", "the prompt is empty");

  if (const auto* v = field(body, "max_tokens")) r.max_tokens = integer(*v, "max_tokens", 0, served.max_tokens_limit);
  SamplerOptions& s = r.sampler;
  s.temperature = 1.0f;  // OpenAI's defaults
  s.top_p = 1.0f;
  s.top_k = 0;
  if (const auto* v = field(body, "temperature")) s.temperature = float(real(*v, "temperature", 0, 1e6));
  if (const auto* v = field(body, "top_p")) {
    const double p = real(*v, "top_p", 0, 1);
    if (p <= 0) throw bad("top_p", "'top_p' must be above 0");
    s.top_p = float(p);
  }
  if (const auto* v = field(body, "top_k")) s.top_k = int(integer(*v, "top_k", 0, 1 << 24));
  if (const auto* v = field(body, "seed")) {
    s.seed = std::uint64_t(integer(*v, "seed", INT64_MIN, INT64_MAX));
  } else {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    s.seed = rng();  // unseeded requests differ, as OpenAI's do
  }
  if (const auto* v = field(body, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->string());
    } else if (v->is_array()) {
      if (v->array().size() > 16) throw bad("stop", "'stop' holds at most 16 sequences");
      for (const auto& x : v->array()) {
        if (!x.is_string()) throw bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(x.string());
      }
    } else {
      throw bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : r.stop)
      if (x.empty()) throw bad("stop", "a stop sequence is empty");
  }
  if (const auto* v = field(body, "logprobs"))
    r.logprobs = int(integer(*v, "logprobs", 0, served.max_logprobs));
  if (const auto* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const auto* v = field(body, "return_token_ids")) r.return_token_ids = boolean(*v, "return_token_ids");
  if (const auto* v = field(body, "stream")) c.stream = boolean(*v, "stream");
  if (const auto* v = field(body, "stream_options")) {
    if (!v->is_object()) throw bad("stream_options", "'stream_options' must be an object");
    if (!c.stream) throw bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    for (const auto& [key, value] : v->object()) {
      if (key != "include_usage") throw bad("stream_options", fmt::format("unrecognized stream option '{}'", key));
      c.include_usage = boolean(value, "stream_options.include_usage");
    }
  }
  return c;
}

namespace {

std::string logprobs_json(const Job& job, const Engine& engine, std::size_t from, std::size_t to) {
  if (job.request.logprobs < 0) return "null";
  std::string tokens, lps, tops, offsets;
  for (std::size_t i = from; i < to; ++i) {
    const Token& t = job.tokens[i];
    const char* sep = i == from ? "" : ",";
    tokens += sep + quote(t.text);
    lps += sep + number(t.logprob);
    offsets += sep + std::to_string(job.text_offsets[i]);
    tops += sep;
    tops += '{';
    for (std::size_t k = 0; k < t.top.size(); ++k)
      tops += fmt::format("{}{}:{}", k ? "," : "", quote(engine.token_text(t.top[k].first)),
                          number(t.top[k].second));
    tops += '}';
  }
  return fmt::format(R"({{"tokens":[{}],"token_logprobs":[{}],"top_logprobs":[{}],"text_offset":[{}]}})",
                     tokens, lps, tops, offsets);
}

std::string ids_json(const std::vector<int>& ids, std::size_t from = 0) {
  std::string out = "[";
  for (std::size_t i = from; i < ids.size(); ++i) out += (i > from ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

// vLLM's extension: the ids beside the text, for clients that tokenize themselves.
std::string token_ids_json(const Job& job, std::size_t from, bool with_prompt) {
  if (!job.request.return_token_ids) return "";
  return (with_prompt ? R"(,"prompt_token_ids":)" + ids_json(job.request.prompt) : std::string()) +
         R"(,"token_ids":)" + ids_json(job.token_ids, from);
}

std::string usage_json(const Job& job) {
  const std::int64_t completion = job.completion_tokens;
  return fmt::format(R"({{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})",
                     job.prompt_tokens, completion, job.prompt_tokens + completion);
}

}  // namespace

std::string completion_json(const Job& job, const ServedModel& served, const Engine& engine) {
  return fmt::format(
      R"({{"id":{},"object":"text_completion","created":{},"model":{},"choices":[{{"text":{},"index":0,"logprobs":{},"finish_reason":{}{}}}],"usage":{}}})",
      quote(job.id), job.created, quote(served.name), quote(job.text),
      logprobs_json(job, engine, 0, job.tokens.size()), quote(job.finish_reason),
      token_ids_json(job, 0, true), usage_json(job));
}

std::string chunk_json(const Job& job, const ServedModel& served, const Engine& engine,
                       std::size_t text_from, std::size_t token_from, std::size_t id_from,
                       const std::string& finish_reason) {
  return fmt::format(
      R"({{"id":{},"object":"text_completion","created":{},"model":{},"choices":[{{"text":{},"index":0,"logprobs":{},"finish_reason":{}{}}}]}})",
      quote(job.id), job.created, quote(served.name), quote(job.text.substr(text_from)),
      logprobs_json(job, engine, token_from, job.tokens.size()),
      finish_reason.empty() ? "null" : quote(finish_reason), token_ids_json(job, id_from, id_from == 0));
}

std::string usage_chunk_json(const Job& job, const ServedModel& served) {
  return fmt::format(R"({{"id":{},"object":"text_completion","created":{},"model":{},"choices":[],"usage":{}}})",
                     quote(job.id), job.created, quote(served.name), usage_json(job));
}

}  // namespace recur::serve
