#include "serve/store.h"

#include <fmt/format.h>

#include <filesystem>

#include "recur/error.h"
#include "util/file.h"

namespace recur::serve {

namespace fs = std::filesystem;

namespace {
constexpr const char* kSuffix = ".state";
}  // namespace

bool ConversationStore::valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return false;
  return true;
}

ConversationStore::ConversationStore(std::size_t memory_budget, std::string dir)
    : budget_(memory_budget), dir_(std::move(dir)) {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw ArgumentError(fmt::format("--state-dir {}: cannot create the directory{}", dir_,
                                    ec ? ": " + ec.message() : ""));
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.size() <= 6 || name.compare(name.size() - 6, 6, kSuffix) != 0)
      continue;
    const std::string id = name.substr(0, name.size() - 6);
    if (valid_id(id)) disk_[id] = true;
  }
}

std::string ConversationStore::path(const std::string& id) const {
  return (fs::path(dir_) / (id + kSuffix)).string();
}

void ConversationStore::put(const std::string& id, std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_.find(id);
  if (it != memory_.end()) {
    memory_bytes_ -= it->second.bytes.size();
    lru_.erase(it->second.lru);
    memory_.erase(it);
  }
  lru_.push_front(id);
  memory_bytes_ += bytes.size();
  memory_.emplace(id, Entry{std::move(bytes), false, lru_.begin()});
  evict_locked();
}

void ConversationStore::evict_locked() {
  // The entry just used stays even when it alone passes the budget: it is about to be needed.
  while (memory_bytes_ > budget_ && lru_.size() > 1) {
    const std::string id = lru_.back();
    auto it = memory_.find(id);
    if (!dir_.empty() && !it->second.on_disk) {
      detail::write_file_atomically(path(id), it->second.bytes, "ConversationStore");
      disk_[id] = true;
    }
    if (dir_.empty()) ++dropped_;
    memory_bytes_ -= it->second.bytes.size();
    lru_.pop_back();
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
  if (!disk_.count(id)) return std::nullopt;
  auto bytes = detail::read_file(path(id));
  if (!bytes)
    throw Error(fmt::format("[ConversationStore] {}: cannot read the saved state", path(id)));
  lru_.push_front(id);
  memory_bytes_ += bytes->size();
  memory_.emplace(id, Entry{*bytes, true, lru_.begin()});
  evict_locked();
  return bytes;
}

bool ConversationStore::contains(const std::string& id) const {
  if (!valid_id(id)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_.count(id) || disk_.count(id);
}

std::size_t ConversationStore::persist() {
  if (dir_.empty()) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (auto& [id, e] : memory_) {
    if (e.on_disk) continue;
    detail::write_file_atomically(path(id), e.bytes, "ConversationStore");
    e.on_disk = true;
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
  return s;
}

}  // namespace recur::serve
