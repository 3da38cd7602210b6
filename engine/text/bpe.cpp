#include "text/bpe.h"

#include <fmt/format.h>

#include <algorithm>

#include "recur/error.h"
#include "text/unicode.h"

namespace recur::text {

Bpe::Bpe(std::vector<std::pair<std::string, int>> vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
         const std::string& where)
    : options_(std::move(options)) {
  int max_id = -1;
  for (const auto& [token, id] : vocab) max_id = std::max(max_id, id);
  tokens_.resize(static_cast<std::size_t>(max_id + 1));
  has_token_.assign(tokens_.size(), 0);
  std::size_t table = 16;
  while (table < 2 * vocab.size()) table *= 2;
  vocab_table_.assign(table, -1);
  vocab_mask_ = table - 1;
  for (auto& [token, id] : vocab) {
    const auto u = static_cast<std::size_t>(id);
    if (has_token_[u])
      throw FormatError(fmt::format("{}: id {} is given to both {} and {}", where, id,
                                    tokens_[u], token));
    has_token_[u] = 1;
    tokens_[u] = std::move(token);
    std::size_t i = std::hash<std::string_view>()(tokens_[u]) & vocab_mask_;
    while (vocab_table_[i] >= 0) i = (i + 1) & vocab_mask_;
    vocab_table_[i] = id;
  }
  const std::string& prefix = options_.continuing_subword_prefix;
  std::size_t capacity = 16;
  while (capacity < 2 * merges.size()) capacity *= 2;
  slots_.assign(capacity, Slot{kEmpty, Merge{0, 0}});
  mask_ = capacity - 1;
  std::string joined;
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int ia = lookup(a), ib = lookup(b);
    // The merged token drops the second part's continuation prefix, as the library does.
    const bool strip = !prefix.empty() && b.compare(0, prefix.size(), prefix) == 0;
    joined.assign(a);
    joined.append(b, strip ? prefix.size() : 0, std::string::npos);
    const int ij = lookup(joined);
    if (ia < 0 || ib < 0 || ij < 0)
      throw FormatError(fmt::format("{}: merge {} ('{}' + '{}') uses a token that is not in the "
                                    "vocabulary", where, r, a, b));
    // A pair listed twice takes its last rank: the library collects the list into a hash map,
    // where a later entry replaces an earlier one.
    const std::uint64_t k = key(ia, ib);
    std::size_t i = hash(k) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++n_merges_;
    slots_[i] = Slot{k, Merge{static_cast<int>(r), ij}};
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = lookup(fmt::format("<0x{:02X}>", b));
}

void Bpe::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  // The word's characters as symbols, with the prefix and suffix the options ask for.
  struct Symbol {
    int id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  // As in the library, an unknown character's unk is held back until a known character (or
  // the end) comes; with fuse_unk the next unknown character joins it. Characters that fall
  // back to bytes pass it by: their byte tokens come first.
  bool unk_pending = false;
  std::string piece;
  const auto push = [&](int id) {
    const int n = static_cast<int>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t len = char_len(static_cast<unsigned char>(word[i]));
    const bool first = i == 0, last = i + len >= word.size();
    piece.clear();
    if (!first) piece += options_.continuing_subword_prefix;
    piece.append(word.substr(i, len));
    if (last) piece += options_.end_of_word_suffix;
    i += len;
    if (const int id = lookup(piece); id >= 0) {
      if (unk_pending) push(*options_.unk);
      unk_pending = false;
      push(id);
      continue;
    }
    if (options_.byte_fallback) {
      // The bytes of the piece as looked up, prefix and suffix included, as the library does.
      bool all = true;
      for (const char c : piece) all &= byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : piece) push(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (options_.unk) {
      if (unk_pending && !options_.fuse_unk) push(*options_.unk);
      unk_pending = true;
    }
    // Without byte fallback or an unk token the library drops the character; so does recur.
  }
  if (unk_pending) push(*options_.unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Candidate merges, lowest rank first and leftmost among equals. Entries go stale when a
  // neighbour changes; each is checked against the symbols when it comes out.
  struct Candidate {
    int rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  // A binary min-heap in a vector, built in O(n) from the first candidates.
  std::vector<Candidate> heap;
  heap.reserve(symbols.size());
  const auto later = std::greater<Candidate>();
  const auto consider = [&](int pos) {
    const int next = symbols[static_cast<std::size_t>(pos)].next;
    if (next < 0) return;
    if (const Merge* m = merge(symbols[static_cast<std::size_t>(pos)].id, symbols[static_cast<std::size_t>(next)].id)) {
      heap.push_back({m->rank, pos, m->id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int p = 0; p + 1 < static_cast<int>(symbols.size()); ++p)
    if (const Merge* m = merge(symbols[static_cast<std::size_t>(p)].id, symbols[static_cast<std::size_t>(p) + 1].id))
      heap.push_back({m->rank, p, m->id});
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<std::size_t>(c.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    const Merge* m = merge(left.id, right.id);
    if (!m || m->id != c.id) continue;  // stale
    left.id = c.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  for (int p = 0; p >= 0; p = symbols[static_cast<std::size_t>(p)].next) out.push_back(symbols[static_cast<std::size_t>(p)].id);
}

}  // namespace recur::text
