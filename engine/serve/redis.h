// A small synchronous Redis client on hiredis (Debian's libhiredis-dev): the commands the
// conversation store needs, binary-safe, with timeouts, and a connection that is dropped on any
// error and made again on the next call. Not thread-safe: the store serializes its calls.
// Private to the serving library (hiredis stays out of the public headers); its errors are
// recur/serve/store.h's StoreUnavailable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/store.h"

struct redisContext;
struct redisReply;

namespace recur::serve {

/// redis://[:password@]host[:port][/db]
struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
  std::string url;  ///< as given, without the password, for messages

  /// Throws ArgumentError naming `option` for anything else.
  static RedisAddress parse(const std::string& url, const std::string& option);
};

class Redis {
 public:
  Redis(RedisAddress address, double timeout_seconds);
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  const RedisAddress& address() const { return address_; }
  bool connected() const { return context_ != nullptr; }

  /// Each throws StoreUnavailable when Redis cannot be reached or refuses the command.
  void ping();
  /// SET key value EX ttl (ttl 0: no expiry).
  void set(const std::string& key, std::string_view value, long ttl_seconds);
  std::optional<std::string> get(const std::string& key);
  bool exists(const std::string& key);
  /// MEMORY USAGE key: the bytes Redis holds for it (0 if missing).
  long long memory_usage(const std::string& key);

 private:
  struct ReplyDeleter {
    void operator()(redisReply* r) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
  Reply command(const std::vector<std::string_view>& args);
  void connect();
  void drop();

  RedisAddress address_;
  double timeout_;
  redisContext* context_ = nullptr;
};

}  // namespace recur::serve
