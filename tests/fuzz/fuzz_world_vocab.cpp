// RWKV's world vocabulary on untrusted input: a hostile vocabulary file (first byte even), which
// must load or be refused with a FormatError and, when it loads, encode and decode anything; and
// hostile bytes, literals and ids for a fixed vocabulary (first byte odd).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recur/error.h"
#include "recur/tokenizer.h"
#include "text/world_vocab.h"

namespace {

// The 256 bytes, then tokens that overlap: pieces of a CJK character and of an emoji, a
// longer word that shares its start with a shorter one, and one token given twice.
std::string fixed_vocab() {
  std::string v;
  for (int b = 0; b < 256; ++b) v += std::to_string(b + 1) + " b'\\x" + "0123456789abcdef"[b / 16] + "0123456789abcdef"[b % 16] + "' 1\n";
  v += "257 '\\u4e2d' 3\n258 b'\\xe4\\xb8' 2\n259 b'\\xad\\xf0\\x9f' 3\n260 'ab' 2\n261 'abc' 3\n"
       "262 \"\\U0001F600\" 4\n263 'ab' 2\n264 '\\n\\n' 2\n265 '\\t\\101\\q' 4\n";
  return v;
}

void exercise(const recur::Tokenizer& t, const recur::text::WorldVocab* vocab, const std::uint8_t* raw,
              std::size_t n) {
  const std::string bytes(reinterpret_cast<const char*>(raw), n);
  if (vocab) {  // the trie takes any bytes, and gives them back
    std::vector<int> ids;
    vocab->encode(bytes, ids);
    std::string back;
    for (const int id : ids) back += vocab->tokens()[static_cast<std::size_t>(id)];
    if (back != bytes) __builtin_trap();
  }
  try {
    (void)t.decode(t.encode(bytes));
  } catch (const recur::Error&) {  // not UTF-8
  }
  std::vector<int> ids;
  for (std::size_t i = 0; i + 1 < n; i += 2) ids.push_back((raw[i] | (raw[i + 1] << 8)) % t.vocab_size());
  const std::string whole = t.decode(ids);
  recur::DecodeStream stream(std::shared_ptr<const recur::Tokenizer>(&t, [](const recur::Tokenizer*) {}));
  std::string streamed;
  for (const int id : ids) streamed += stream.put(id);
  if (streamed + stream.finish() != whole) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    try {
      const auto t = recur::Tokenizer::from_rwkv_vocab(rest, "fuzz/rwkv_vocab.txt");
      const std::uint8_t probe[] = "Hello \xE4\xB8\xAD\xF0\x9F\x98\x80 \xFF\x80 ab\n\n";
      exercise(*t, nullptr, probe, sizeof probe - 1);
    } catch (const recur::FormatError&) {
    }
  } else {
    // Any line read as a literal: it parses, or says where it stops.
    const recur::text::PyLiteral lit = recur::text::parse_py_literal(rest, 0);
    if (!lit.ok() && lit.error_at > rest.size()) __builtin_trap();
    if (lit.ok() && lit.end > rest.size()) __builtin_trap();
    static const std::string text = fixed_vocab();
    static const auto fixed = recur::Tokenizer::from_rwkv_vocab(text, "fixed");
    static const recur::text::WorldVocab vocab(text, "fixed");
    exercise(*fixed, &vocab, data + 1, size - 1);
  }
  return 0;
}
