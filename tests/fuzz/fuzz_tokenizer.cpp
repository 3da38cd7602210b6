// The tokenizer on untrusted input, both ways in: a hostile tokenizer.json (first byte even), and
// hostile text and ids for a fixed tokenizer that uses most components (first byte odd). A
// tokenizer.json that loads must encode and decode without crashing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "recur/error.h"
#include "recur/tokenizer.h"

namespace {

// Byte fallback, a Prepend/Replace normalizer, NFC, a regex Split, a template with a BOS, an
// added token that strips spaces, and the Llama-2 decoder chain.
const char* const kFixed = R"({
  "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false},
                   {"id": 1, "content": "<x>", "special": false, "normalized": true, "lstrip": true, "rstrip": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend", "prepend": "\u2581"},
                 {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
  "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{N}|[^\\p{N}]+"}, "behavior": "Isolated", "invert": false},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                     "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
            "vocab": {"<s>": 0, "<x>": 1, "<unk>": 2, "<0x41>": 3, "<0xC3>": 4, "<0xA9>": 5, "\u2581": 6, "a": 7, "b": 8,
                      "ab": 9, "\u2581ab": 10, "1": 11, "<0xF0>": 12},
            "merges": ["a b", "\u2581 ab"]}
})";

void exercise(const recur::Tokenizer& t, const std::string& text, const std::uint8_t* raw, std::size_t n) {
  try {
    const auto ids = t.encode(text, true);
    (void)t.decode(ids);
    (void)t.decode(ids, true);
  } catch (const recur::Error&) {
  }
  // Ids from the raw bytes, in range: decode them whole and as a stream.
  std::vector<int> ids;
  for (std::size_t i = 0; i + 1 < n; i += 2) ids.push_back((raw[i] | (raw[i + 1] << 8)) % t.vocab_size());
  try {
    (void)t.decode(ids);
    recur::DecodeStream stream(std::shared_ptr<const recur::Tokenizer>(&t, [](const recur::Tokenizer*) {}));
    for (const int id : ids) (void)stream.put(id);
    (void)stream.finish();
  } catch (const recur::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    try {
      const auto t = recur::Tokenizer::from_json(rest, "fuzz/tokenizer.json");
      exercise(*t, "Hello w\xC3\xB6rld 123 <s> \xF0\x9F\x99\x82", data + 1, size - 1);
    } catch (const recur::Error&) {
    }
  } else {
    static const auto fixed = recur::Tokenizer::from_json(kFixed, "fixed");
    exercise(*fixed, rest, data + 1, size - 1);
  }
  return 0;
}
