// Text to token ids and back, as a model's tokenizer.json (the Hugging Face `tokenizers` format)
// says, with the same ids as that library gives.
//
// Read: BPE models, with or without byte fallback, merges in either notation, ignore_merges;
// the normalizers Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Strip; the pre-tokenizers
// Sequence, Split (regex or string, every behavior, invert), ByteLevel, Digits, Metaspace; the
// post-processors TemplateProcessing, ByteLevel, Sequence, BertProcessing, RobertaProcessing;
// the decoders Sequence, Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace; added and
// special tokens with their single_word, lstrip, rstrip and normalized flags. Anything else is a
// FormatError at load that names it: recur never tokenizes differently without saying so.
//
// It also reads RWKV's world vocabulary (rwkv_vocab_v20230424.txt) and encodes as the reference
// TRIE_TOKENIZER does: the longest token at each byte. Its id 0 ends a text: it is special,
// decodes to no text, is named "<|endoftext|>" by id_to_token, and encoding never gives it.
//
// A Tokenizer is immutable once loaded; share it between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recur {

class TokenMask;  // recur/sampling.h

class Tokenizer {
 public:
  /// Loads `path`: a tokenizer.json file or an RWKV world vocabulary, or a directory that holds
  /// a tokenizer.json or else an rwkv_vocab_v20230424.txt. Throws FormatError naming the file
  /// and the component (or the line and column) it cannot read.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  /// The same from the file's text; `source` names it in messages.
  static std::shared_ptr<const Tokenizer> from_json(std::string_view json, const std::string& source);
  /// The same from the text of an RWKV world vocabulary.
  static std::shared_ptr<const Tokenizer> from_rwkv_vocab(std::string_view vocab,
                                                          const std::string& source);
  /// Whether `dir` holds a tokenizer.json or an rwkv_vocab_v20230424.txt.
  static bool present(const std::string& dir);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// The ids of `text` (UTF-8; anything else is an ArgumentError naming the byte). With
  /// add_special_tokens the post-processor adds what it adds (a BOS, for most models); special
  /// tokens written in the text are matched either way, as the library does.
  std::vector<int> encode(std::string_view text, bool add_special_tokens = true) const;
  /// The text of `ids`, special tokens included unless skipped. An id outside the vocabulary
  /// is an ArgumentError. Bytes that do not form UTF-8 come out as U+FFFD, as in the library.
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens = false) const;

  /// One more than the largest id (the model's vocabulary and the added tokens).
  int vocab_size() const;
  /// The id of a token string (a vocabulary entry or an added token; for an RWKV vocabulary,
  /// the id encoding gives those bytes as one token, and 0 for "<|endoftext|>").
  std::optional<int> token_to_id(std::string_view token) const;
  /// The token string of an id (throws ArgumentError outside the vocabulary); for an RWKV
  /// vocabulary, the token's bytes, which need not be UTF-8 on their own.
  const std::string& id_to_token(int id) const;
  /// Whether decode() takes the id: a token of the vocabulary or an added token (an id in a gap
  /// between them, or at or past vocab_size(), is not).
  bool has_id(int id) const;
  /// The ids of a model's head of `n_ids` rows that this tokenizer decodes, as a sampler's mask:
  /// the rows past its vocabulary (RWKV's world models: 65,530 ids in a head of 65,536; padded
  /// heads) and the gaps in it are never drawn. ArgumentError when it decodes none of them.
  std::shared_ptr<const TokenMask> sample_mask(int n_ids) const;
  /// Whether the id is an added token marked special (for an RWKV vocabulary: id 0).
  bool is_special(int id) const;
  /// Whether it is an RWKV world vocabulary (whose models chat in a format of their own, see
  /// docs/chat.md).
  bool world_vocabulary() const;
  /// Where it was loaded from.
  const std::string& source() const;
  /// One line for logs: the model, the vocabulary, what the post-processor adds.
  std::string describe() const;

  /// Opaque here; defined in the engine (engine/text/).
  struct Impl;

 private:
  friend class DecodeStream;  // reads the vocabulary's decoders through impl_
  Tokenizer();
  std::unique_ptr<Impl> impl_;
};

/// Decodes ids as they are generated. put() returns the text that has become final: everything
/// but a trailing incomplete UTF-8 sequence (and, for byte-fallback models, a run of byte tokens
/// that has not ended, since the library decodes such a run as a whole). finish() returns the
/// rest. The concatenation of everything returned equals tokenizer.decode(all ids). The work per
/// token does not grow with the length of the text.
class DecodeStream {
 public:
  explicit DecodeStream(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens = false);
  std::string put(int id);
  std::string finish();

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_;
  std::vector<int> window_;  // the last token already written, and those after it
  std::string prefix_text_;  // what window_'s first token decodes to (already written)
};

}  // namespace recur
