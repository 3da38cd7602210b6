// The BPE model of a tokenizer.json: a word (one pre-tokenized piece) to ids by applying the
// merges in rank order. Each merge takes the lowest-ranked adjacent pair, leftmost on ties,
// from a heap over a linked list of symbols, so a word of n characters costs O(n log n):
// a 5,000-character word with no spaces is no slower per byte than ordinary text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
  /// `vocab` maps token strings to ids; `merges` are pairs of token strings in rank order.
  /// Throws FormatError (prefixed by `where`) for a merge whose parts or result are not in the
  /// vocabulary.
  Bpe(std::unordered_map<std::string, int> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const std::string& where);

  /// Appends the ids of one word.
  void encode_word(std::string_view word, std::vector<int>& out) const;
  std::optional<int> find(std::string_view token) const;
  const std::unordered_map<std::string, int>& vocab() const { return vocab_; }
  const BpeOptions& options() const { return options_; }
  std::size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int rank;
    int id;  // the merged token
  };
  static std::uint64_t key(int a, int b) {
    return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
  }
  const Merge* merge(int a, int b) const {
    const auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  std::unordered_map<std::string, int> vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  BpeOptions options_;
  int byte_ids_[256];  // <0xXX> tokens, -1 where missing (byte fallback)
};

}  // namespace recur::text
