// The OpenAI completions API on top of the engine: a request body to a checked Request, and a
// job's progress to response JSON (a whole response, or server-sent-event chunks).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "recur/chat_reply.h"
#include "serve/engine.h"

namespace recur {
class ChatTemplate;
}

namespace recur::serve {

/// A request the API refuses: the HTTP status and OpenAI's error object fields.
struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_type, std::string error_param, const std::string& message)
      : std::runtime_error(message), status(http_status), type(std::move(error_type)), param(std::move(error_param)) {}
  int status;
  std::string type;   // invalid_request_error, not_found_error, ...
  std::string param;  // the offending field, "" for none
};

/// {"error": {"message", "type", "param", "code"}}
std::string error_json(const std::string& message, const std::string& type,
                       const std::string& param = "", const std::string& code = "");

struct ServedModel {
  std::string name;  ///< what "model" must say (or leave out)
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  ///< null: bytes
  std::int64_t max_tokens_limit = 1 << 20;
  int max_logprobs = 20;
  std::size_t max_stop_bytes = 4096;  ///< the total length of a request's stop sequences

  // The chat API (POST /v1/chat/completions).
  std::shared_ptr<const ChatTemplate> chat_template;  ///< null: none
  bool world_chat = false;       ///< no template, but RWKV's world format (text/world_chat.h)
  std::string no_chat;           ///< why there is neither: the 400's message
  std::vector<int> chat_end_ids;      ///< ids that end a turn besides eos (<|im_end|>)
  std::vector<std::string> chat_stop;  ///< text that ends a turn ("\n\n" in the world format)
  ReplyFormat reply_format;            ///< how replies write thoughts and tool calls (the template's)
};

struct Completion {
  Request request;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  /// The chat API's reading of the reply (tools, tool_choice, whether the prompt opened a
  /// thought); the call ids' base is set from the response id when the job is made.
  ReplyOptions reply;
};

/// What a chat stream has sent of the reply's message so far.
struct ChatStreamed {
  std::size_t content = 0, reasoning = 0, tool_calls = 0;
};

/// Parses and checks a POST /v1/completions body; throws ApiError naming the field.
Completion parse_completion(std::string_view body, const ServedModel& served);

/// Parses and checks a POST /v1/chat/completions body, renders its messages into the prompt;
/// throws ApiError naming the field (a message the template refuses: its reason).
Completion parse_chat_completion(std::string_view body, const ServedModel& served);

/// The whole response of a finished job.
std::string completion_json(const Job& job, const ServedModel& served, const Engine& engine);

/// One streamed chunk: the text, tokens and ids after `text_from`, `token_from` and `id_from`,
/// and the finish reason when given.
std::string chunk_json(const Job& job, const ServedModel& served, const Engine& engine,
                       std::size_t text_from, std::size_t token_from, std::size_t id_from,
                       const std::string& finish_reason);
/// The last chunk with usage only (stream_options.include_usage).
std::string usage_chunk_json(const Job& job, const ServedModel& served);

/// The chat API's whole response (object "chat.completion"): the reply read as a message
/// (content, reasoning_content, tool_calls) with `reply`.
std::string chat_completion_json(const Job& job, const ServedModel& served, const Engine& engine,
                                 const ReplyOptions& reply);
/// One streamed "chat.completion.chunk": the role alone (`first`), or what the reply's message
/// gained since `sent` (read partially until the job is finished: text that may begin a marker
/// or a call is held back) with the logprobs after `token_from`, and the finish reason when
/// given. The deltas of a stream add up to chat_completion_json's message.
std::string chat_chunk_json(const Job& job, const ServedModel& served, const Engine& engine,
                            const ReplyOptions& reply, ChatStreamed& sent, bool first,
                            std::size_t token_from, const std::string& finish_reason);
/// The chat stream's last chunk with usage only.
std::string chat_usage_chunk_json(const Job& job, const ServedModel& served);

}  // namespace recur::serve
