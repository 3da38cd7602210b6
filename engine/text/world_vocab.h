// RWKV's "world" vocabulary (rwkv_vocab_v20230424.txt) and its tokenizer: a greedy longest match
// over bytes, as BlinkDL's reference TRIE_TOKENIZER encodes. Each line of the file is
//   <id> <Python str or bytes literal> <length of the token in bytes>
// The literal is read by a parser of our own that knows Python's quoting and escapes; nothing
// in the file is ever evaluated. docs/tokenizer.md lists what is accepted and what is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recur::text {

/// One Python literal read from a line: its bytes (a str literal's text as UTF-8), and where it
/// ended; or, when it is not a literal recur reads, the column (0-based) and the reason.
struct PyLiteral {
  std::string bytes;
  bool is_bytes = false;             ///< b'...' rather than '...'
  std::size_t end = 0;               ///< one past the closing quote
  std::size_t error_at = std::string_view::npos;  ///< npos when it parsed
  std::string error;
  bool ok() const { return error_at == std::string_view::npos; }
};

/// Parses the literal that starts at s[at]: 'x', "x", b'x' or b"x" (B for b too), with every
/// escape Python gives them: \\ \' \" \a \b \f \n \r \t \v, \ooo (one to three octal digits),
/// \xhh; in str literals also \uhhhh and \Uhhhhhhhh; any other backslash stays as written, as
/// Python keeps it. Refused: other prefixes (r, u, f), triple quotes, a missing closing quote,
/// a short \x \u \U, a code point that is a surrogate or past U+10FFFF, \N{...} (recur has no
/// table of Unicode names), an octal escape past \377 in bytes (Python truncates it to a byte),
/// non-ASCII characters in bytes, a NUL or CR in the source, and text that is not UTF-8.
PyLiteral parse_py_literal(std::string_view s, std::size_t at);

/// The vocabulary, immutable once read. Id 0 is not in the file: RWKV uses it for the end of a
/// text (and padding); it holds no bytes.
class WorldVocab {
 public:
  /// The name the file has beside a model.
  static constexpr const char* kFileName = "rwkv_vocab_v20230424.txt";

  /// Reads the file's text. Throws FormatError "[Tokenizer] SOURCE:LINE:COLUMN: reason" for a
  /// line that is not `<id> <literal> <length>`, an id that is not the line's number (ids run
  /// 1, 2, 3, ... with no gap and no repeat), a length that is not the literal's, an empty
  /// token, a file without every single byte as a token (the reference cannot encode such a
  /// byte), or a file that is empty or not UTF-8.
  WorldVocab(std::string_view text, const std::string& source);

  /// Appends the ids of `bytes` (any bytes): at each position the longest token that matches,
  /// as the reference does. Every byte is a token, so every input encodes.
  void encode(std::string_view bytes, std::vector<int>& out) const;
  /// The bytes of each id; [0] is empty.
  const std::vector<std::string>& tokens() const { return tokens_; }
  /// The id the encoder gives `bytes` as one token. Where two ids hold the same bytes the
  /// later one wins, as in the reference (its map from bytes to id keeps the last).
  std::optional<int> find(std::string_view bytes) const;
  /// One more than the largest id.
  int n_ids() const { return static_cast<int>(tokens_.size()); }
  /// The longest token, in bytes.
  std::size_t max_token_bytes() const { return max_bytes_; }

 private:
  void build_trie();
  int child(int node, unsigned char byte) const;

  std::vector<std::string> tokens_;  // (n_ids) bytes by id
  // The trie, flattened: node n's edges are edge_byte_/edge_child_[edge_begin_[n] ..
  // edge_begin_[n + 1]), sorted by byte; the root's are also in root_ for one lookup per text
  // position. A node's token is the id that ends there, or -1.
  std::vector<std::uint32_t> edge_begin_;  // (n_nodes + 1)
  std::vector<unsigned char> edge_byte_;   // (n_edges)
  std::vector<std::int32_t> edge_child_;   // (n_edges)
  std::vector<std::int32_t> node_token_;   // (n_nodes)
  std::int32_t root_[256] = {};
  std::size_t max_bytes_ = 0;
};

}  // namespace recur::text
