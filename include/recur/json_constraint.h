// Structured output while sampling: the token mask that keeps a sequence's text a prefix of a
// value of a JSON schema (recur/json_schema.h). At each step the vocabulary, as a trie of the
// tokens' bytes built once per tokenizer, is walked against the automaton: a byte the
// automaton refuses prunes every token under it, so that the work follows the allowed tokens
// and their shared prefixes, not the vocabulary's size times the tokens' lengths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recur/json_schema.h"
#include "recur/sampling.h"

namespace recur {

class Tokenizer;

/// The bytes of each id of a model's head, as a trie in depth-first order. Immutable: share one
/// among every sequence of a tokenizer.
class TokenTrie {
 public:
  /// The ids below `n_ids` that `tokenizer` decodes, but not its special tokens, with the bytes
  /// each one writes (byte-level vocabularies mapped back from GPT-2's alphabet, <0xHH> byte
  /// tokens, "▁" as a space, an RWKV world vocabulary's bytes as they are).
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tokenizer, int n_ids);
  /// From the bytes of each id ("": never allowed).
  static std::shared_ptr<const TokenTrie> from_bytes(const std::vector<std::string>& bytes);

  int n_ids() const { return int(bytes_.size()); }
  const std::string& bytes(int id) const { return bytes_[std::size_t(id)]; }
  /// Nodes, the root (the empty string) included.
  int n_nodes() const { return int(byte_.size()); }
  /// Whether every byte from 0x20 to 0x7E is a token on its own (what the budget rule of
  /// JsonConstraint needs to guarantee that a value closes).
  bool has_ascii_bytes() const { return ascii_bytes_; }

  // The trie, depth-first: node i's byte, depth, the node past its subtree, and its ids.
  std::vector<unsigned char> byte_;
  std::vector<std::uint16_t> depth_;
  std::vector<std::int32_t> end_;
  std::vector<std::int32_t> ids_begin_;  // node i's ids: ids_[ids_begin_[i] .. ids_begin_[i + 1])
  std::vector<std::int32_t> ids_;
  // special_before_[i]: how many of nodes 0..i-1 have a byte that is not plain string text
  // (outside 0x20..0x7E, or '"', '\\' or '<'): a subtree with none is allowed whole inside a
  // string or a tagged text.
  std::vector<std::int32_t> special_before_;
  int max_depth_ = 0;

 private:
  std::vector<std::string> bytes_;
  bool ascii_bytes_ = false;
};

/// One sequence's structured output: allows the ids whose bytes keep the text a prefix of a
/// value of the grammar, and the end ids only when the value is whole. With a budget of
/// `max_tokens`, a token is allowed only if the value can still be closed in the tokens left
/// (JsonMatcher::min_close bytes, one byte a token), so that a sequence cut by max_tokens still
/// parses when the vocabulary has a token for each printable ASCII byte (TokenTrie::
/// has_ascii_bytes; every byte-level and RWKV vocabulary has).
class JsonConstraint : public TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                 std::vector<int> end_ids, std::int64_t max_tokens);
  const std::vector<char>& allowed(int n_ids) override;
  void accept(int id) override;
  bool finished() const override { return matcher_.finished(); }
  const JsonMatcher& matcher() const { return matcher_; }
  std::int64_t generated() const { return generated_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  JsonMatcher matcher_;
  std::vector<int> end_ids_;
  std::int64_t max_tokens_, generated_ = 0;
  std::vector<char> allowed_;
  std::vector<JsonMatcher> states_;  // one per trie depth
  std::vector<const JsonMatcher*> at_;
};

}  // namespace recur
