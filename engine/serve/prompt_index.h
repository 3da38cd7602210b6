// Which kept chat state a resent conversation can continue from. A client that sends the whole
// `messages` every turn without `previous_response_id` (what most OpenAI clients do) names no
// state; the index finds one by its ids: for each kept chat response it holds a hash of the ids
// at each of its boundaries (the end of the state after the reply, and each checkpoint's end),
// keyed by the owner, and a new prompt is hashed at every length once (O(prompt) whatever the
// number of kept states) and looked up longest first. A hash only proposes: the engine compares
// the kept ids with the prompt's before it reuses a state (Engine::admit), so a collision costs a
// shorter reuse, never a wrong byte.
//
// Per process and in memory only: a state another replica kept, or one kept before a restart,
// is not indexed here (docs/chat.md). Bounded: at most `max_responses` responses, the oldest
// forgotten first; an entry whose state the store has since dropped is forgotten when a lookup
// finds it gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace recur::serve {

class PromptIndex {
 public:
  /// `max_responses` 0: the index is off (nothing is added, nothing found).
  explicit PromptIndex(std::size_t max_responses);

  /// The hash of `ids[0, n)` for `owner`, for every n in `lengths` (each <= ids.size()); what
  /// add() takes. O(ids.size()); called off the index's lock.
  std::vector<std::pair<std::size_t, std::uint64_t>> keys(const std::string& owner, const std::vector<int>& ids,
                                                           const std::vector<std::size_t>& lengths) const;
  /// Indexes response `id` of `owner` under `keys` (from keys()); the oldest response goes past
  /// the bound.
  void add(const std::string& id, const std::string& owner, std::vector<std::pair<std::size_t, std::uint64_t>> keys);
  /// Responses of `owner` with a boundary whose hash matches a prefix of `prompt`, the longest
  /// prefix first (the newest response first at one length), at most `limit`: (id, length).
  std::vector<std::pair<std::string, std::size_t>> find(const std::string& owner, const std::vector<int>& prompt,
                                                        std::size_t limit) const;
  /// Forgets `id` (its state is gone from the store).
  void forget(const std::string& id);

  std::size_t size() const;  ///< responses indexed
  bool enabled() const { return max_ != 0; }

 private:
  struct Boundary {
    std::size_t length;
    std::string id, owner;
    std::uint64_t serial;  // the response's order of arrival: newer first at one length
  };
  void forget_locked(const std::string& id);

  std::size_t max_;
  std::uint64_t seed_;  // per process, random: which ids collide cannot be planned
  mutable std::mutex mutex_;
  std::unordered_multimap<std::uint64_t, Boundary> boundaries_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> responses_;  // id -> its keys
  std::deque<std::string> order_;  // oldest first (may hold forgotten ids, skipped)
  // How many boundaries end at each length: a lookup probes these lengths only (at most the
  // boundaries held), and hashes no further than the longest.
  std::map<std::size_t, std::size_t> lengths_;
  std::uint64_t serial_ = 0;
};

}  // namespace recur::serve
