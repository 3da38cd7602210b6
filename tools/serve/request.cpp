// The request side of the API: a POST /v1/completions body to a checked Request, and OpenAI's
// error object. Apart from the responses (api.cpp) so that the request fuzzer
// (tests/fuzz/fuzz_request.cpp) builds it alone, without the engine.
#include "serve/api.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "recur/chat_template.h"
#include "recur/json_schema.h"
#include "recur/error.h"
#include "text/world_chat.h"
#include "text/unicode.h"
#include "util/json.h"

namespace recur::serve {

namespace {

using json::quote;

constexpr std::int64_t kChatMaxTokens = 4096;  // a chat reply's max_tokens when not given

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", param, message);
}

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

// Where `s` stops being UTF-8, as the tokenizer reports it: the offset and the bytes there.
std::string not_utf8(std::string_view s, std::size_t bad) {
  std::string bytes;
  for (std::size_t k = bad; k < std::min(s.size(), bad + 4); ++k)
    bytes += fmt::format(" {:02x}", static_cast<unsigned char>(s[k]));
  return fmt::format("not UTF-8 at byte {} of {} (bytes{})", bad, s.size(), bytes);
}

std::vector<int> encode(const std::string& text, const ServedModel& served, bool add_special) {
  // The tokenizer's own rule, for the byte-level model too (whose tokenizer takes any bytes).
  if (const std::size_t at = text::invalid_utf8_at(text); at != std::string::npos)
    throw bad("prompt", "the prompt is " + not_utf8(text, at));
  try {
    if (served.tokenizer) return served.tokenizer->encode(text, add_special);
    return ByteTokenizer().encode(text);
  } catch (const ArgumentError& e) {
    throw bad("prompt", fmt::format("the prompt cannot be encoded: {}", e.what()));
  }
}

// The fields both APIs share: the model, what is refused, the conversation continued.
void check_common(const json::Value& body, const ServedModel& served, Request& r) {
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
  for (const char* p : {"presence_penalty", "frequency_penalty"})
    if (const auto* v = field(body, p); v && real(*v, p, -2, 2) != 0.0)
      throw bad(p, fmt::format("'{}' is not supported (only 0)", p));
  if (const auto* v = field(body, "logit_bias"); v && !(v->is_object() && v->object().empty()))
    throw bad("logit_bias", "'logit_bias' is not supported");
  if (const auto* v = field(body, "user"); v && !v->is_string()) throw bad("user", "'user' must be a string");

  if (const auto* v = field(body, "previous_response_id")) {
    if (!v->is_string() || !valid_conversation_id(v->string()))
      throw bad("previous_response_id", "'previous_response_id' must be an id this server returned");
    r.previous_id = v->string();
  }
}

// How tokens are chosen and when they stop.
void check_sampling(const json::Value& body, const ServedModel& served, Request& r) {
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
    std::size_t total = 0;
    for (const auto& x : r.stop) {
      if (x.empty()) throw bad("stop", "a stop sequence is empty");
      total += x.size();
    }
    // Each generated token compares the held-back text with every stop sequence: their total
    // length bounds that work.
    if (total > served.max_stop_bytes)
      throw bad("stop", fmt::format("the stop sequences hold {} bytes, at most {} are allowed",
                                    total, served.max_stop_bytes));
  }
}

// What the response holds and how it is sent.
void check_response(const json::Value& body, Completion& c) {
  Request& r = c.request;
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
}

// The messages as a chat template takes them: a non-empty list of objects with a known role and
// a content that is a string, null, or a list of text parts. Other members (name, tool_calls,
// ...) pass through to the template.
// response_format: {"type": "text"}, {"type": "json_object"}, or {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}, "strict": true}}, compiled for the engine's mask.
// Its check against max_tokens waits for max_tokens (check_budget).
void check_response_format(const json::Value& body, Request& r) {
  const json::Value* v = field(body, "response_format");
  if (!v) return;
  constexpr const char* param = "response_format";
  if (!v->is_object()) throw bad(param, fmt::format("'response_format' must be an object, not {}", v->kind_name()));
  const json::Value* type = v->find("type");
  if (!type || !type->is_string())
    throw bad(param, "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  for (const auto& [key, value] : v->object())
    if (key != "type" && key != "json_schema")
      throw bad(param, fmt::format("unrecognized argument 'response_format.{}'", key));
  if (type->string() == "text") return;
  if (type->string() == "json_object") {
    r.grammar = JsonGrammar::any_object();
    return;
  }
  if (type->string() != "json_schema")
    throw bad(param, fmt::format("'response_format.type' is '{}', expected \"text\", \"json_object\" or \"json_schema\"",
                                 type->string()));
  const json::Value* js = v->find("json_schema");
  if (!js || !js->is_object()) throw bad(param, "'response_format.json_schema' must be an object with a 'schema'");
  for (const auto& [key, value] : js->object()) {
    if (key == "name") {
      if (!value.is_string()) throw bad(param, "'response_format.json_schema.name' must be a string");
    } else if (key == "strict") {
      if (!value.is_bool()) throw bad(param, "'response_format.json_schema.strict' must be true or false");
    } else if (key != "schema" && key != "description") {
      throw bad(param, fmt::format("unrecognized argument 'response_format.json_schema.{}'", key));
    }
  }
  const json::Value* schema = js->find("schema");
  if (!schema) throw bad(param, "'response_format.json_schema.schema' is required");
  std::string text;
  json::write(*schema, text);
  try {
    r.grammar = JsonGrammar::compile(text);
  } catch (const ArgumentError& e) {
    throw bad(param, fmt::format("response_format.json_schema.schema: {}", e.what()));
  }
}

// A schema's shortest value must fit in max_tokens (one byte a token at worst), so that it
// always closes.
void check_budget(Request& r) {
  if (r.grammar && r.max_tokens > 0 && r.grammar->min_bytes() > std::size_t(r.max_tokens))
    throw bad("max_tokens", fmt::format("max_tokens is {} but the response_format's shortest value takes {} "
                                        "bytes, and a token may hold one byte: raise max_tokens",
                                        r.max_tokens, r.grammar->min_bytes()));
}

std::string check_messages(const json::Value* messages) {
  if (!messages) throw bad("messages", "'messages' is required (a list of {\"role\", \"content\"} objects)");
  if (!messages->is_array())
    throw bad("messages", fmt::format("'messages' must be a list, not {}", messages->kind_name()));
  if (messages->array().empty()) throw bad("messages", "'messages' is empty: a chat needs at least one message");
  for (std::size_t i = 0; i < messages->array().size(); ++i) {
    const json::Value& m = messages->array()[i];
    if (!m.is_object())
      throw bad("messages", fmt::format("messages[{}] must be an object, not {}", i, m.kind_name()));
    const json::Value* role = m.find("role");
    if (!role || !role->is_string())
      throw bad("messages", fmt::format("messages[{}].role must be a string (system, developer, user, "
                                        "assistant or tool)", i));
    const std::string& r = role->string();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw bad("messages", fmt::format("messages[{}].role '{}' is not one of system, developer, user, "
                                        "assistant, tool", i, r));
    const json::Value* content = m.find("content");
    if (!content || content->is_null()) {
      if (r != "assistant")
        throw bad("messages", fmt::format("messages[{}].content is required for a {} message", i, r));
    } else if (content->is_array()) {
      for (std::size_t k = 0; k < content->array().size(); ++k) {
        const json::Value& part = content->array()[k];
        const json::Value* type = part.is_object() ? part.find("type") : nullptr;
        const json::Value* text = part.is_object() ? part.find("text") : nullptr;
        if (type && type->is_string() && type->string() != "text")
          throw bad("messages", fmt::format("messages[{}].content[{}] is of type '{}': this server takes "
                                            "text parts only ({{\"type\": \"text\", \"text\": \"...\"}}), "
                                            "not images, audio or files",
                                            i, k, type->string()));
        if (!type || !type->is_string() || !text || !text->is_string())
          throw bad("messages", fmt::format("messages[{}].content[{}] must be a text part ({{\"type\": "
                                            "\"text\", \"text\": \"...\"}}): this server takes text only",
                                            i, k));
      }
    } else if (!content->is_string()) {
      throw bad("messages", fmt::format("messages[{}].content must be a string or a list of text parts, "
                                        "not {}", i, content->kind_name()));
    }
  }
  // OpenAI's clients send an assistant message's calls with their arguments as a JSON string;
  // templates walk them as an object (`tool_call.arguments | items`), so the string is parsed,
  // as llama.cpp and vLLM do.
  std::string out = "[";
  for (std::size_t i = 0; i < messages->array().size(); ++i) {
    const json::Value& m = messages->array()[i];
    out += i ? ",{" : "{";
    bool first = true;
    for (const auto& [key, value] : m.object()) {
      out += (first ? "" : ",") + quote(key) + ":";
      first = false;
      if (key != "tool_calls" || value.is_null()) {
        json::write(value, out);
        continue;
      }
      if (!value.is_array())
        throw bad("messages", fmt::format("messages[{}].tool_calls must be a list, not {}", i, value.kind_name()));
      out += '[';
      for (std::size_t k = 0; k < value.array().size(); ++k) {
        const json::Value& call = value.array()[k];
        const json::Value* function = call.is_object() ? call.find("function") : nullptr;
        const json::Value* name = function && function->is_object() ? function->find("name") : nullptr;
        if (!name || !name->is_string())
          throw bad("messages", fmt::format("messages[{}].tool_calls[{}] must be {{\"type\": \"function\", "
                                            "\"function\": {{\"name\": ..., \"arguments\": ...}}}}", i, k));
        out += k ? ",{" : "{";
        bool first_member = true;
        for (const auto& [ck, cv] : call.object()) {
          out += (first_member ? "" : ",") + quote(ck) + ":";
          first_member = false;
          if (ck != "function") {
            json::write(cv, out);
            continue;
          }
          out += '{';
          bool first_field = true;
          for (const auto& [fk, fv] : cv.object()) {
            out += (first_field ? "" : ",") + quote(fk) + ":";
            first_field = false;
            if (fk == "arguments" && fv.is_string()) {
              json::Value parsed;
              try {
                parsed = json::parse(fv.string(), "arguments");
              } catch (const FormatError& e) {
                throw bad("messages", fmt::format("messages[{}].tool_calls[{}].function.arguments is not JSON: {}",
                                                  i, k, e.what()));
              }
              json::write(parsed, out);
            } else {
              json::write(fv, out);
            }
          }
          out += '}';
        }
        out += '}';
      }
      out += ']';
    }
    out += '}';
  }
  return out + "]";
}

// The request's tools: a list of {"type": "function", "function": {"name", "description",
// "parameters"}}, as JSON text for the template ("" for none).
std::string check_tools(const json::Value* tools) {
  if (!tools) return "";
  if (!tools->is_array()) throw bad("tools", fmt::format("'tools' must be a list, not {}", tools->kind_name()));
  for (std::size_t i = 0; i < tools->array().size(); ++i) {
    const json::Value& t = tools->array()[i];
    const json::Value* type = t.is_object() ? t.find("type") : nullptr;
    const json::Value* function = t.is_object() ? t.find("function") : nullptr;
    const json::Value* name = function && function->is_object() ? function->find("name") : nullptr;
    if (!type || !type->is_string() || type->string() != "function" || !name || !name->is_string() ||
        name->string().empty())
      throw bad("tools", fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                                     "\"parameters\": ...}}}}", i));
    if (const json::Value* p = function->find("parameters"); p && !p->is_object())
      throw bad("tools", fmt::format("tools[{}].function.parameters must be an object (a JSON schema), not {}", i,
                                     p->kind_name()));
  }
  if (tools->array().empty()) return "";
  std::string out;
  json::write(*tools, out);
  return out;
}

// The prompt text of checked messages: the model's chat template with add_generation_prompt, or
// RWKV's world format.
std::string chat_prompt(const std::string& messages, const std::string& tools, const std::string& extra,
                        const ServedModel& served, bool generation_prompt = true) {
  // RWKV's world format takes one variable: enable_thinking, RWKV7-G1's think mode.
  bool think = false;
  if (!served.chat_template && !tools.empty())
    throw bad("tools", "this model has no chat template (RWKV's world format): it takes no tools");
  if (!served.chat_template && !extra.empty()) {
    const json::Value v = json::parse(extra, "chat_template_kwargs");
    for (const auto& [key, value] : v.object()) {
      if (key != "enable_thinking" || !value.is_bool())
        throw bad("chat_template_kwargs", "this model has no chat template (RWKV's world format): its only "
                                          "variable is enable_thinking, true or false");
      think = value.boolean();
    }
  }
  try {
    if (served.chat_template)
      return served.chat_template->render(messages, tools, generation_prompt, ChatContent::kAuto, extra);
    if (served.world_chat) return text::world_chat_prompt(messages, generation_prompt, think);
  } catch (const ArgumentError& e) {
    throw bad("messages", fmt::format("the chat template refused the messages: {}", e.what()));
  } catch (const FormatError& e) {
    throw bad("messages", fmt::format("the chat template failed on the messages: {}", e.what()));
  }
  throw bad("messages", served.no_chat.empty() ? "this model has no chat template" : served.no_chat);
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  // A message may quote what the client sent: it leaves as UTF-8 whatever that was.
  return fmt::format(R"({{"error":{{"message":{},"type":{},"param":{},"code":{}}}}})",
                     quote(text::utf8_lossy(message)), quote(type),
                     param.empty() ? "null" : quote(text::utf8_lossy(param)),
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
  // JSON is UTF-8 (RFC 8259). A text prompt is checked first, so that its error names the
  // offset in the prompt; then the rest of the body (names, stop sequences, "user").
  if (const auto* p = body.find("prompt")) {
    const json::Value* words = p->is_string() ? p
                              : p->is_array() && p->array().size() == 1 && p->array()[0].is_string()
                                  ? &p->array()[0]
                                  : nullptr;
    if (words) {
      if (const std::size_t at = text::invalid_utf8_at(words->string()); at != std::string::npos)
        throw bad("prompt", "the prompt is " + not_utf8(words->string(), at));
    }
  }
  if (const std::size_t at = text::invalid_utf8_at(text); at != std::string::npos)
    throw bad("", "the body is " + not_utf8(text, at));
  static const char* const known[] = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logprobs",
      "stream", "stream_options", "n", "best_of", "echo", "presence_penalty", "frequency_penalty",
      "logit_bias", "suffix", "user", "previous_response_id", "ignore_eos", "return_token_ids",
      "response_format"};
  for (const auto& [key, value] : body.object()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) throw bad(key, fmt::format("unrecognized request argument '{}'", key));
  }

  Completion c;
  Request& r = c.request;
  check_common(body, served, r);
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
  if (const auto* v = field(body, "echo"); v && boolean(*v, "echo"))
    throw bad("echo", "'echo' is not supported: the response holds the completion only");
  if (const auto* v = field(body, "suffix"); v)
    throw bad("suffix", "'suffix' is not supported");
  if (r.prompt.empty() && !continuing) throw bad("prompt", "the prompt is empty");

  check_sampling(body, served, r);
  if (const auto* v = field(body, "logprobs"))
    r.logprobs = int(integer(*v, "logprobs", 0, served.max_logprobs));
  check_response(body, c);
  check_response_format(body, r);
  check_budget(r);
  return c;
}

Completion parse_chat_completion(std::string_view text, const ServedModel& served) {
  json::Value body;
  try {
    body = json::parse(text, "request body");
  } catch (const FormatError& e) {
    throw bad("", fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw bad("", fmt::format("the body must be a JSON object, not {}", body.kind_name()));
  if (const std::size_t at = text::invalid_utf8_at(text); at != std::string::npos)
    throw bad("", "the body is " + not_utf8(text, at));
  static const char* const known[] = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
      "seed", "stop", "logprobs", "top_logprobs", "stream", "stream_options", "n", "presence_penalty",
      "frequency_penalty", "logit_bias", "user", "previous_response_id", "ignore_eos", "return_token_ids",
      "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs", "reasoning_effort",
      "response_format"};
  for (const auto& [key, value] : body.object()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) throw bad(key, fmt::format("unrecognized request argument '{}'", key));
  }
  Completion c;
  Request& r = c.request;
  r.whole_prompt = true;
  check_common(body, served, r);
  // A reply runs to its end of turn; the bound keeps a model that never ends one from running
  // to --max-tokens-limit.
  r.max_tokens = std::min<std::int64_t>(kChatMaxTokens, served.max_tokens_limit);
  const std::string messages = check_messages(field(body, "messages"));
  if (!served.chat_template && !served.world_chat)
    throw bad("messages", served.no_chat.empty() ? "this model has no chat template" : served.no_chat);
  check_sampling(body, served, r);
  if (const auto* v = field(body, "max_completion_tokens")) {
    if (field(body, "max_tokens")) throw bad("max_completion_tokens", "give 'max_tokens' or 'max_completion_tokens', not both");
    r.max_tokens = integer(*v, "max_completion_tokens", 0, served.max_tokens_limit);
  }
  bool logprobs = false;
  if (const auto* v = field(body, "logprobs")) logprobs = boolean(*v, "logprobs");
  if (const auto* v = field(body, "top_logprobs")) {
    const int top = int(integer(*v, "top_logprobs", 0, served.max_logprobs));
    if (!logprobs) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.logprobs = top;
  } else if (logprobs) {
    r.logprobs = 0;
  }
  check_response(body, c);
  check_response_format(body, r);
  check_budget(r);
  // The whole conversation, as the template lays it out; the tokenizer adds nothing (the
  // template writes its own BOS), as transformers' apply_chat_template(tokenize=True) does.
  c.reply.tools_json = check_tools(field(body, "tools"));
  // "required" and a named function hold the reply to one call while sampling (the grammar is
  // built once the prompt says whether the reply starts inside a thought).
  bool call_required = false;
  std::string call_name;
  if (const auto* v = field(body, "tool_choice")) {
    const bool named = v->is_object();
    if (!named && !(v->is_string() && (v->string() == "auto" || v->string() == "none" || v->string() == "required")))
      throw bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
    if (named) {
      const json::Value* f = v->find("function");
      const json::Value* name = f && f->is_object() ? f->find("name") : nullptr;
      const json::Value* type = v->find("type");
      if (!name || !name->is_string() || (type && !(type->is_string() && type->string() == "function")))
        throw bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}");
      call_name = name->string();
      bool found = false;
      const json::Value tools = c.reply.tools_json.empty() ? json::Value() : json::parse(c.reply.tools_json, "tools");
      if (tools.is_array())
        for (const auto& t : tools.array())
          if (const json::Value* tf = t.find("function"); tf && tf->is_object())
            if (const json::Value* n = tf->find("name"); n && n->is_string()) found |= n->string() == call_name;
      if (!found)
        throw bad("tool_choice", fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", call_name));
    }
    call_required = named || v->string() == "required";
    if (call_required && (c.reply.tools_json.empty() || c.reply.tools_json == "[]"))
      throw bad("tool_choice", "'tool_choice' \"required\" needs 'tools'");
    if (call_required && r.grammar)
      throw bad("tool_choice", "give 'response_format' or a required tool call ('tool_choice'), not both");
    c.reply.parse_tool_calls = call_required || v->string() == "auto";
  }
  if (const auto* v = field(body, "parallel_tool_calls")) c.reply.parallel = boolean(*v, "parallel_tool_calls");
  // Template variables: chat_template_kwargs as they are (apply_chat_template's keyword
  // arguments), and reasoning_effort for templates that read it, unless the kwargs set it.
  std::string extra;
  const json::Value* kwargs = field(body, "chat_template_kwargs");
  if (kwargs) {
    if (!kwargs->is_object())
      throw bad("chat_template_kwargs", fmt::format("'chat_template_kwargs' must be an object, not {}", kwargs->kind_name()));
    for (const auto& [key, value] : kwargs->object())
      if (key == "messages" || key == "tools" || key == "add_generation_prompt")
        throw bad("chat_template_kwargs", fmt::format("chat_template_kwargs cannot set '{}'", key));
    json::write(*kwargs, extra);
  }
  if (const auto* v = field(body, "reasoning_effort")) {
    if (!v->is_string() || (v->string() != "none" && v->string() != "minimal" && v->string() != "low" &&
                            v->string() != "medium" && v->string() != "high"))
      throw bad("reasoning_effort", "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
    if (!kwargs || !kwargs->find("reasoning_effort")) {
      const std::string member = R"("reasoning_effort":)" + quote(v->string());
      extra = extra.empty() || extra == "{}" ? "{" + member + "}" : extra.substr(0, extra.size() - 1) + "," + member + "}";
    }
  }
  const std::string prompt = chat_prompt(messages, c.reply.tools_json, extra, served);
  c.reply.in_thought = served.reply_format.opens_thought(prompt);
  c.reply.in_thought_tag = served.reply_format.opens_thought_tag(prompt);
  if (call_required) {
    try {
      r.grammar = tool_call_grammar(served.reply_format, c.reply, call_name);
    } catch (const ArgumentError& e) {
      throw bad("tools", fmt::format("'tool_choice' needs the call held to the tools' schemas: {}", e.what()));
    }
    if (r.max_tokens > 0 && r.grammar->min_bytes() > std::size_t(r.max_tokens))
      throw bad("max_tokens", fmt::format("max_tokens is {} but the shortest tool call takes {} bytes (one byte a "
                                          "token at worst): raise max_tokens", r.max_tokens, r.grammar->min_bytes()));
  }
  r.prompt = encode(prompt, served, false);
  if (r.prompt.empty()) throw bad("messages", "the chat template rendered an empty prompt");
  // The end of the last whole message: the conversation rendered without the generation prompt,
  // when its tokens begin the prompt's (a tokenizer may merge the last message's end with what
  // follows differently: then no checkpoint). The state there is kept beside the reply's.
  try {
    const auto before = encode(chat_prompt(messages, c.reply.tools_json, extra, served, false), served, false);
    if (!before.empty() && before.size() < r.prompt.size() &&
        std::equal(before.begin(), before.end(), r.prompt.begin()))
      r.checkpoint = before.size();
  } catch (const ApiError&) {
    // A template that cannot end without the generation prompt: no checkpoint.
  }
  r.end_ids = served.chat_end_ids;
  r.stop.insert(r.stop.end(), served.chat_stop.begin(), served.chat_stop.end());
  return c;
}

}  // namespace recur::serve
