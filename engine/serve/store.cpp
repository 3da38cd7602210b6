#include "serve/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <unordered_set>

#include "recur/error.h"
#include "serve/auth.h"
#include "serve/redis.h"
#include "util/file.h"

namespace recur::serve {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "recurcv1";

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class DirectoryBackend final : public StoreBackend {
 public:
  explicit DirectoryBackend(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_))
      throw ArgumentError(fmt::format("--state-dir {}: cannot create the directory{}", dir_,
                                      ec ? ": " + ec.message() : ""));
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || name.size() <= kSuffix.size() ||
          name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
        continue;
      const std::string id = name.substr(0, name.size() - kSuffix.size());
      if (valid_conversation_id(id)) ids_.insert(id);
    }
  }
  bool write_through() const override { return false; }
  void write(const std::string& id, std::string_view blob) override {
    detail::write_file_atomically(path(id), blob, "ConversationStore");
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.insert(id);
  }
  std::optional<std::string> read(const std::string& id) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ids_.count(id)) return std::nullopt;
    }
    auto bytes = detail::read_file(path(id));
    if (!bytes) throw Error(fmt::format("[ConversationStore] {}: cannot read the saved state", path(id)));
    return bytes;
  }
  std::size_t count() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return ids_.size();
  }
  std::string describe() const override { return "directory " + dir_; }

 private:
  static constexpr std::string_view kSuffix = ".state";
  std::string path(const std::string& id) const { return (fs::path(dir_) / (id + ".state")).string(); }
  std::string dir_;
  mutable std::mutex mutex_;
  std::unordered_set<std::string> ids_;  // ids with a file in the directory
};

// Two connections, each used by one caller at a time: reads (continuations not in memory) never
// wait behind a write that Redis is slow to answer, nor the other way round. After a failure,
// calls fail at once for a second instead of each waiting for the timeout.
class RedisBackend final : public StoreBackend {
 public:
  RedisBackend(const std::string& url, long ttl_seconds, double timeout_seconds)
      : address_(RedisAddress::parse(url, "--store")),
        ttl_(ttl_seconds),
        writer_(address_, timeout_seconds),
        reader_(address_, timeout_seconds) {
    writer_.ping();  // down at start: the caller reports it and stops
  }
  bool write_through() const override { return true; }
  void write(const std::string& id, std::string_view blob) override {
    std::lock_guard<std::mutex> lock(write_mutex_);
    check_ready();
    call([&] { writer_.set(key(id), blob, ttl_); });
  }
  std::optional<std::string> read(const std::string& id) override {
    std::lock_guard<std::mutex> lock(read_mutex_);
    check_ready();
    std::optional<std::string> out;
    call([&] { out = reader_.get(key(id)); });
    return out;
  }
  bool ready() const override { return now() >= retry_after_.load(); }
  void ping() override {
    std::lock_guard<std::mutex> lock(write_mutex_);
    call([&] { writer_.ping(); });
  }
  std::string describe() const override { return "Redis at " + address_.url; }

 private:
  static std::string key(const std::string& id) { return "recur:conversation:" + id; }
  void check_ready() const {
    if (!ready())
      throw StoreUnavailable(fmt::format("Redis at {} is unreachable (retrying every second)", address_.url));
  }
  template <class F>
  void call(F&& f) {
    try {
      f();
      retry_after_ = 0;
    } catch (const StoreUnavailable&) {
      retry_after_ = now() + 1.0;
      throw;
    }
  }
  RedisAddress address_;
  long ttl_;
  std::mutex write_mutex_, read_mutex_;
  Redis writer_, reader_;
  std::atomic<double> retry_after_{0};
};

}  // namespace

std::string encode_conversation(std::string_view owner, std::string_view state) {
  if (owner.size() > 255) throw ArgumentError(fmt::format("[encode_conversation] owner: {} bytes, at most 255", owner.size()));
  std::string out;
  out.reserve(kMagic.size() + 1 + owner.size() + state.size());
  out += kMagic;
  out += static_cast<char>(owner.size());
  out += owner;
  out += state;
  return out;
}

Conversation decode_conversation(std::string blob) {
  if (blob.compare(0, kMagic.size(), kMagic) != 0) return {std::string(), std::move(blob)};
  if (blob.size() < kMagic.size() + 1)
    throw FormatError("[decode_conversation] the conversation's header is cut short");
  const auto n = static_cast<unsigned char>(blob[kMagic.size()]);
  if (blob.size() < kMagic.size() + 1 + n)
    throw FormatError(fmt::format("[decode_conversation] the owner tag is cut short ({} of {} bytes)",
                                  blob.size() - kMagic.size() - 1, n));
  Conversation c;
  c.owner = blob.substr(kMagic.size() + 1, n);
  c.state = blob.substr(kMagic.size() + 1 + n);
  return c;
}

std::unique_ptr<StoreBackend> directory_backend(const std::string& dir) {
  return std::make_unique<DirectoryBackend>(dir);
}

std::unique_ptr<StoreBackend> redis_backend(const std::string& url, long ttl_seconds, double timeout_seconds) {
  return std::make_unique<RedisBackend>(url, ttl_seconds, timeout_seconds);
}

namespace {
std::unique_ptr<StoreBackend> backend_for(const StoreOptions& o) {
  if (!o.redis_url.empty()) return redis_backend(o.redis_url, o.ttl_seconds, o.redis_timeout);
  if (!o.dir.empty()) return directory_backend(o.dir);
  return nullptr;
}
}  // namespace

ConversationStore::ConversationStore(const StoreOptions& options)
    : ConversationStore(backend_for(options), options.memory_budget) {
  if (options.redis_url.empty()) dir_ = options.dir;
}

ConversationStore::ConversationStore(std::unique_ptr<StoreBackend> backend, std::size_t memory_budget)
    : backend_(std::move(backend)), budget_(memory_budget) {
  if (backend_ && backend_->write_through()) retry_ = std::thread([this] { retry_loop(); });
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
  return backend_ ? backend_->describe() : std::string("memory only");
}

void ConversationStore::insert_locked(const std::string& id, std::string owner, State state, bool saved) {
  const bool through = backend_ && backend_->write_through();
  auto it = memory_.find(id);
  if (it != memory_.end()) {
    memory_bytes_ -= it->second.state->size();
    if (through && !it->second.saved) --pending_;
    lru_.erase(it->second.lru);
    memory_.erase(it);
  }
  lru_.push_front(id);
  memory_bytes_ += state->size();
  if (through && !saved) ++pending_;
  memory_.emplace(id, Entry{std::move(owner), std::move(state), saved, false, lru_.begin()});
}

// The entry just used stays even when it alone passes the budget: it is about to be needed. So
// do states waiting for a write-through backend (memory is their only copy) and those being
// written. What a directory has not got yet is returned, to be written after the lock is let go.
std::vector<ConversationStore::Spill> ConversationStore::evict_locked() {
  std::vector<Spill> out;
  const bool through = backend_ && backend_->write_through();
  auto victim = lru_.end();
  while (memory_bytes_ > budget_ && lru_.size() > 1) {
    victim = std::prev(victim);
    if (victim == lru_.begin()) break;
    auto it = memory_.find(*victim);
    Entry& e = it->second;
    if (e.writing || (through && !e.saved)) continue;
    if (!e.saved) {
      if (backend_) {
        Spill s{*victim, e.owner, e.state};
        spilling_[s.id] = s;
        out.push_back(std::move(s));
      } else {
        ++dropped_;
      }
    }
    memory_bytes_ -= e.state->size();
    memory_.erase(it);
    victim = lru_.erase(victim);
  }
  return out;
}

void ConversationStore::spill(std::vector<Spill> victims) {
  for (auto& v : victims) {
    bool ok = true;
    try {
      backend_->write(v.id, encode_conversation(v.owner, *v.state));
    } catch (const std::exception& e) {
      ok = false;
      spdlog::error("conversation store: {} is lost: {}", v.id, e.what());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    spilling_.erase(v.id);
    if (ok) {
      ++writes_;
    } else {
      ++errors_;
      ++dropped_;
    }
  }
}

void ConversationStore::put(const std::string& id, std::string state, const std::string& owner) {
  auto shared = std::make_shared<const std::string>(std::move(state));
  const bool through = backend_ && backend_->write_through();
  std::vector<Spill> victims;
  bool writing = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    insert_locked(id, owner, shared, false);
    // While the backend waits for its retry the state waits in memory, and put() returns at once.
    if (through) writing = memory_.at(id).writing = backend_->ready();
    victims = evict_locked();
  }
  spill(std::move(victims));
  if (!through) return;
  if (!writing) {
    wake_.notify_all();
    return;
  }
  // The write, with no lock held: a get() of any state in memory goes on meanwhile.
  bool ok = true;
  try {
    backend_->write(id, encode_conversation(owner, *shared));
  } catch (const StoreUnavailable& e) {
    ok = false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (up_) spdlog::warn("conversation store: {}; states wait in memory until it is back", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = memory_.find(id);  // pinned while unsaved and writing: still there
    if (it != memory_.end()) {
      it->second.writing = false;
      if (ok) {
        it->second.saved = true;
        --pending_;
      }
    }
    ++(ok ? writes_ : errors_);
    up_ = ok;
    victims = evict_locked();
  }
  spill(std::move(victims));
  if (!ok) wake_.notify_all();
}

std::optional<std::string> ConversationStore::get(const std::string& id, const std::string& owner) {
  if (!valid_conversation_id(id)) return std::nullopt;
  const auto owned = [&](const std::string& by) { return constant_time_equal(by, owner); };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = memory_.find(id); it != memory_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      if (!owned(it->second.owner)) return std::nullopt;
      return *it->second.state;
    }
    if (auto it = spilling_.find(id); it != spilling_.end()) {
      if (!owned(it->second.owner)) return std::nullopt;
      return *it->second.state;
    }
  }
  if (!backend_) return std::nullopt;
  std::optional<std::string> blob;
  try {
    blob = backend_->read(id);
  } catch (const StoreUnavailable&) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++errors_;
      up_ = false;
    }
    wake_.notify_all();
    throw;
  }
  if (!blob) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++reads_;
    return std::nullopt;
  }
  Conversation c = decode_conversation(std::move(*blob));
  const bool mine = owned(c.owner);
  std::optional<std::string> out;
  if (mine) out = c.state;
  std::vector<Spill> victims;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++reads_;
    if (backend_->write_through()) up_ = true;
    if (memory_.find(id) == memory_.end())
      insert_locked(id, std::move(c.owner), std::make_shared<const std::string>(std::move(c.state)), true);
    victims = evict_locked();
  }
  spill(std::move(victims));
  return out;
}

std::size_t ConversationStore::write_waiting() {
  std::vector<std::pair<std::string, Entry>> todo;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, e] : memory_)
      if (!e.saved && !e.writing) {
        e.writing = true;
        todo.emplace_back(id, e);
      }
  }
  std::size_t written = 0;
  bool failed = false;
  for (auto& [id, e] : todo) {
    bool ok = false;
    if (!failed) {
      try {
        backend_->write(id, encode_conversation(e.owner, *e.state));
        ok = true;
      } catch (const StoreUnavailable&) {
        failed = true;  // the rest wait for the next try
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = memory_.find(id);
    if (it == memory_.end()) continue;
    it->second.writing = false;
    if (ok) {
      it->second.saved = true;
      --pending_;
      ++writes_;
      ++written;
    }
  }
  std::vector<Spill> victims;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed) ++errors_;
    up_ = !failed;
    victims = evict_locked();
  }
  spill(std::move(victims));
  return written;
}

void ConversationStore::retry_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (stop_) break;
    if (up_ && pending_ == 0) continue;
    if (!backend_->ready()) continue;
    const bool was_down = !up_;
    lock.unlock();
    bool back = true;
    try {
      backend_->ping();
      write_waiting();
    } catch (const StoreUnavailable&) {
      back = false;
    }
    lock.lock();
    if (!back) {
      up_ = false;
      ++errors_;
    } else if (up_ && was_down) {
      spdlog::info("conversation store: {} is back", backend_->describe());
    }
  }
}

std::size_t ConversationStore::persist() {
  if (!backend_) return 0;
  if (backend_->write_through()) {
    std::size_t written = 0;
    try {
      backend_->ping();
      written = write_waiting();
    } catch (const StoreUnavailable&) {
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_ > 0)
      spdlog::warn("conversation store: {} states could not be written to {} and are lost", pending_,
                   backend_->describe());
    return written;
  }
  std::vector<Spill> todo;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, e] : memory_)
      if (!e.saved && !e.writing) {
        e.writing = true;
        todo.push_back({id, e.owner, e.state});
      }
  }
  std::size_t n = 0;
  for (auto& s : todo) {
    backend_->write(s.id, encode_conversation(s.owner, *s.state));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = memory_.find(s.id);
    if (it != memory_.end()) {
      it->second.writing = false;
      it->second.saved = true;
    }
    ++n;
  }
  return n;
}

ConversationStore::Stats ConversationStore::stats() const {
  const std::size_t disk = backend_ && !backend_->write_through() ? backend_->count() : 0;
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s;
  s.memory_count = memory_.size();
  s.memory_bytes = memory_bytes_;
  s.disk_count = disk;
  s.dropped = dropped_;
  s.pending = pending_;
  s.reads = reads_;
  s.writes = writes_;
  s.errors = errors_;
  s.up = up_;
  return s;
}

}  // namespace recur::serve
