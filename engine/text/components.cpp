#include "text/components.h"

#include <algorithm>
#include <optional>

#include "text/regex.h"
#include "text/unicode.h"

namespace recur::text {
namespace {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

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

// Metaspace's prepend_scheme, read as the library reads it: "always" when absent; the older
// add_prefix_space: false is accepted only beside "never" (the library refuses the file
// otherwise), and add_prefix_space: true changes nothing.
PreTokenizer::Prepend read_prepend(const Reader& r, const json::Value& v, const std::string& path) {
  PreTokenizer::Prepend scheme = PreTokenizer::Prepend::kAlways;
  if (r.optional(v, "prepend_scheme")) {
    const std::string s = r.string(v, path, "prepend_scheme");
    if (s == "always") scheme = PreTokenizer::Prepend::kAlways;
    else if (s == "first") scheme = PreTokenizer::Prepend::kFirst;
    else if (s == "never") scheme = PreTokenizer::Prepend::kNever;
    else r.fail(path + ".prepend_scheme", fmt::format("'{}' is not always, first or never", s));
  }
  if (!r.boolean_or(v, path, "add_prefix_space", true) && scheme != PreTokenizer::Prepend::kNever)
    r.fail(path + ".add_prefix_space", "false does not match the prepend_scheme (the library "
                                       "refuses this file; say prepend_scheme \"never\")");
  return scheme;
}

std::string read_replacement(const Reader& r, const json::Value& v, const std::string& path) {
  const std::string s = r.string(v, path, "replacement");  // required, as in the library
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
              // The library drops every replacement of the first token, not only a leading one.
              if (!(i == 0 && prepend)) out += ' ';
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

  // The byte of a "<0xHH>" token, or -1. The library parses the two characters with Rust's
  // u8::from_str_radix, which takes either case and a leading '+' ("<0x+A>" is byte 10).
  static int byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (t[3] == '+') return hex(t[4]);
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
// The chains.

Normalizers::Normalizers() = default;
Normalizers::~Normalizers() = default;
Normalizers::Normalizers(Normalizers&&) noexcept = default;
Normalizers& Normalizers::operator=(Normalizers&&) noexcept = default;
void Normalizers::read(const Reader& r, const json::Value& v, const std::string& path) {
  read_normalizer(r, v, path, steps_);
}
void Normalizers::apply(std::string& s) const {
  for (const auto& n : steps_) n.apply(s);
}

PreTokenizers::PreTokenizers() = default;
PreTokenizers::~PreTokenizers() = default;
PreTokenizers::PreTokenizers(PreTokenizers&&) noexcept = default;
PreTokenizers& PreTokenizers::operator=(PreTokenizers&&) noexcept = default;
void PreTokenizers::read(const Reader& r, const json::Value& v, const std::string& path) {
  read_pre_tokenizer(r, v, path, steps_);
}
void PreTokenizers::apply(std::vector<Piece>& pieces) const {
  for (const auto& p : steps_) p.apply(pieces);
}
bool PreTokenizers::byte_level() const {
  return std::any_of(steps_.begin(), steps_.end(),
                     [](const PreTokenizer& p) { return p.kind == PreTokenizer::Kind::kByteLevel; });
}

Decoders::Decoders() = default;
Decoders::~Decoders() = default;
Decoders::Decoders(Decoders&&) noexcept = default;
Decoders& Decoders::operator=(Decoders&&) noexcept = default;
void Decoders::read(const Reader& r, const json::Value& v, const std::string& path) {
  read_decoder(r, v, path, steps_);
}
void Decoders::apply(std::vector<std::string>& tokens) const {
  for (const auto& d : steps_) d.apply(tokens);
}
bool Decoders::byte_fallback() const {
  return std::any_of(steps_.begin(), steps_.end(),
                     [](const Decoder& d) { return d.kind == Decoder::Kind::kByteFallback; });
}
int Decoders::byte_token(const std::string& t) { return Decoder::byte_token(t); }

}  // namespace recur::text
