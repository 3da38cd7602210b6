// The tokenizer.json pipeline: added tokens, normalizer, pre-tokenizer, BPE, post-processor on
// the way in; the decoder on the way out. Each stage follows what the Hugging Face library does
// with the same file (docs/tokenizer.md lists the rules and where they are subtle).
#include "recur/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>
#include <tuple>

#include "recur/error.h"
#include "text/bpe.h"
#include "text/regex.h"
#include "text/unicode.h"
#include "util/file.h"
#include "util/json.h"

namespace recur {
namespace {

using text::Regex;

constexpr std::uint64_t kMaxFileBytes = 1ull << 30;  // Gemma-3's is 33 MB; 1 GiB is absurd
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------
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

// A pattern of Split and Replace: a literal string or a regex.
struct Pattern {
  std::string literal;
  std::optional<Regex> regex;

  static Pattern read(const Reader& r, const json::Value& v, const std::string& path) {
    const json::Value& p = r.member(v, path, "pattern");
    Pattern out;
    if (const json::Value* s = p.is_object() ? p.find("String") : nullptr; s && s->is_string()) {
      out.literal = s->string();
      if (out.literal.empty()) r.fail(path + ".pattern", "the string is empty");
    } else if (const json::Value* re = p.is_object() ? p.find("Regex") : nullptr; re && re->is_string()) {
      out.regex.emplace(re->string(), fmt::format("[Tokenizer] {}: {}.pattern", r.source(), path));
    } else {
      r.fail(path + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    return out;
  }
  // (start, end) of each match, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (regex) {
      regex->for_each_match(s, [&](std::size_t a, std::size_t b) { out.emplace_back(a, b); });
    } else {
      for (std::size_t at = s.find(literal); at != std::string_view::npos;
           at = s.find(literal, at + literal.size()))
        out.emplace_back(at, at + literal.size());
    }
    return out;
  }
  std::string replace_all(std::string_view s, std::string_view with) const {
    std::string out;
    std::size_t last = 0;
    for (const auto& [a, b] : matches(s)) {
      if (a == b) continue;
      out.append(s.substr(last, a - last));
      out.append(with);
      last = b;
    }
    out.append(s.substr(last));
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// Normalizers

struct Normalizer {
  enum class Kind { kPrepend, kReplace, kUnicode, kStrip } kind;
  std::string text;  // Prepend: what; Replace: the content
  std::optional<Pattern> pattern;
  text::NormalForm form = text::NormalForm::kNFC;
  bool left = false, right = false;

  void apply(std::string& s) const {
    switch (kind) {
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, text);
        break;
      case Kind::kReplace: s = pattern->replace_all(s, text); break;
      case Kind::kUnicode: s = text::normalize(s, form); break;
      case Kind::kStrip: {
        std::size_t a = 0, b = s.size();
        if (left)
          while (a < b && text::is_whitespace(text::code_point(s, a))) a += text::char_len(static_cast<unsigned char>(s[a]));
        if (right)
          while (b > a) {
            std::size_t k = b - 1;
            while (k > a && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            if (!text::is_whitespace(text::code_point(s, k))) break;
            b = k;
          }
        s = s.substr(a, b - a);
        break;
      }
    }
  }
};

void read_normalizer(const Reader& r, const json::Value& v, const std::string& path,
                     std::vector<Normalizer>& out) {
  const std::string type = r.type(v, path);
  Normalizer n{};
  if (type == "Sequence") {
    r.each(v, path, "normalizers",
           [&](const json::Value& e, const std::string& at) { read_normalizer(r, e, at, out); });
    return;
  } else if (type == "Prepend") {
    n.kind = Normalizer::Kind::kPrepend;
    n.text = r.string(v, path, "prepend");
  } else if (type == "Replace") {
    n.kind = Normalizer::Kind::kReplace;
    n.pattern = Pattern::read(r, v, path);
    n.text = r.string(v, path, "content");
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    n.kind = Normalizer::Kind::kUnicode;
    n.form = type == "NFC" ? text::NormalForm::kNFC : type == "NFD" ? text::NormalForm::kNFD
             : type == "NFKC" ? text::NormalForm::kNFKC : text::NormalForm::kNFKD;
  } else if (type == "Strip") {
    n.kind = Normalizer::Kind::kStrip;
    n.left = r.boolean_or(v, path, "strip_left", true);
    n.right = r.boolean_or(v, path, "strip_right", true);
  } else {
    r.unsupported(path, "normalizer", type);
  }
  out.push_back(std::move(n));
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers: each turns a list of pieces into a finer one.

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's "first")
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `s` at the matches as the library's SplitDelimiterBehavior does.
void split_piece(const Piece& piece, const std::vector<std::pair<std::size_t, std::size_t>>& found,
                 Behavior behavior, bool invert, std::vector<Piece>& out) {
  const std::string& s = piece.text;
  // Every byte of s in order, as (start, end, is_match) spans.
  struct Span {
    std::size_t a, b;
    bool match;
  };
  std::vector<Span> spans;
  std::size_t prev = 0;
  for (const auto& [a, b] : found) {
    if (prev < a) spans.push_back({prev, a, invert});
    spans.push_back({a, b, !invert});
    prev = b;
  }
  if (prev < s.size()) spans.push_back({prev, s.size(), invert});
  if (s.empty()) spans.push_back({0, 0, false});

  std::vector<Span> merged;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto sp : spans) merged.push_back({sp.a, sp.b, false});
      break;
    case Behavior::kRemoved: merged = spans; break;
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.match == prev_match && !merged.empty()) merged.back().b = sp.b;
        else merged.push_back({sp.a, sp.b, false});
        prev_match = sp.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.match && !prev_match && !merged.empty()) merged.back().b = sp.b;
        else merged.push_back({sp.a, sp.b, false});
        prev_match = sp.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev_match && !merged.empty()) merged.back().a = it->a;
        else merged.push_back({it->a, it->b, false});
        prev_match = it->match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const auto& sp : merged) {
    if (sp.a == sp.b || (behavior == Behavior::kRemoved && sp.match)) continue;
    out.push_back({s.substr(sp.a, sp.b - sp.a), piece.at_start && sp.a == 0});
  }
}

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kDigits, kMetaspace } kind;
  std::optional<Pattern> pattern;  // Split; ByteLevel with use_regex
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  bool individual = false;        // Digits
  std::string replacement;        // Metaspace
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;              // Metaspace

  void apply(std::vector<Piece>& pieces) const {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (Piece& p : pieces) {
      switch (kind) {
        case Kind::kSplit: split_piece(p, pattern->matches(p.text), behavior, invert, out); break;
        case Kind::kByteLevel: {
          if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
          std::vector<Piece> parts;
          if (pattern) split_piece(p, pattern->matches(p.text), Behavior::kIsolated, false, parts);
          else parts.push_back(std::move(p));
          for (Piece& q : parts) {
            std::string mapped;
            mapped.reserve(q.text.size() * 2);
            for (const char c : q.text) mapped += text::byte_char(static_cast<unsigned char>(c));
            out.push_back({std::move(mapped), q.at_start});
          }
          break;
        }
        case Kind::kDigits: {
          std::vector<std::pair<std::size_t, std::size_t>> found;
          for (std::size_t i = 0; i < p.text.size();) {
            const std::size_t len = text::char_len(static_cast<unsigned char>(p.text[i]));
            if (text::is_numeric(text::code_point(p.text, i))) found.emplace_back(i, i + len);
            i += len;
          }
          split_piece(p, found, individual ? Behavior::kIsolated : Behavior::kContiguous, false, out);
          break;
        }
        case Kind::kMetaspace: {
          std::string s;
          for (const char c : p.text) {
            if (c == ' ') s += replacement;
            else s += c;
          }
          const bool starts = s.compare(0, replacement.size(), replacement) == 0;
          if (!starts && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && p.at_start)))
            s.insert(0, replacement);
          Piece q{std::move(s), p.at_start};
          if (split) {
            std::vector<std::pair<std::size_t, std::size_t>> found;
            for (std::size_t at = q.text.find(replacement); at != std::string::npos;
                 at = q.text.find(replacement, at + replacement.size()))
              found.emplace_back(at, at + replacement.size());
            split_piece(q, found, Behavior::kMergedWithNext, false, out);
          } else {
            out.push_back(std::move(q));
          }
          break;
        }
      }
    }
    pieces = std::move(out);
  }
};

Behavior read_behavior(const Reader& r, const json::Value& v, const std::string& path) {
  const std::string b = r.string(v, path, "behavior");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  r.fail(path + ".behavior", fmt::format("'{}' is not a split behavior", b));
}

PreTokenizer::Prepend read_prepend(const Reader& r, const json::Value& v, const std::string& path) {
  if (r.optional(v, "prepend_scheme")) {
    const std::string s = r.string(v, path, "prepend_scheme");
    if (s == "always") return PreTokenizer::Prepend::kAlways;
    if (s == "first") return PreTokenizer::Prepend::kFirst;
    if (s == "never") return PreTokenizer::Prepend::kNever;
    r.fail(path + ".prepend_scheme", fmt::format("'{}' is not always, first or never", s));
  }
  // Files from before prepend_scheme say add_prefix_space.
  return r.boolean_or(v, path, "add_prefix_space", true) ? PreTokenizer::Prepend::kAlways
                                                         : PreTokenizer::Prepend::kNever;
}

std::string read_replacement(const Reader& r, const json::Value& v, const std::string& path) {
  const std::string s = r.string_or(v, path, "replacement", "\xE2\x96\x81");
  if (s.empty() || text::invalid_utf8_at(s) != std::string::npos ||
      text::char_len(static_cast<unsigned char>(s[0])) != s.size())
    r.fail(path + ".replacement", "expected one character");
  return s;
}

void read_pre_tokenizer(const Reader& r, const json::Value& v, const std::string& path,
                        std::vector<PreTokenizer>& out) {
  const std::string type = r.type(v, path);
  PreTokenizer p{};
  if (type == "Sequence") {
    r.each(v, path, "pretokenizers",
           [&](const json::Value& e, const std::string& at) { read_pre_tokenizer(r, e, at, out); });
    return;
  } else if (type == "Split") {
    p.kind = PreTokenizer::Kind::kSplit;
    p.pattern = Pattern::read(r, v, path);
    p.behavior = read_behavior(r, v, path);
    p.invert = r.boolean_or(v, path, "invert", false);
  } else if (type == "ByteLevel") {
    p.kind = PreTokenizer::Kind::kByteLevel;
    p.add_prefix_space = r.boolean_or(v, path, "add_prefix_space", true);
    if (r.boolean_or(v, path, "use_regex", true)) {
      p.pattern.emplace();
      p.pattern->regex.emplace(kGpt2Pattern, "ByteLevel");
    }
  } else if (type == "Digits") {
    p.kind = PreTokenizer::Kind::kDigits;
    p.individual = r.boolean_or(v, path, "individual_digits", false);
  } else if (type == "Metaspace") {
    p.kind = PreTokenizer::Kind::kMetaspace;
    p.replacement = read_replacement(r, v, path);
    p.prepend = read_prepend(r, v, path);
    p.split = r.boolean_or(v, path, "split", true);
  } else {
    r.unsupported(path, "pre-tokenizer", type);
  }
  out.push_back(std::move(p));
}

// ---------------------------------------------------------------------------------------------
// Decoders: each maps the list of token strings to another.

struct Decoder {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel, kMetaspace } kind;
  std::optional<Pattern> pattern;
  std::string content;  // Replace: the replacement; Strip: the character; Metaspace: replacement
  std::int64_t start = 0, stop = 0;
  bool prepend = true;  // Metaspace: the first token's leading space was added by encoding

  void apply(std::vector<std::string>& tokens) const {
    switch (kind) {
      case Kind::kReplace:
        for (auto& t : tokens) t = pattern->replace_all(t, content);
        break;
      case Kind::kByteFallback: {
        std::vector<std::string> out;
        std::string run;
        std::size_t run_tokens = 0;
        const auto flush = [&] {
          if (run_tokens == 0) return;
          if (text::invalid_utf8_at(run) == std::string::npos) {
            out.push_back(run);
          } else {
            for (std::size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
          }
          run.clear();
          run_tokens = 0;
        };
        for (auto& t : tokens) {
          if (const int b = byte_token(t); b >= 0) {
            run += static_cast<char>(b);
            ++run_tokens;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::kStrip:
        for (auto& t : tokens) {
          std::size_t a = 0, b = t.size();
          for (std::int64_t i = 0; i < start && t.compare(a, content.size(), content) == 0; ++i)
            a += content.size();
          for (std::int64_t i = 0; i < stop && b >= a + content.size() &&
                                   t.compare(b - content.size(), content.size(), content) == 0;
               ++i)
            b -= content.size();
          t = t.substr(a, b - a);
        }
        break;
      case Kind::kByteLevel: {
        std::string bytes;
        for (const auto& t : tokens) {
          std::string mapped;
          bool all = true;
          for (std::size_t i = 0; i < t.size() && all;) {
            const int b = text::char_byte(text::code_point(t, i));
            if (b < 0) all = false;
            else mapped += static_cast<char>(b);
            i += text::char_len(static_cast<unsigned char>(t[i]));
          }
          bytes += all ? mapped : t;  // a token outside the alphabet (an added one) as it is
        }
        tokens.assign(1, text::utf8_lossy(bytes));
        break;
      }
      case Kind::kMetaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (std::size_t k = 0; k < t.size();) {
            const std::size_t len = text::char_len(static_cast<unsigned char>(t[k]));
            if (t.compare(k, len, content) == 0) {
              if (!(i == 0 && k == 0 && prepend)) out += ' ';
            } else {
              out.append(t, k, len);
            }
            k += len;
          }
          tokens[i] = std::move(out);
        }
        break;
    }
  }

  // The byte of a "<0xHH>" token, or -1.
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

void read_decoder(const Reader& r, const json::Value& v, const std::string& path,
                  std::vector<Decoder>& out) {
  const std::string type = r.type(v, path);
  Decoder d{};
  if (type == "Sequence") {
    r.each(v, path, "decoders",
           [&](const json::Value& e, const std::string& at) { read_decoder(r, e, at, out); });
    return;
  } else if (type == "Replace") {
    d.kind = Decoder::Kind::kReplace;
    d.pattern = Pattern::read(r, v, path);
    d.content = r.string(v, path, "content");
  } else if (type == "ByteFallback") {
    d.kind = Decoder::Kind::kByteFallback;
  } else if (type == "Fuse") {
    d.kind = Decoder::Kind::kFuse;
  } else if (type == "Strip") {
    d.kind = Decoder::Kind::kStrip;
    d.content = r.string(v, path, "content");
    if (d.content.empty() || text::invalid_utf8_at(d.content) != std::string::npos ||
        text::char_len(static_cast<unsigned char>(d.content[0])) != d.content.size())
      r.fail(path + ".content", "expected one character");
    d.start = r.integer_or(v, path, "start", 0, 0, 1 << 20);
    d.stop = r.integer_or(v, path, "stop", 0, 0, 1 << 20);
  } else if (type == "ByteLevel") {
    d.kind = Decoder::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    d.kind = Decoder::Kind::kMetaspace;
    d.content = read_replacement(r, v, path);
    d.prepend = read_prepend(r, v, path) != PreTokenizer::Prepend::kNever;
  } else {
    r.unsupported(path, "decoder", type);
  }
  out.push_back(std::move(d));
}

// ---------------------------------------------------------------------------------------------
// Added tokens, found in the text by a trie: at each position the longest token wins, and the
// leftmost match goes first (the library's Aho-Corasick in LeftmostLongest mode).

struct AddedToken {
  int id;
  std::string content;  // as matched: normalized first for tokens with normalized: true
  bool single_word, lstrip, rstrip, normalized, special;
};

class AddedMatcher {
 public:
  void add(const std::string& text, int token) {
    if (text.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    first_[static_cast<unsigned char>(text[0])] = true;
    int n = 0;
    for (const char c : text) {
      const auto it = nodes_[static_cast<std::size_t>(n)].next.find(c);
      if (it != nodes_[static_cast<std::size_t>(n)].next.end()) {
        n = it->second;
      } else {
        const int m = static_cast<int>(nodes_.size());
        nodes_[static_cast<std::size_t>(n)].next.emplace(c, m);
        nodes_.emplace_back();
        n = m;
      }
    }
    if (nodes_[static_cast<std::size_t>(n)].token < 0) nodes_[static_cast<std::size_t>(n)].token = token;
  }
  bool empty() const { return nodes_.empty(); }
  // The leftmost-longest match at or after `from`: (start, end, token), or token -1.
  std::tuple<std::size_t, std::size_t, int> find(std::string_view s, std::size_t from) const {
    for (std::size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      int n = 0, best = -1;
      std::size_t best_end = 0;
      for (std::size_t k = i; k < s.size(); ++k) {
        const auto& next = nodes_[static_cast<std::size_t>(n)].next;
        const auto it = next.find(s[k]);
        if (it == next.end()) break;
        n = it->second;
        if (nodes_[static_cast<std::size_t>(n)].token >= 0) {
          best = nodes_[static_cast<std::size_t>(n)].token;
          best_end = k + 1;
        }
      }
      if (best >= 0) return {i, best_end, best};
    }
    return {s.size(), s.size(), -1};
  }

 private:
  struct Node {
    std::unordered_map<char, int> next;
    int token = -1;  // index into the added tokens
  };
  std::vector<Node> nodes_;
  bool first_[256] = {};
};

// A part of the input: text still to tokenize, or an added token already found.
struct Part {
  std::string text;
  int added = -1;  // index of the added token, or -1
  bool at_start = false;
};

struct Template {
  // For each item: a fixed list of ids, or the sequence (empty ids and is_sequence).
  struct Item {
    bool is_sequence;
    std::vector<int> ids;
  };
  std::vector<Item> items;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string source;
  std::optional<text::Bpe> bpe;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<Template> post;  // applied in order with add_special_tokens
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, normalized_matcher;
  std::vector<std::string> id_to_token;  // "" where no token
  std::vector<char> has_token;
  std::vector<char> special;
  std::unordered_map<std::string, int> added_ids;
  bool byte_fallback_decoder = false;
  std::optional<std::int64_t> truncate;  // max_length, with direction
  bool truncate_left = false;

  void normalize(std::string& s) const {
    for (const auto& n : normalizers) n.apply(s);
  }

  // Splits `part` at the added tokens `matcher` finds, as the library's find_matches.
  void split_added(const Part& part, const AddedMatcher& matcher, std::vector<Part>& out) const {
    const std::string& s = part.text;
    std::size_t done = 0, from = 0;
    for (;;) {
      std::size_t start = 0, stop = 0;
      int index = -1;
      std::tie(start, stop, index) = matcher.find(s, from);
      if (index < 0) break;
      from = stop;
      const AddedToken& t = added[static_cast<std::size_t>(index)];
      if (t.single_word) {
        const auto word_before = [&] {
          if (start == 0) return false;
          std::size_t k = start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          const char32_t c = text::code_point(s, k);
          return text::is_alphanumeric(c) || c == '_';
        };
        const auto word_after = [&] {
          if (stop >= s.size()) return false;
          const char32_t c = text::code_point(s, stop);
          return text::is_alphanumeric(c) || c == '_';
        };
        if (word_before() || word_after()) continue;
      }
      if (t.lstrip) {
        std::size_t k = start;
        while (k > done) {
          std::size_t j = k - 1;
          while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
          if (!text::is_whitespace(text::code_point(s, j))) break;
          k = j;
        }
        start = k;
      }
      if (t.rstrip)
        while (stop < s.size() && text::is_whitespace(text::code_point(s, stop)))
          stop += text::char_len(static_cast<unsigned char>(s[stop]));
      if (done < start) out.push_back({s.substr(done, start - done), -1, part.at_start && done == 0});
      out.push_back({s.substr(start, stop - start), index, false});
      done = stop;
      from = std::max(from, stop);
    }
    if (done < s.size() || s.empty()) out.push_back({s.substr(done), -1, part.at_start && done == 0});
  }

  std::vector<int> encode(std::string_view input, bool add_special) const {
    if (const std::size_t bad = text::invalid_utf8_at(input); bad != std::string_view::npos) {
      std::string bytes;
      for (std::size_t k = bad; k < std::min(input.size(), bad + 4); ++k)
        bytes += fmt::format(" {:02x}", static_cast<unsigned char>(input[k]));
      throw ArgumentError(fmt::format("[Tokenizer::encode] text: not UTF-8 at byte {} of {} (bytes{})",
                                      bad, input.size(), bytes));
    }
    // 1. Added tokens that match the raw text; 2. the normalizer on each part between them;
    // 3. added tokens that match normalized text.
    std::vector<Part> parts, normalized_parts;
    const Part whole{std::string(input), -1, true};
    if (raw_matcher.empty()) parts.push_back(whole);
    else split_added(whole, raw_matcher, parts);
    for (Part& p : parts) {
      if (p.added >= 0) {
        normalized_parts.push_back(std::move(p));
        continue;
      }
      normalize(p.text);
      if (normalized_matcher.empty()) normalized_parts.push_back(std::move(p));
      else split_added(p, normalized_matcher, normalized_parts);
    }
    // 4. Pre-tokenize and 5. run the model on each piece. Repeated words are looked up once.
    std::vector<int> ids;
    ids.reserve(input.size() / 3 + 8);
    std::unordered_map<std::string, std::vector<int>> cache;
    std::vector<Piece> pieces;
    for (const Part& p : normalized_parts) {
      if (p.added >= 0) {
        ids.push_back(added[static_cast<std::size_t>(p.added)].id);
        continue;
      }
      if (p.text.empty()) continue;  // nothing to pre-tokenize: no prefix space is added to it
      pieces.clear();
      pieces.push_back({p.text, p.at_start});
      for (const auto& pt : pre_tokenizers) pt.apply(pieces);
      for (const Piece& piece : pieces) {
        if (piece.text.size() > 64) {  // long words are rare: not worth keeping
          bpe->encode_word(piece.text, ids);
          continue;
        }
        const auto [it, fresh] = cache.try_emplace(piece.text);
        if (fresh) bpe->encode_word(piece.text, it->second);
        ids.insert(ids.end(), it->second.begin(), it->second.end());
      }
    }
    // 6. Truncation, leaving room for what the post-processor adds; 7. the post-processor.
    if (truncate) {
      std::int64_t room = *truncate;
      if (add_special)
        for (const auto& t : post)
          for (const auto& item : t.items) room -= static_cast<std::int64_t>(item.ids.size());
      room = std::max<std::int64_t>(room, 0);
      if (static_cast<std::int64_t>(ids.size()) > room) {
        if (truncate_left) ids.erase(ids.begin(), ids.end() - room);
        else ids.resize(static_cast<std::size_t>(room));
      }
    }
    if (add_special) {
      for (const auto& t : post) {
        std::vector<int> out;
        for (const auto& item : t.items) {
          if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
          else out.insert(out.end(), item.ids.begin(), item.ids.end());
        }
        ids = std::move(out);
      }
    }
    return ids;
  }

  std::string decode(const std::vector<int>& ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int id : ids) {
      check_id(id, "Tokenizer::decode");
      if (skip_special && special[static_cast<std::size_t>(id)]) continue;
      tokens.push_back(id_to_token[static_cast<std::size_t>(id)]);
    }
    if (!has_decoder) {
      std::string out;
      for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    for (const auto& d : decoders) d.apply(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  void check_id(int id, const char* call) const {
    if (id < 0 || id >= static_cast<int>(id_to_token.size()) || !has_token[static_cast<std::size_t>(id)])
      throw ArgumentError(fmt::format("[{}] id {} is not in the vocabulary of {} ({} ids)", call,
                                      id, source, id_to_token.size()));
  }
};

namespace {

void read_model(const Reader& r, json::Value& root, Tokenizer::Impl& t) {
  json::Value& m = const_cast<json::Value&>(r.member(root, "tokenizer", "model"));
  const std::string type = r.type(m, "model");
  if (type != "BPE") r.unsupported("model", "model", type);
  if (const json::Value* d = r.optional(m, "dropout"); d && !(d->is_number() && d->number() == 0.0))
    r.fail("model.dropout", "BPE dropout samples a different tokenization each time; recur "
                            "encodes deterministically, as the library does without dropout");
  json::Value& vocab = const_cast<json::Value&>(r.member(m, "model", "vocab"));
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object of token: id");
  std::vector<std::pair<std::string, int>> ids;
  auto members = vocab.take_object();  // the strings move into the model, not copied
  ids.reserve(members.size());
  for (auto& [token, id] : members) {
    if (!id.is_integer() || id.integer() < 0 || id.integer() >= (1 << 24))
      r.fail("model.vocab", fmt::format("the id of {} is not an integer in 0 to {}",
                                        json::quote(token), (1 << 24) - 1));
    ids.emplace_back(std::move(token), static_cast<int>(id.integer()));
  }
  const json::Value& merges_v = r.member(m, "model", "merges");
  if (!merges_v.is_array()) r.fail("model.merges", "expected a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_v.array().size());
  for (std::size_t i = 0; i < merges_v.array().size(); ++i) {
    const json::Value& e = merges_v.array()[i];
    if (e.is_string()) {  // "a b"
      const std::string& s = e.string();
      const std::size_t sp = s.find(' ', 1);
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(fmt::format("model.merges[{}]", i), fmt::format("{} is not two tokens", json::quote(s)));
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.array().size() == 2 && e.array()[0].is_string() &&
               e.array()[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(e.array()[0].string(), e.array()[1].string());
    } else {
      r.fail(fmt::format("model.merges[{}]", i), "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  text::BpeOptions o;
  const std::string unk = r.string_or(m, "model", "unk_token", "");
  o.fuse_unk = r.boolean_or(m, "model", "fuse_unk", false);
  o.byte_fallback = r.boolean_or(m, "model", "byte_fallback", false);
  o.ignore_merges = r.boolean_or(m, "model", "ignore_merges", false);
  o.continuing_subword_prefix = r.string_or(m, "model", "continuing_subword_prefix", "");
  o.end_of_word_suffix = r.string_or(m, "model", "end_of_word_suffix", "");
  t.bpe.emplace(std::move(ids), merges, o, fmt::format("[Tokenizer] {}: model", r.source()));
  if (!unk.empty()) {
    const auto id = t.bpe->find(unk);
    if (!id) r.fail("model.unk_token", fmt::format("{} is not in the vocabulary", json::quote(unk)));
    o.unk = *id;
    t.bpe->set_unk(*id);
  }
  t.id_to_token = t.bpe->tokens();
  t.has_token = t.bpe->has_token();
}

void read_added(const Reader& r, const json::Value& root, Tokenizer::Impl& t) {
  const json::Value* list = r.optional(root, "added_tokens");
  if (!list) return;
  if (!list->is_array()) r.fail("added_tokens", "expected a list");
  for (std::size_t i = 0; i < list->array().size(); ++i) {
    const json::Value& e = list->array()[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    if (!e.is_object()) r.fail(path, "expected an object");
    const json::Value& id = r.member(e, path, "id");
    if (!id.is_integer() || id.integer() < 0 || id.integer() >= (1 << 24))
      r.fail(path + ".id", "expected an integer in 0 to 2^24 - 1");
    AddedToken a;
    a.id = static_cast<int>(id.integer());
    a.content = r.string(e, path, "content");
    if (a.content.empty()) r.fail(path + ".content", "is empty");
    a.single_word = r.boolean_or(e, path, "single_word", false);
    a.lstrip = r.boolean_or(e, path, "lstrip", false);
    a.rstrip = r.boolean_or(e, path, "rstrip", false);
    a.special = r.boolean_or(e, path, "special", false);
    a.normalized = r.boolean_or(e, path, "normalized", !a.special);
    const auto uid = static_cast<std::size_t>(a.id);
    if (uid >= t.id_to_token.size()) {
      t.id_to_token.resize(uid + 1);
      t.has_token.resize(uid + 1, 0);
    }
    t.id_to_token[uid] = a.content;
    t.has_token[uid] = 1;
    t.added_ids[a.content] = a.id;
    t.added.push_back(a);
  }
  t.special.assign(t.id_to_token.size(), 0);
  for (std::size_t i = 0; i < t.added.size(); ++i) {
    AddedToken& a = t.added[i];
    if (a.special) t.special[static_cast<std::size_t>(a.id)] = 1;
    if (a.normalized) {
      std::string n = a.content;
      t.normalize(n);
      a.content = n;
      t.normalized_matcher.add(n, static_cast<int>(i));
    } else {
      t.raw_matcher.add(a.content, static_cast<int>(i));
    }
  }
}

int special_id(const Reader& r, const Tokenizer::Impl& t, const json::Value& pair, const std::string& path) {
  // ["[CLS]", 101]
  if (!pair.is_array() || pair.array().size() != 2 || !pair.array()[1].is_integer())
    r.fail(path, "expected [token, id]");
  const std::int64_t id = pair.array()[1].integer();
  if (id < 0 || id >= static_cast<std::int64_t>(t.id_to_token.size()))
    r.fail(path, fmt::format("id {} is outside the vocabulary", id));
  return static_cast<int>(id);
}

void read_post(const Reader& r, const json::Value& v, const std::string& path, Tokenizer::Impl& t) {
  const std::string type = r.type(v, path);
  if (type == "Sequence") {
    r.each(v, path, "processors",
           [&](const json::Value& e, const std::string& at) { read_post(r, e, at, t); });
  } else if (type == "ByteLevel") {
    // Only offsets change; the ids are left as they are.
  } else if (type == "TemplateProcessing") {
    const json::Value& single = r.member(v, path, "single");
    const json::Value& specials = r.member(v, path, "special_tokens");
    if (!single.is_array()) r.fail(path + ".single", "expected a list");
    Template tpl;
    for (std::size_t i = 0; i < single.array().size(); ++i) {
      const json::Value& item = single.array()[i];
      const std::string ipath = fmt::format("{}.single[{}]", path, i);
      if (const json::Value* s = item.is_object() ? item.find("Sequence") : nullptr) {
        if (r.string(*s, ipath + ".Sequence", "id") != "A")
          r.fail(ipath, "a single-sequence template can only hold sequence A");
        tpl.items.push_back({true, {}});
      } else if (const json::Value* st = item.is_object() ? item.find("SpecialToken") : nullptr) {
        const std::string name = r.string(*st, ipath + ".SpecialToken", "id");
        const json::Value* entry = specials.is_object() ? specials.find(name) : nullptr;
        if (!entry) r.fail(ipath, fmt::format("{} is not in special_tokens", json::quote(name)));
        const json::Value& list = r.member(*entry, path + ".special_tokens." + name, "ids");
        if (!list.is_array()) r.fail(path + ".special_tokens." + name + ".ids", "expected a list");
        Template::Item it{false, {}};
        for (const auto& x : list.array()) {
          if (!x.is_integer() || x.integer() < 0 || x.integer() >= static_cast<std::int64_t>(t.id_to_token.size()))
            r.fail(path + ".special_tokens." + name + ".ids", "holds an id outside the vocabulary");
          it.ids.push_back(static_cast<int>(x.integer()));
        }
        tpl.items.push_back(std::move(it));
      } else {
        r.fail(ipath, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    t.post.push_back(std::move(tpl));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    Template tpl;
    tpl.items.push_back({false, {special_id(r, t, r.member(v, path, "cls"), path + ".cls")}});
    tpl.items.push_back({true, {}});
    tpl.items.push_back({false, {special_id(r, t, r.member(v, path, "sep"), path + ".sep")}});
    t.post.push_back(std::move(tpl));
  } else {
    r.unsupported(path, "post-processor", type);
  }
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

bool Tokenizer::present(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json", ec);
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec)
                               ? (std::filesystem::path(path) / "tokenizer.json").string()
                               : path;
  const auto text = detail::read_file(file, kMaxFileBytes);
  if (!text)
    throw FormatError(fmt::format("[Tokenizer] {}: cannot read the file (missing, not a regular "
                                  "file, or over {} bytes)", file, kMaxFileBytes));
  return from_json(*text, file);
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json(std::string_view json_text,
                                                      const std::string& source) {
  const Reader r(source);
  json::Value root = json::parse(json_text, "Tokenizer] " + source + ": [tokenizer.json");
  if (!root.is_object()) r.fail("tokenizer", "the file is not a JSON object");
  std::shared_ptr<Tokenizer> tok(new Tokenizer());
  Impl& t = *tok->impl_;
  t.source = source;
  if (const json::Value* n = r.optional(root, "normalizer")) read_normalizer(r, *n, "normalizer", t.normalizers);
  if (const json::Value* p = r.optional(root, "pre_tokenizer"))
    read_pre_tokenizer(r, *p, "pre_tokenizer", t.pre_tokenizers);
  read_model(r, root, t);
  read_added(r, root, t);
  t.special.resize(t.id_to_token.size(), 0);
  if (const json::Value* p = r.optional(root, "post_processor")) read_post(r, *p, "post_processor", t);
  if (const json::Value* d = r.optional(root, "decoder")) {
    t.has_decoder = true;
    read_decoder(r, *d, "decoder", t.decoders);
  }
  for (const auto& d : t.decoders) t.byte_fallback_decoder |= d.kind == Decoder::Kind::kByteFallback;
  if (const json::Value* tr = r.optional(root, "truncation")) {
    t.truncate = r.integer_or(*tr, "truncation", "max_length", 512, 0, INT64_MAX);
    const std::string dir = r.string_or(*tr, "truncation", "direction", "Right");
    if (dir != "Right" && dir != "Left") r.fail("truncation.direction", "expected Right or Left");
    t.truncate_left = dir == "Left";
  }
  if (const json::Value* pad = r.optional(root, "padding")) {
    const json::Value* strategy = r.optional(*pad, "strategy");
    if (!(strategy && strategy->is_string() && strategy->string() == "BatchLongest"))
      r.fail("padding", "fixed-length padding is not supported (BatchLongest pads nothing for one "
                        "text and is accepted)");
  }
  return tok;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end())
    return it->second;
  return impl_->bpe->find(token);
}

const std::string& Tokenizer::id_to_token(int id) const {
  impl_->check_id(id, "Tokenizer::id_to_token");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<std::size_t>(id)];
}

const std::string& Tokenizer::source() const { return impl_->source; }

std::string Tokenizer::describe() const {
  const Impl& t = *impl_;
  bool byte_level = false;
  for (const auto& p : t.pre_tokenizers) byte_level |= p.kind == PreTokenizer::Kind::kByteLevel;
  std::string adds;
  for (const auto& tpl : t.post)
    for (const auto& item : tpl.items)
      for (const int id : item.ids) adds += (adds.empty() ? "" : ", ") + t.id_to_token[static_cast<std::size_t>(id)];
  return fmt::format("BPE, {} ids ({} merges, {} added tokens){}{}; encoding adds {}",
                     t.id_to_token.size(), t.bpe->n_merges(), t.added.size(),
                     byte_level ? ", byte-level" : "",
                     t.bpe->options().byte_fallback ? ", byte fallback" : "",
                     adds.empty() ? std::string("nothing") : adds);
}

// ---------------------------------------------------------------------------------------------

DecodeStream::DecodeStream(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

std::string DecodeStream::put(int id) {
  const Tokenizer::Impl& t = tokenizer_->impl();
  t.check_id(id, "DecodeStream::put");
  window_.push_back(id);
  // A byte-fallback run is decoded as a whole: wait until it has ended.
  if (t.byte_fallback_decoder && Decoder::byte_token(t.id_to_token[static_cast<std::size_t>(id)]) >= 0)
    return {};
  const std::string text = tokenizer_->decode(window_, skip_special_);
  // An incomplete UTF-8 sequence at the end decodes as U+FFFD: wait for the rest of it.
  if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return {};
  if (text.compare(0, prefix_text_.size(), prefix_text_) != 0) return {};
  std::string out = text.substr(prefix_text_.size());
  // Keep one token of context: decoders treat the first token specially (a stripped space).
  window_.erase(window_.begin(), window_.end() - 1);
  prefix_text_ = tokenizer_->decode(window_, skip_special_);
  return out;
}

std::string DecodeStream::finish() {
  const std::string text = tokenizer_->decode(window_, skip_special_);
  std::string out = text.compare(0, prefix_text_.size(), prefix_text_) == 0
                        ? text.substr(prefix_text_.size())
                        : text;
  window_.clear();
  prefix_text_.clear();
  return out;
}

}  // namespace recur
