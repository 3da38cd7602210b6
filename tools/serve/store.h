// The conversations a server keeps: each finished response's final state, as saved-state bytes
// (Decoder::save_bytes: versioned, checksummed, tagged with the model's fingerprint), under its
// response id. They live in memory up to a byte budget; past it the least recently used go to a
// directory (when one is given) as <id>.state files, which a restarted server finds again.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace recur::serve {

class ConversationStore {
 public:
  /// `dir` empty: memory only, and what the budget pushes out is gone. Otherwise the directory
  /// is created if needed and the states already in it are indexed (not read).
  ConversationStore(std::size_t memory_budget, std::string dir);

  /// Whether `id` has the form of an id this server gives (letters, digits, '-' and '_', at most
  /// 64): anything else is never looked up, on disk least of all.
  static bool valid_id(const std::string& id);

  /// Keeps `bytes` under `id` (most recently used), pushing the least recently used out of
  /// memory while the budget is exceeded.
  void put(const std::string& id, std::string bytes);
  /// The bytes under `id`, from memory or the directory (then cached in memory); nullopt when
  /// the id is unknown. Throws Error when a file that should be there cannot be read.
  std::optional<std::string> get(const std::string& id);
  bool contains(const std::string& id) const;

  /// Writes every state held only in memory to the directory (at shutdown). Returns how many.
  std::size_t persist();

  struct Stats {
    std::size_t memory_count = 0, memory_bytes = 0, disk_count = 0, dropped = 0;
  };
  Stats stats() const;
  const std::string& dir() const { return dir_; }
  std::size_t budget() const { return budget_; }

 private:
  struct Entry {
    std::string bytes;
    bool on_disk = false;  // a copy is in the directory too
    std::list<std::string>::iterator lru;
  };
  void evict_locked();
  std::string path(const std::string& id) const;

  std::size_t budget_;
  std::string dir_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> memory_;
  std::list<std::string> lru_;  // front: most recently used
  std::size_t memory_bytes_ = 0;
  std::unordered_map<std::string, bool> disk_;  // ids with a file in dir_
  std::size_t dropped_ = 0;
};

}  // namespace recur::serve
