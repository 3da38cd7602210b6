#include "serve/prompt_index.h"

#include <algorithm>
#include <cstring>

#include "serve/auth.h"

namespace recur::serve {

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The hash before any id: the process's seed and the owner tag.
std::uint64_t start(std::uint64_t seed, const std::string& owner) {
  std::uint64_t h = mix(seed);
  for (std::size_t i = 0; i < owner.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, owner.data() + i, std::min<std::size_t>(8, owner.size() - i));
    h = mix(h ^ word);
  }
  return mix(h ^ owner.size());
}

// The hash of a prefix one id longer: chained, so every prefix's hash costs one step.
std::uint64_t next(std::uint64_t h, int id) { return mix(h ^ static_cast<std::uint32_t>(id)) + h; }

}  // namespace

PromptIndex::PromptIndex(std::size_t max_responses) : max_(max_responses) {
  const std::string bytes = random_bytes(8);
  std::memcpy(&seed_, bytes.data(), 8);
}

std::vector<std::pair<std::size_t, std::uint64_t>> PromptIndex::keys(const std::string& owner, const std::vector<int>& ids,
                                                                      const std::vector<std::size_t>& lengths) const {
  std::vector<std::pair<std::size_t, std::uint64_t>> out;
  if (!enabled()) return out;
  std::vector<std::size_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::uint64_t h = start(seed_, owner);
  std::size_t at = 0;
  for (const std::size_t n : sorted) {
    if (n == 0 || n > ids.size()) continue;
    for (; at < n; ++at) h = next(h, ids[at]);
    out.emplace_back(n, h);
  }
  return out;
}

void PromptIndex::add(const std::string& id, const std::string& owner,
                      std::vector<std::pair<std::size_t, std::uint64_t>> keys) {
  if (!enabled() || keys.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  forget_locked(id);
  auto& mine = responses_[id];
  const std::uint64_t serial = ++serial_;
  for (const auto& [length, key] : keys) {
    boundaries_.emplace(key, Boundary{length, id, owner, serial});
    mine.push_back(key);
    ++lengths_[length];
  }
  order_.push_back(id);
  while (responses_.size() > max_ && !order_.empty()) {
    const std::string oldest = std::move(order_.front());
    order_.pop_front();
    forget_locked(oldest);
  }
  // Forgotten ids (forget()) linger in order_ until they reach its front; keep it bounded too.
  while (order_.size() > 2 * max_ + 16 && !order_.empty() && !responses_.count(order_.front())) order_.pop_front();
}

std::vector<std::pair<std::string, std::size_t>> PromptIndex::find(const std::string& owner, const std::vector<int>& prompt,
                                                                   std::size_t limit) const {
  std::vector<std::pair<std::string, std::size_t>> out;
  if (!enabled() || prompt.empty() || limit == 0) return out;
  std::size_t longest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lengths_.empty()) return out;
    longest = std::min(lengths_.rbegin()->first, prompt.size());
  }
  // Every prefix's hash, off the lock: one step per id.
  std::vector<std::uint64_t> hashes;
  hashes.reserve(longest + 1);
  std::uint64_t h = start(seed_, owner);
  hashes.push_back(h);
  for (std::size_t i = 0; i < longest; ++i) hashes.push_back(h = next(h, prompt[i]));
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Boundary*> here;
  for (auto l = lengths_.upper_bound(prompt.size()); l != lengths_.begin() && out.size() < limit;) {
    const std::size_t n = (--l)->first;
    if (n > longest) continue;  // indexed after the hashes were taken
    const auto range = boundaries_.equal_range(hashes[n]);
    here.clear();
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.length == n && it->second.owner == owner) here.push_back(&it->second);
    std::sort(here.begin(), here.end(), [](const Boundary* a, const Boundary* b) { return a->serial > b->serial; });
    for (const Boundary* b : here) {
      if (out.size() >= limit) break;
      // A response already proposed at a longer length covers this one.
      if (std::none_of(out.begin(), out.end(), [&](const auto& o) { return o.first == b->id; }))
        out.emplace_back(b->id, n);
    }
  }
  return out;
}

void PromptIndex::forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  forget_locked(id);
}

void PromptIndex::forget_locked(const std::string& id) {
  const auto it = responses_.find(id);
  if (it == responses_.end()) return;
  for (const std::uint64_t key : it->second) {
    const auto range = boundaries_.equal_range(key);
    for (auto b = range.first; b != range.second; ++b)
      if (b->second.id == id) {
        const auto l = lengths_.find(b->second.length);
        if (l != lengths_.end() && --l->second == 0) lengths_.erase(l);
        boundaries_.erase(b);
        break;
      }
  }
  responses_.erase(it);
}

std::size_t PromptIndex::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return responses_.size();
}

}  // namespace recur::serve
