// The conversations a server keeps: each finished response's final state, as saved-state bytes
// (Decoder::save_bytes: versioned, checksummed, tagged with the model's fingerprint), under its
// response id. Two backends:
//  * a directory (the default, embedded): states live in memory up to a byte budget; past it
//    the least recently used go to DIR/<id>.state, and everything does at shutdown, so a
//    restarted server finds them again; without a directory, what the budget pushes out is gone;
//  * Redis (shared by replicas): every state is written through to Redis at once, with an
//    expiry, and memory is a bounded cache in front of it. A state that cannot be written
//    (Redis down) stays in memory, pinned, and is written when Redis comes back; a state that is
//    only in Redis cannot be read while it is down (StoreUnavailable).
// Ids never change what they name (a continuation gets a new id), so a cached copy is never
// stale, whichever replica wrote it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "serve/redis.h"

namespace recur::serve {

struct StoreOptions {
  std::size_t memory_budget = std::size_t(1) << 30;
  std::string dir;        ///< the directory backend's directory ("" memory only)
  std::string redis_url;  ///< non-empty: the Redis backend
  long ttl_seconds = 7 * 24 * 3600;  ///< Redis: each state's expiry (0: none)
  double redis_timeout = 2.0;        ///< seconds for connecting and for each command
};

class ConversationStore {
 public:
  /// Opens the backend: creates and indexes the directory, or connects to Redis. Throws
  /// ArgumentError (a bad directory or address) or StoreUnavailable (Redis down at start).
  explicit ConversationStore(const StoreOptions& options);
  ~ConversationStore();

  /// Whether `id` has the form of an id this server gives (letters, digits, '-' and '_', at most
  /// 64): anything else is never looked up, on disk or in Redis.
  static bool valid_id(const std::string& id);

  /// Keeps `bytes` under `id`. Never throws for an unreachable Redis: the state then waits in
  /// memory for it.
  void put(const std::string& id, std::string bytes);
  /// The bytes under `id`, nullopt when the id is unknown. Throws StoreUnavailable when only
  /// Redis could know and it cannot be reached.
  std::optional<std::string> get(const std::string& id);

  /// At shutdown: the directory backend writes every state held only in memory; the Redis
  /// backend tries once more to write what waits. Returns how many were written.
  std::size_t persist();

  struct Stats {
    std::size_t memory_count = 0, memory_bytes = 0, disk_count = 0, dropped = 0, pending = 0;
    std::int64_t reads = 0, writes = 0, errors = 0;
    bool up = true;  ///< Redis: whether the last call reached it
  };
  Stats stats() const;
  /// "directory DIR", "memory only" or "Redis at redis://...".
  std::string describe() const;
  const std::string& dir() const { return options_.dir; }
  bool redis() const { return redis_ != nullptr; }

 private:
  struct Entry {
    std::string bytes;
    bool saved = false;  // a copy is in the directory or in Redis
    std::list<std::string>::iterator lru;
  };
  void insert_locked(const std::string& id, std::string bytes, bool saved);
  void evict_locked();
  bool flush_locked();  // Redis: writes what waits; false if Redis is still down
  std::string path(const std::string& id) const;
  static std::string key(const std::string& id) { return "recur:conversation:" + id; }
  void retry_loop();

  StoreOptions options_;
  std::unique_ptr<Redis> redis_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> memory_;
  std::list<std::string> lru_;  // front: most recently used
  std::size_t memory_bytes_ = 0;
  std::unordered_map<std::string, bool> disk_;  // ids with a file in the directory
  std::size_t dropped_ = 0, pending_ = 0;
  std::int64_t reads_ = 0, writes_ = 0, errors_ = 0;
  bool up_ = true;
  double retry_after_ = 0;  // Redis: no new connection attempt before this time

  // Redis: a thread that writes what waits once Redis is back.
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread retry_;
};

}  // namespace recur::serve
