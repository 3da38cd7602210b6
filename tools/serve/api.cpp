#include "serve/api.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/json.h"

namespace recur::serve {

namespace {
using json::quote;
std::string number(double x) { return fmt::format("{}", x); }
}  // namespace

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

// The chat API's logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
std::string chat_logprobs_json(const Job& job, const Engine& engine, std::size_t from, std::size_t to) {
  if (job.request.logprobs < 0) return "null";
  std::string content;
  for (std::size_t i = from; i < to; ++i) {
    const Token& t = job.tokens[i];
    std::string tops;
    for (std::size_t k = 0; k < t.top.size(); ++k)
      tops += fmt::format(R"({}{{"token":{},"logprob":{},"bytes":null}})", k ? "," : "",
                          quote(engine.token_text(t.top[k].first)), number(t.top[k].second));
    content += fmt::format(R"({}{{"token":{},"logprob":{},"bytes":null,"top_logprobs":[{}]}})",
                           i == from ? "" : ",", quote(t.text), number(t.logprob), tops);
  }
  return fmt::format(R"({{"content":[{}]}})", content);
}

std::string chat_usage_json(const Job& job) {
  const std::int64_t completion = job.completion_tokens;
  return fmt::format(
      R"({{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}})",
      job.prompt_tokens, completion, job.prompt_tokens + completion, job.cached_tokens);
}

}  // namespace

std::string chat_completion_json(const Job& job, const ServedModel& served, const Engine& engine,
                                 const ReplyOptions& reply) {
  const ReplyMessage message = parse_reply(job.text, served.reply_format, reply);
  const std::string finish = message.tool_calls.empty() || job.finish_reason != "stop" ? job.finish_reason : "tool_calls";
  return fmt::format(
      R"({{"id":{},"object":"chat.completion","created":{},"model":{},"choices":[{{"index":0,"message":{},"logprobs":{},"finish_reason":{}{}}}],"usage":{}}})",
      quote(job.id), job.created, quote(served.name), message.to_json(),
      chat_logprobs_json(job, engine, 0, job.tokens.size()), quote(finish),
      token_ids_json(job, 0, true), chat_usage_json(job));
}

std::string chat_chunk_json(const Job& job, const ServedModel& served, const Engine& engine,
                            const ReplyOptions& reply, ChatStreamed& sent, bool first,
                            std::size_t token_from, const std::string& finish_reason) {
  // The first chunk holds the role alone, as OpenAI's does; the last (with the finish reason)
  // may hold nothing.
  std::string delta;
  std::string finish = finish_reason;
  if (first) {
    delta = R"("role":"assistant","content":"")";
    token_from = job.tokens.size();
  } else {
    const ReplyMessage m = parse_reply(job.text, served.reply_format, reply, !job.finished);
    if (m.reasoning.size() > sent.reasoning)
      delta += R"("reasoning_content":)" + quote(std::string_view(m.reasoning).substr(sent.reasoning));
    if (m.content.size() > sent.content)
      delta += std::string(delta.empty() ? "" : ",") + R"("content":)" + quote(std::string_view(m.content).substr(sent.content));
    if (m.tool_calls.size() > sent.tool_calls) {
      delta += std::string(delta.empty() ? "" : ",") + R"("tool_calls":[)";
      for (std::size_t i = sent.tool_calls; i < m.tool_calls.size(); ++i)
        delta += fmt::format(R"({}{{"index":{},"id":{},"type":"function","function":{{"name":{},"arguments":{}}}}})",
                             i > sent.tool_calls ? "," : "", i, quote(m.tool_calls[i].id),
                             quote(m.tool_calls[i].name), quote(m.tool_calls[i].arguments));
      delta += ']';
    }
    if (delta.empty() && finish_reason.empty()) delta = R"("content":"")";
    sent.reasoning = std::max(sent.reasoning, m.reasoning.size());
    sent.content = std::max(sent.content, m.content.size());
    sent.tool_calls = std::max(sent.tool_calls, m.tool_calls.size());
    if (finish == "stop" && !m.tool_calls.empty()) finish = "tool_calls";
  }
  return fmt::format(
      R"({{"id":{},"object":"chat.completion.chunk","created":{},"model":{},"choices":[{{"index":0,"delta":{{{}}},"logprobs":{},"finish_reason":{}}}]}})",
      quote(job.id), job.created, quote(served.name), delta,
      token_from < job.tokens.size() ? chat_logprobs_json(job, engine, token_from, job.tokens.size()) : "null",
      finish.empty() ? "null" : quote(finish));
}

std::string chat_usage_chunk_json(const Job& job, const ServedModel& served) {
  return fmt::format(R"({{"id":{},"object":"chat.completion.chunk","created":{},"model":{},"choices":[],"usage":{}}})",
                     quote(job.id), job.created, quote(served.name), chat_usage_json(job));
}

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
