// The BPE model of a tokenizer.json: a word (one pre-tokenized piece) to ids by applying the
// merges in rank order. Each merge takes the lowest-ranked adjacent pair, leftmost on ties,
// from a heap over a linked list of symbols, so a word of n characters costs O(n log n):
// a 5,000-character word with no spaces is no slower per byte than ordinary text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <functional>
#include <vector>

namespace recur::text {

struct BpeOptions {
  std::optional<int> unk;         ///< id for characters outside the vocabulary
  bool fuse_unk = false;          ///< consecutive unknown characters become one unk
  bool byte_fallback = false;     ///< unknown characters become their <0xXX> byte tokens
  bool ignore_merges = false;     ///< a word that is in the vocabulary is taken whole
  std::string continuing_subword_prefix;  ///< on every symbol but a word's first
  std::string end_of_word_suffix;         ///< on a word's last symbol
};

class Bpe {
 public:
  /// `vocab` holds (token string, id) pairs; `merges` are pairs of token strings in rank
  /// order. Throws FormatError (prefixed by `where`) for an id given twice, or a merge whose
  /// parts or result are not in the vocabulary.
  Bpe(std::vector<std::pair<std::string, int>> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const std::string& where);

  /// Appends the ids of one word.
  void encode_word(std::string_view word, std::vector<int>& out) const;
  std::optional<int> find(std::string_view token) const {
    const int id = lookup(token);
    return id < 0 ? std::nullopt : std::optional<int>(id);
  }
  /// Token strings by id ("" where an id has none).
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<char>& has_token() const { return has_token_; }
  const BpeOptions& options() const { return options_; }
  /// The unknown-character id (set after construction, once the vocabulary can be searched).
  void set_unk(int id) { options_.unk = id; }
  std::size_t n_merges() const { return n_merges_; }

 private:
  struct Merge {
    int rank;
    int id;  // the merged token
  };
  static std::uint64_t key(int a, int b) {
    return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
  }
  // The merges in an open-addressing table (linear probing, at most half full): one probe or
  // two per lookup in a flat array, where a node-based map would chase a pointer per entry.
  struct Slot {
    std::uint64_t key;  // kEmpty when free
    Merge merge;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t(0);
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  const Merge* merge(int a, int b) const {
    const std::uint64_t k = key(a, b);
    for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  // The vocabulary: strings by id, and an open-addressing table of ids by the string's hash.
  int lookup(std::string_view token) const {
    for (std::size_t i = std::hash<std::string_view>()(token) & vocab_mask_;; i = (i + 1) & vocab_mask_) {
      const int id = vocab_table_[i];
      if (id < 0) return -1;
      if (tokens_[static_cast<std::size_t>(id)] == token) return id;
    }
  }
  std::vector<std::string> tokens_;
  std::vector<char> has_token_;
  std::vector<int> vocab_table_;
  std::size_t vocab_mask_ = 0;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t n_merges_ = 0;
  BpeOptions options_;
  int byte_ids_[256];  // <0xXX> tokens, -1 where missing (byte fallback)
};

}  // namespace recur::text
