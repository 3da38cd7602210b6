// The normalizer, pre-tokenizer and decoder steps of a tokenizer.json, each a chain read from
// the file (a Sequence is flattened into it) and applied in order, as the Hugging Face library
// applies them (docs/tokenizer.md). Also the reader that names the file and the field in every
// error.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "recur/error.h"
#include "util/json.h"

namespace recur::text {

// Reading the JSON: every error names the file and the path to the field.

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw FormatError(fmt::format("[Tokenizer] {}: {}: {}", source_, path, what));
  }
  const json::Value& member(const json::Value& v, const std::string& path, const char* key) const {
    const json::Value* m = v.is_object() ? v.find(key) : nullptr;
    if (!m) fail(path, fmt::format("'{}' is missing", key));
    return *m;
  }
  const json::Value* optional(const json::Value& v, const char* key) const {
    const json::Value* m = v.find(key);
    return m && !m->is_null() ? m : nullptr;
  }
  std::string string(const json::Value& v, const std::string& path, const char* key) const {
    const json::Value& m = member(v, path, key);
    if (!m.is_string()) fail(path + "." + key, fmt::format("is {}, expected a string", m.kind_name()));
    return m.string();
  }
  std::string string_or(const json::Value& v, const std::string& path, const char* key,
                        const std::string& fallback) const {
    const json::Value* m = optional(v, key);
    if (!m) return fallback;
    if (!m->is_string()) fail(path + "." + key, fmt::format("is {}, expected a string", m->kind_name()));
    return m->string();
  }
  bool boolean_or(const json::Value& v, const std::string& path, const char* key, bool fallback) const {
    const json::Value* m = optional(v, key);
    if (!m) return fallback;
    if (!m->is_bool()) fail(path + "." + key, fmt::format("is {}, expected true or false", m->kind_name()));
    return m->boolean();
  }
  std::int64_t integer_or(const json::Value& v, const std::string& path, const char* key,
                          std::int64_t fallback, std::int64_t min, std::int64_t max) const {
    const json::Value* m = optional(v, key);
    if (!m) return fallback;
    if (!m->is_integer() || m->integer() < min || m->integer() > max)
      fail(path + "." + key, fmt::format("expected an integer in {} to {}", min, max));
    return m->integer();
  }
  std::string type(const json::Value& v, const std::string& path) const {
    if (!v.is_object()) fail(path, fmt::format("is {}, expected an object", v.kind_name()));
    return string(v, path, "type");
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& kind,
                                const std::string& type) const {
    fail(path, fmt::format("the {} '{}' is not supported by recur, which will not tokenize "
                           "differently from the library without saying so",
                           kind, type));
  }
  const std::string& source() const { return source_; }
  /// Calls read(element, its path) for each element of the list v[key] (a Sequence's parts).
  template <class Read>
  void each(const json::Value& v, const std::string& path, const char* key, Read read) const {
    const json::Value& list = member(v, path, key);
    if (!list.is_array()) fail(path + "." + key, "expected a list");
    for (std::size_t i = 0; i < list.array().size(); ++i)
      read(list.array()[i], fmt::format("{}.{}[{}]", path, key, i));
  }

 private:
  std::string source_;
};

struct Normalizer;
struct PreTokenizer;
struct Decoder;

/// The normalizer: applied to each part of the text between added tokens.
class Normalizers {
 public:
  Normalizers();
  ~Normalizers();
  Normalizers(Normalizers&&) noexcept;
  Normalizers& operator=(Normalizers&&) noexcept;
  void read(const Reader& r, const json::Value& v, const std::string& path);
  void apply(std::string& s) const;

 private:
  std::vector<Normalizer> steps_;
};

/// A piece of text on its way to the model.
struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's "first")
};

/// The pre-tokenizer: splits pieces into finer ones (and ByteLevel maps their bytes).
class PreTokenizers {
 public:
  PreTokenizers();
  ~PreTokenizers();
  PreTokenizers(PreTokenizers&&) noexcept;
  PreTokenizers& operator=(PreTokenizers&&) noexcept;
  void read(const Reader& r, const json::Value& v, const std::string& path);
  void apply(std::vector<Piece>& pieces) const;
  /// Whether a ByteLevel step maps bytes to GPT-2's stand-in characters.
  bool byte_level() const;

 private:
  std::vector<PreTokenizer> steps_;
};

/// The decoder: token strings to text.
class Decoders {
 public:
  Decoders();
  ~Decoders();
  Decoders(Decoders&&) noexcept;
  Decoders& operator=(Decoders&&) noexcept;
  void read(const Reader& r, const json::Value& v, const std::string& path);
  void apply(std::vector<std::string>& tokens) const;
  /// Whether a ByteFallback step decodes runs of <0xHH> tokens.
  bool byte_fallback() const;
  /// The byte of a "<0xHH>" token, or -1.
  static int byte_token(const std::string& t);

 private:
  std::vector<Decoder> steps_;
};

}  // namespace recur::text
