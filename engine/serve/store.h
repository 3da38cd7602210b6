// The conversations a server keeps: each finished response's final state (Decoder::save_bytes:
// versioned, checksummed, tagged with the model's fingerprint) and its owner (the tag of the
// API key that made it, see recur/serve/auth.h), under its response id.
//
// A ConversationStore is a memory cache, bounded in bytes, in front of one StoreBackend:
//  * none: what the budget pushes out is gone, and so is everything at exit;
//  * a directory (embedded): the least recently used states go to DIR/<id>.state when memory is
//    full, and everything does at shutdown, so a restarted server finds them again;
//  * Redis (shared by replicas): every state is written through at once, with an expiry. A state
//    that cannot be written (Redis down or stalled) stays in memory, pinned, and a thread writes
//    it when Redis is back; a state only in Redis cannot be read while it is down
//    (StoreUnavailable).
// No lock is held across a backend's I/O: a state in memory is returned at once whatever the
// backend is doing, and a slow backend delays only the call that needs it. Ids never change what
// they name (a continuation gets a new id), so a cached copy is never stale.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "recur/error.h"

namespace recur::serve {

/// The store's backend cannot be reached (or answered with an error). The message says which
/// and why.
class StoreUnavailable : public Error {
 public:
  using Error::Error;
};

/// Whether `id` has the form of an id a server gives (letters, digits, '-' and '_', at most 64):
/// anything else is never looked up, on disk or in Redis.
inline bool valid_conversation_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  return true;
}

/// A kept conversation: its owner tag ("" for none) and its state.
struct Conversation {
  std::string owner;
  std::string state;
};
/// What a backend holds for a conversation: "recurcv1", one byte for the owner tag's length, the
/// tag, then the state. Bytes without that header (states kept before owners were) decode as a
/// conversation with no owner.
std::string encode_conversation(std::string_view owner, std::string_view state);
Conversation decode_conversation(std::string blob);

/// Where the states memory does not hold go. Each call may block on its I/O and is called with
/// no lock of the store held; implementations are thread-safe.
class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  /// true: every state is written at once (Redis); false: only what memory lets go, and at
  /// shutdown (a directory).
  virtual bool write_through() const = 0;
  /// Throws StoreUnavailable (unreachable) or Error (a failed write).
  virtual void write(const std::string& id, std::string_view blob) = 0;
  /// nullopt for an unknown id; throws StoreUnavailable when it cannot be asked.
  virtual std::optional<std::string> read(const std::string& id) = 0;
  /// Whether a call now is worth trying (false while a failed backend waits for its retry).
  virtual bool ready() const { return true; }
  /// Throws StoreUnavailable while the backend is down.
  virtual void ping() {}
  virtual std::size_t count() const { return 0; }  ///< states held (the directory's files)
  virtual std::string describe() const = 0;
};

/// DIR/<id>.state, written atomically; the directory is created and indexed at start.
std::unique_ptr<StoreBackend> directory_backend(const std::string& dir);
/// Redis at `url`, each state with an expiry of `ttl_seconds` (0: none). Throws StoreUnavailable
/// when Redis does not answer at start, ArgumentError for a bad address.
std::unique_ptr<StoreBackend> redis_backend(const std::string& url, long ttl_seconds, double timeout_seconds);

struct StoreOptions {
  std::size_t memory_budget = std::size_t(1) << 30;
  std::string dir;        ///< the directory backend's directory ("" memory only)
  std::string redis_url;  ///< non-empty: the Redis backend
  long ttl_seconds = 7 * 24 * 3600;  ///< Redis: each state's expiry (0: none)
  double redis_timeout = 2.0;        ///< seconds for connecting and for each command
};

class ConversationStore {
 public:
  /// Opens the backend the options name: creates and indexes the directory, or connects to
  /// Redis. Throws ArgumentError (a bad directory or address) or StoreUnavailable (Redis down).
  explicit ConversationStore(const StoreOptions& options);
  /// A cache of `memory_budget` bytes in front of `backend` (null: none).
  ConversationStore(std::unique_ptr<StoreBackend> backend, std::size_t memory_budget);
  ~ConversationStore();
  ConversationStore(const ConversationStore&) = delete;
  ConversationStore& operator=(const ConversationStore&) = delete;

  static bool valid_id(const std::string& id) { return valid_conversation_id(id); }

  /// Keeps `state` under `id` for `owner`. With a write-through backend it returns once the
  /// state is written, or, when the backend cannot take it now, once it waits in memory for it
  /// (never throws for that).
  void put(const std::string& id, std::string state, const std::string& owner = "");
  /// The state under `id` if its owner is `owner`; nullopt for an unknown id and for another
  /// owner's alike. Throws StoreUnavailable when only the backend could know and it cannot be
  /// asked now.
  std::optional<std::string> get(const std::string& id, const std::string& owner = "");

  /// At shutdown: a directory gets every state held only in memory; Redis gets one more try for
  /// what waits. Returns how many were written.
  std::size_t persist();

  struct Stats {
    std::size_t memory_count = 0, memory_bytes = 0, disk_count = 0, dropped = 0, pending = 0;
    std::int64_t reads = 0, writes = 0, errors = 0;
    bool up = true;  ///< Redis: whether the last call reached it
  };
  Stats stats() const;
  /// "directory DIR", "memory only" or "Redis at redis://...".
  std::string describe() const;
  const std::string& dir() const { return dir_; }
  bool redis() const { return backend_ && backend_->write_through(); }

 private:
  using State = std::shared_ptr<const std::string>;
  struct Entry {
    std::string owner;
    State state;
    bool saved = false;    // a copy is in the backend
    bool writing = false;  // being written now, outside the lock
    std::list<std::string>::iterator lru;
  };
  struct Spill {
    std::string id, owner;
    State state;
  };
  void insert_locked(const std::string& id, std::string owner, State state, bool saved);
  std::vector<Spill> evict_locked();
  void spill(std::vector<Spill> victims);
  std::size_t write_waiting();  // write-through: writes what waits; returns how many
  void retry_loop();

  std::unique_ptr<StoreBackend> backend_;
  std::size_t budget_;
  std::string dir_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> memory_;
  std::list<std::string> lru_;  // front: most recently used
  std::size_t memory_bytes_ = 0;
  std::unordered_map<std::string, Spill> spilling_;  // on their way to the directory
  std::size_t dropped_ = 0, pending_ = 0;
  std::int64_t reads_ = 0, writes_ = 0, errors_ = 0;
  bool up_ = true;

  // Write-through: a thread that writes what waits once the backend is back.
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread retry_;
};

}  // namespace recur::serve
