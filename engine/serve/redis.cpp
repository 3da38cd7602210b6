#include "serve/redis.h"

#include <fmt/format.h>
#include <hiredis.h>

#include <cerrno>
#include <cmath>
#include <memory>

namespace recur::serve {

RedisAddress RedisAddress::parse(const std::string& url, const std::string& option) {
  const auto bad = [&](const std::string& why) {
    return ArgumentError(fmt::format("{} '{}': {} (expected redis://[:password@]host[:port][/db])",
                                     option, url, why));
  };
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) throw bad("not a redis:// address");
  RedisAddress a;
  std::string rest = url.substr(scheme.size());
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string user = rest.substr(0, at);
    a.password = user.empty() || user[0] != ':' ? user : user.substr(1);
    rest = rest.substr(at + 1);
  }
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    if (!db.empty()) {
      if (db.find_first_not_of("0123456789") != std::string::npos || db.size() > 4) throw bad("the database must be a number");
      a.db = std::stoi(db);
    }
    rest = rest.substr(0, slash);
  }
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw bad("the port must be 1 to 65535");
    a.port = std::stoi(port);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) throw bad("no host");
  a.host = rest;
  a.url = fmt::format("redis://{}:{}/{}", a.host, a.port, a.db);
  return a;
}

void Redis::ReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

Redis::Redis(RedisAddress address, double timeout_seconds)
    : address_(std::move(address)), timeout_(timeout_seconds) {}

Redis::~Redis() { drop(); }

void Redis::drop() {
  if (context_) redisFree(context_);
  context_ = nullptr;
}

void Redis::connect() {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_);
  tv.tv_usec = static_cast<suseconds_t>((timeout_ - std::floor(timeout_)) * 1e6);
  redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
  if (!c) throw StoreUnavailable(fmt::format("Redis at {}: cannot allocate a connection", address_.url));
  if (c->err) {
    const std::string why = c->errstr;
    redisFree(c);
    throw StoreUnavailable(fmt::format("Redis at {} cannot be reached: {}", address_.url, why));
  }
  redisSetTimeout(c, tv);
  context_ = c;
  if (!address_.password.empty()) command({"AUTH", address_.password});
  if (address_.db != 0) {
    const std::string db = std::to_string(address_.db);
    command({"SELECT", db});
  }
}

Redis::Reply Redis::command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  Reply reply;
  // A connection made before Redis restarted fails on its first command: one more try on a new
  // connection (every command here is idempotent). A failure on a fresh connection is final, and
  // so is a timeout (a Redis that is stalled, not restarted: another try would double the wait).
  for (int attempt = 0;; ++attempt) {
    const bool fresh = context_ == nullptr;
    if (fresh) connect();
    reply.reset(static_cast<redisReply*>(
        redisCommandArgv(context_, int(argv.size()), argv.data(), lengths.data())));
    if (reply) break;
    const std::string why = context_->errstr;
    const bool timed_out = context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    drop();  // the connection is in an unknown state: the next call makes a new one
    if (!fresh && attempt == 0 && !timed_out) continue;
    throw StoreUnavailable(fmt::format("Redis at {} stopped answering: {}", address_.url, why));
  }
  if (reply->type == REDIS_REPLY_ERROR)
    throw StoreUnavailable(fmt::format("Redis at {} refused {}: {}", address_.url, std::string(args[0]),
                                       std::string(reply->str, reply->len)));
  return reply;
}

void Redis::ping() { command({"PING"}); }

void Redis::set(const std::string& key, std::string_view value, long ttl_seconds) {
  if (ttl_seconds > 0) {
    const std::string ttl = std::to_string(ttl_seconds);
    command({"SET", key, value, "EX", ttl});
  } else {
    command({"SET", key, value});
  }
}

std::optional<std::string> Redis::get(const std::string& key) {
  Reply r = command({"GET", key});
  if (r->type == REDIS_REPLY_NIL) return std::nullopt;
  if (r->type != REDIS_REPLY_STRING)
    throw StoreUnavailable(fmt::format("Redis at {}: GET {} answered type {}", address_.url, key, r->type));
  return std::string(r->str, r->len);
}

bool Redis::exists(const std::string& key) {
  Reply r = command({"EXISTS", key});
  return r->type == REDIS_REPLY_INTEGER && r->integer > 0;
}

long long Redis::memory_usage(const std::string& key) {
  Reply r = command({"MEMORY", "USAGE", key});
  return r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

}  // namespace recur::serve
