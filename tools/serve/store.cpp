#include "serve/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "recur/error.h"
#include "util/file.h"

namespace recur::serve {

namespace fs = std::filesystem;

namespace {
constexpr const char* kSuffix = ".state";
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

bool ConversationStore::valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return false;
  return true;
}

ConversationStore::ConversationStore(const StoreOptions& options) : options_(options) {
  if (!options_.redis_url.empty()) {
    redis_ = std::make_unique<Redis>(RedisAddress::parse(options_.redis_url, "--store"),
                                     options_.redis_timeout);
    redis_->ping();  // down at start: the caller reports it and stops
    retry_ = std::thread([this] { retry_loop(); });
    return;
  }
  if (options_.dir.empty()) return;
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec || !fs::is_directory(options_.dir))
    throw ArgumentError(fmt::format("--state-dir {}: cannot create the directory{}", options_.dir,
                                    ec ? ": " + ec.message() : ""));
  for (const auto& e : fs::directory_iterator(options_.dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.size() <= 6 || name.compare(name.size() - 6, 6, kSuffix) != 0)
      continue;
    const std::string id = name.substr(0, name.size() - 6);
    if (valid_id(id)) disk_[id] = true;
  }
}

ConversationStore::~ConversationStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (retry_.joinable()) retry_.join();
}

std::string ConversationStore::describe() const {
  if (redis_) return "Redis at " + redis_->address().url;
  if (!options_.dir.empty()) return "directory " + options_.dir;
  return "memory only";
}

std::string ConversationStore::path(const std::string& id) const {
  return (fs::path(options_.dir) / (id + kSuffix)).string();
}

void ConversationStore::insert_locked(const std::string& id, std::string bytes, bool saved) {
  auto it = memory_.find(id);
  if (it != memory_.end()) {
    memory_bytes_ -= it->second.bytes.size();
    if (redis_ && !it->second.saved) --pending_;
    lru_.erase(it->second.lru);
    memory_.erase(it);
  }
  lru_.push_front(id);
  memory_bytes_ += bytes.size();
  if (redis_ && !saved) ++pending_;
  memory_.emplace(id, Entry{std::move(bytes), saved, lru_.begin()});
  evict_locked();
}

void ConversationStore::put(const std::string& id, std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool saved = false;
  if (redis_ && now() >= retry_after_) {
    try {
      redis_->set(key(id), bytes, options_.ttl_seconds);
      saved = true;
      ++writes_;
      up_ = true;
    } catch (const StoreUnavailable& e) {
      ++errors_;
      if (up_) spdlog::warn("conversation store: {}; states wait in memory until it is back", e.what());
      up_ = false;
      retry_after_ = now() + 1.0;
    }
  }
  insert_locked(id, std::move(bytes), saved);
  if (redis_ && !saved) wake_.notify_all();
}

void ConversationStore::evict_locked() {
  // The entry just used stays even when it alone passes the budget: it is about to be needed.
  // So do states waiting for Redis: memory is their only copy.
  auto victim = lru_.end();
  while (memory_bytes_ > options_.memory_budget && lru_.size() > 1) {
    victim = std::prev(victim);
    if (victim == lru_.begin()) break;
    const std::string id = *victim;
    auto it = memory_.find(id);
    if (redis_ && !it->second.saved) continue;
    if (!redis_ && !options_.dir.empty() && !it->second.saved) {
      detail::write_file_atomically(path(id), it->second.bytes, "ConversationStore");
      disk_[id] = true;
    }
    if (!redis_ && options_.dir.empty()) ++dropped_;
    memory_bytes_ -= it->second.bytes.size();
    victim = lru_.erase(victim);
    memory_.erase(it);
  }
}

std::optional<std::string> ConversationStore::get(const std::string& id) {
  if (!valid_id(id)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_.find(id);
  if (it != memory_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.bytes;
  }
  std::optional<std::string> bytes;
  if (redis_) {
    if (now() < retry_after_)
      throw StoreUnavailable(fmt::format("Redis at {} is unreachable (retrying every second)",
                                         redis_->address().url));
    try {
      bytes = redis_->get(key(id));
      ++reads_;
      up_ = true;
    } catch (const StoreUnavailable&) {
      ++errors_;
      up_ = false;
      retry_after_ = now() + 1.0;
      wake_.notify_all();
      throw;
    }
    if (!bytes) return std::nullopt;
  } else {
    if (!disk_.count(id)) return std::nullopt;
    bytes = detail::read_file(path(id));
    if (!bytes)
      throw Error(fmt::format("[ConversationStore] {}: cannot read the saved state", path(id)));
    ++reads_;
  }
  insert_locked(id, *bytes, true);
  return bytes;
}

bool ConversationStore::flush_locked() {
  try {
    redis_->ping();
    up_ = true;
    retry_after_ = 0;
    for (auto& [id, e] : memory_) {
      if (e.saved) continue;
      redis_->set(key(id), e.bytes, options_.ttl_seconds);
      e.saved = true;
      --pending_;
      ++writes_;
    }
    evict_locked();
    return true;
  } catch (const StoreUnavailable&) {
    ++errors_;
    up_ = false;
    retry_after_ = now() + 1.0;
    return false;
  }
}

void ConversationStore::retry_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (stop_) break;
    if (up_ && pending_ == 0) continue;
    if (now() < retry_after_) continue;
    const bool was_down = !up_;
    if (flush_locked() && was_down) spdlog::info("conversation store: {} is back", describe());
  }
}

std::size_t ConversationStore::persist() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (redis_) {
    const std::size_t waiting = pending_;
    flush_locked();
    if (pending_ > 0)
      spdlog::warn("conversation store: {} states could not be written to {} and are lost", pending_, describe());
    return waiting - pending_;
  }
  if (options_.dir.empty()) return 0;
  std::size_t n = 0;
  for (auto& [id, e] : memory_) {
    if (e.saved) continue;
    detail::write_file_atomically(path(id), e.bytes, "ConversationStore");
    e.saved = true;
    disk_[id] = true;
    ++n;
  }
  return n;
}

ConversationStore::Stats ConversationStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s;
  s.memory_count = memory_.size();
  s.memory_bytes = memory_bytes_;
  s.disk_count = disk_.size();
  s.dropped = dropped_;
  s.pending = pending_;
  s.reads = reads_;
  s.writes = writes_;
  s.errors = errors_;
  s.up = up_;
  return s;
}

}  // namespace recur::serve
