// tokenizer.json's added tokens: found in the text by a trie before (and, for normalized
// tokens, after) the normalizer, each cutting the text into the parts around it, with the
// library's single_word, lstrip and rstrip rules (docs/tokenizer.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace recur::text {

struct AddedToken {
  int id;
  std::string content;  // as matched: normalized first for tokens with normalized: true
  bool single_word, lstrip, rstrip, normalized, special;
};

/// Added tokens' contents in a trie: at each position the longest token wins, and the leftmost
/// match goes first (the library's Aho-Corasick in LeftmostLongest mode).
class AddedMatcher {
 public:
  /// `token` is the index into the added tokens; the first token added for a text keeps it.
  void add(const std::string& text, int token);
  bool empty() const { return nodes_.empty(); }
  /// The leftmost-longest match at or after `from`: (start, end, token), or token -1.
  std::tuple<std::size_t, std::size_t, int> find(std::string_view s, std::size_t from) const;

 private:
  struct Node {
    std::unordered_map<char, int> next;
    int token = -1;  // index into the added tokens
  };
  std::vector<Node> nodes_;
  bool first_[256] = {};
};

/// A part of the input: text still to tokenize, or an added token already found.
struct Part {
  std::string text;
  int added = -1;  // index of the added token, or -1
  bool at_start = false;
};

/// Splits `part` at the tokens of `added` that `matcher` finds, as the library's find_matches,
/// appending the parts to `out`.
void split_added(const Part& part, const AddedMatcher& matcher,
                 const std::vector<AddedToken>& added, std::vector<Part>& out);

}  // namespace recur::text
