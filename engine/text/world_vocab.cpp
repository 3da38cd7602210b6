// RWKV's world vocabulary: the line format, Python's literal syntax (read, never evaluated), and
// the byte trie that encodes by greedy longest match as the reference TRIE_TOKENIZER does.
#include "text/world_vocab.h"

#include <fmt/format.h>

#include <algorithm>

#include "recur/error.h"
#include "text/unicode.h"

namespace recur::text {
namespace {

constexpr std::size_t kMaxIds = std::size_t(1) << 24;  // the published file has 65,529
constexpr std::uint64_t kBig = std::uint64_t(1) << 40;  // where a number read stops growing

bool is_octal(char c) { return c >= '0' && c <= '7'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A quoted character for messages: printable ASCII as itself, anything else as \xhh.
std::string shown(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x7F ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02x}", u);
}

// Reads the escape at s[i] (a backslash, with at least one character after it) onto `out`
// and moves `i` past it; returns why it cannot be read, or "".
std::string read_escape(std::string_view s, std::size_t& i, bool is_bytes, std::string& out) {
  const char e = s[i + 1];
  const std::size_t escape = i;
  i += 2;
  switch (e) {
    case '\\': case '\'': case '"': out += e; return {};
    case 'a': out += '\a'; return {};
    case 'b': out += '\b'; return {};
    case 'f': out += '\f'; return {};
    case 'n': out += '\n'; return {};
    case 'r': out += '\r'; return {};
    case 't': out += '\t'; return {};
    case 'v': out += '\v'; return {};
    default: break;
  }
  if (is_octal(e)) {  // one to three digits, the first already read
    unsigned value = static_cast<unsigned>(e - '0');
    for (int k = 0; k < 2 && i < s.size() && is_octal(s[i]); ++k, ++i)
      value = value * 8 + static_cast<unsigned>(s[i] - '0');
    if (!is_bytes) {
      append_utf8(out, static_cast<char32_t>(value));
    } else if (value > 0377) {
      return fmt::format("the octal escape \\{:o} is past \\377 in a bytes literal (Python "
                         "would drop its high bit)", value);
    } else {
      out += static_cast<char>(value);
    }
    return {};
  }
  const int digits = e == 'x' ? 2 : (e == 'u' && !is_bytes) ? 4 : (e == 'U' && !is_bytes) ? 8 : 0;
  if (digits > 0) {
    std::uint32_t value = 0;
    for (int k = 0; k < digits; ++k, ++i) {
      const int h = i < s.size() ? hex_value(s[i]) : -1;
      if (h < 0) return fmt::format("\\{} needs {} hexadecimal digits", e, digits);
      value = value * 16 + static_cast<std::uint32_t>(h);
    }
    if (is_bytes) {
      out += static_cast<char>(value);  // \xhh in bytes is the byte itself
    } else if (value > 0x10FFFF) {
      return fmt::format("\\U{:08x} is past U+10FFFF", value);
    } else if (value >= 0xD800 && value <= 0xDFFF) {
      return fmt::format("U+{:04X} is a surrogate, which has no UTF-8 (the reference cannot "
                         "encode it either)", value);
    } else {
      append_utf8(out, static_cast<char32_t>(value));  // \xhh in a str is the code point U+00hh
    }
    return {};
  }
  if (e == 'N' && !is_bytes)
    return "a named escape \\N{...}: recur has no table of Unicode names (write the character, "
           "or \\u or \\U)";
  // Any other escape is no escape: Python keeps the backslash and reads on from the character
  // after it (which may be a quote, a non-ASCII character, ...).
  out += '\\';
  i = escape + 1;
  return {};
}

}  // namespace

PyLiteral parse_py_literal(std::string_view s, std::size_t at) {
  PyLiteral r;
  const auto fail = [&r](std::size_t column, std::string why) {
    r.error_at = column;
    r.error = std::move(why);
    r.bytes.clear();
    return r;
  };
  std::size_t i = at;
  if (i < s.size() && (s[i] == 'b' || s[i] == 'B')) {
    r.is_bytes = true;
    ++i;
  }
  if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) {
    const bool prefix = i < s.size() && std::string_view("rRuUfF").find(s[i]) != std::string_view::npos;
    if (prefix && i + 1 < s.size() && (s[i + 1] == '\'' || s[i + 1] == '"' || s[i + 1] == 'b' || s[i + 1] == 'B'))
      return fail(i, fmt::format("the prefix {} is not read: only plain str literals and bytes "
                                 "literals (b) are", shown(s[i])));
    return fail(i, "expected a Python str or bytes literal ('...', \"...\", b'...' or b\"...\")");
  }
  const char quote = s[i];
  if (i + 2 < s.size() && s[i + 1] == quote && s[i + 2] == quote)
    return fail(i, "a triple-quoted literal is not read");
  const std::size_t open = i++;
  while (i < s.size()) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == quote) {
      r.end = i + 1;
      return r;
    }
    if (c == '\0') return fail(i, "a NUL byte in the literal (Python refuses it in source)");
    if (c == '\r' || c == '\n') return fail(i, "a line break in the literal");
    if (u >= 0x80) {
      if (r.is_bytes)
        return fail(i, "a non-ASCII character in a bytes literal (Python allows only ASCII "
                       "there: it is written \\xhh)");
      const std::size_t len = char_len(u);
      if (i + len > s.size() || invalid_utf8_at(s.substr(i, len)) != std::string_view::npos)
        return fail(i, fmt::format("byte 0x{:02x} does not start a UTF-8 character", u));
      r.bytes.append(s.substr(i, len));
      i += len;
      continue;
    }
    if (c != '\\') {
      r.bytes += c;
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) break;  // a backslash escapes the end: no closing quote
    const std::size_t escape = i;
    if (std::string why = read_escape(s, i, r.is_bytes, r.bytes); !why.empty()) return fail(escape, why);
  }
  return fail(open, "the literal has no closing quote");
}

// ---------------------------------------------------------------------------------------------

WorldVocab::WorldVocab(std::string_view text, const std::string& source) {
  const auto fail = [&](std::size_t line, std::size_t column, const std::string& why) {
    throw FormatError(fmt::format("[Tokenizer] {}:{}:{}: {}", source, line, column + 1, why));
  };
  tokens_.emplace_back();  // id 0: the end of a text, no bytes
  std::size_t line_no = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t stop = text.find('\n', start);
    if (stop == std::string_view::npos) stop = text.size();
    std::string_view line = text.substr(start, stop - start);
    start = stop + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a CRLF file
    if (line.empty()) fail(line_no, 0, "an empty line (each line is `<id> <literal> <length>`)");
    if (const std::size_t bad = invalid_utf8_at(line); bad != std::string_view::npos)
      fail(line_no, bad, fmt::format("byte 0x{:02x} is not UTF-8 (the file is read as UTF-8 text)",
                                     static_cast<unsigned char>(line[bad])));
    if (const std::size_t cr = line.find('\r'); cr != std::string_view::npos)
      fail(line_no, cr, "a carriage return inside the line (Python would end the line there)");
    // <id>
    std::size_t i = 0;
    std::uint64_t id = 0;
    for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i)
      id = std::min<std::uint64_t>(id * 10 + static_cast<std::uint64_t>(line[i] - '0'), kBig);
    if (i == 0)
      fail(line_no, 0, line_no == 1 && line.substr(0, 3) == "\xEF\xBB\xBF"
                           ? "a byte-order mark before the first id (the reference reads it as "
                             "part of the id, and fails)"
                           : "expected the id (a decimal number) to start the line");
    if (i >= line.size() || line[i] != ' ')
      fail(line_no, i, fmt::format("expected one space after the id, found {}",
                                   i < line.size() ? shown(line[i]) : "the end of the line"));
    const std::size_t expected = tokens_.size();
    if (id == 0)
      fail(line_no, 0, "id 0 is not in the file: RWKV keeps it for the end of a text; ids start at 1");
    if (id < expected)
      fail(line_no, 0, fmt::format("id {} again (line {} has it): each id is given once", id, id));
    if (id > expected)
      fail(line_no, 0, fmt::format("id {} leaves a gap: id {} {} missing (the ids run 1, 2, 3, "
                                   "... one a line)", id,
                                   id == expected + 1 ? fmt::format("{}", expected)
                                                      : fmt::format("{} to {}", expected, id - 1),
                                   id == expected + 1 ? "is" : "are"));
    if (expected >= kMaxIds) fail(line_no, 0, fmt::format("more than {} ids", kMaxIds - 1));
    // <literal>
    PyLiteral lit = parse_py_literal(line, i + 1);
    if (!lit.ok()) fail(line_no, lit.error_at, lit.error);
    i = lit.end;
    if (i >= line.size() || line[i] != ' ')
      fail(line_no, i, fmt::format("expected one space after the literal, found {}",
                                   i < line.size() ? shown(line[i]) : "the end of the line"));
    // <length>
    const std::size_t length_at = ++i;
    std::uint64_t length = 0;
    for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i)
      length = std::min<std::uint64_t>(length * 10 + static_cast<std::uint64_t>(line[i] - '0'), kBig);
    if (i == length_at || i != line.size())
      fail(line_no, i, "expected the token's length in bytes (a decimal number) to end the line");
    if (length != lit.bytes.size())
      fail(line_no, length_at, fmt::format("the line says {} bytes, the literal holds {}", length,
                                           lit.bytes.size()));
    if (lit.bytes.empty()) fail(line_no, lit.end - 1, "an empty token");
    max_bytes_ = std::max(max_bytes_, lit.bytes.size());
    tokens_.push_back(std::move(lit.bytes));
  }
  if (tokens_.size() == 1) throw FormatError(fmt::format("[Tokenizer] {}: the file holds no tokens", source));
  build_trie();
  for (int b = 0; b < 256; ++b)
    if (root_[b] < 0 || node_token_[static_cast<std::size_t>(root_[b])] < 0)
      throw FormatError(fmt::format(
          "[Tokenizer] {}: byte 0x{:02x} is no token of its own, so a text holding it cannot be "
          "encoded (the published file has all 256 bytes, as ids 1 to 256)", source, b));
}

void WorldVocab::build_trie() {
  // Built with a list of children per node, then flattened. Ids go in in order, so where two
  // hold the same bytes the later one is left at the node, as in the reference.
  std::vector<std::vector<std::pair<unsigned char, std::int32_t>>> kids(1);
  std::vector<std::int32_t> token(1, -1);
  for (std::size_t id = 1; id < tokens_.size(); ++id) {
    std::int32_t node = 0;
    for (const char c : tokens_[id]) {
      const auto b = static_cast<unsigned char>(c);
      auto& list = kids[static_cast<std::size_t>(node)];
      auto it = std::lower_bound(list.begin(), list.end(), std::make_pair(b, std::int32_t{-1}));
      if (it == list.end() || it->first != b) {
        const auto fresh = static_cast<std::int32_t>(kids.size());
        it = list.insert(it, {b, fresh});
        kids.emplace_back();  // invalidates `list`, used no more
        token.push_back(-1);
        node = fresh;
      } else {
        node = it->second;
      }
    }
    token[static_cast<std::size_t>(node)] = static_cast<std::int32_t>(id);
  }
  edge_begin_.assign(1, 0);
  for (const auto& list : kids) {
    for (const auto& [b, to] : list) {
      edge_byte_.push_back(b);
      edge_child_.push_back(to);
    }
    edge_begin_.push_back(static_cast<std::uint32_t>(edge_byte_.size()));
  }
  node_token_ = std::move(token);
  std::fill(std::begin(root_), std::end(root_), -1);
  for (const auto& [b, to] : kids[0]) root_[b] = to;
}

int WorldVocab::child(int node, unsigned char byte) const {
  const auto first = edge_byte_.begin() + edge_begin_[static_cast<std::size_t>(node)];
  const auto last = edge_byte_.begin() + edge_begin_[static_cast<std::size_t>(node) + 1];
  const auto it = std::lower_bound(first, last, byte);
  return it != last && *it == byte ? edge_child_[static_cast<std::size_t>(it - edge_byte_.begin())] : -1;
}

void WorldVocab::encode(std::string_view bytes, std::vector<int>& out) const {
  for (std::size_t pos = 0; pos < bytes.size();) {
    // Walk down from the byte at `pos` as far as the text goes, keeping the last token passed.
    int node = root_[static_cast<unsigned char>(bytes[pos])];
    int best = -1;
    std::size_t best_len = 0, k = pos;
    while (node >= 0) {
      ++k;
      if (node_token_[static_cast<std::size_t>(node)] >= 0) {
        best = node_token_[static_cast<std::size_t>(node)];
        best_len = k - pos;
      }
      if (k == bytes.size()) break;
      node = child(node, static_cast<unsigned char>(bytes[k]));
    }
    // Every single byte is a token (the constructor checks), so best is always found.
    out.push_back(best);
    pos += best_len;
  }
}

std::optional<int> WorldVocab::find(std::string_view bytes) const {
  if (bytes.empty()) return std::nullopt;
  int node = root_[static_cast<unsigned char>(bytes[0])];
  for (std::size_t k = 1; k < bytes.size() && node >= 0; ++k)
    node = child(node, static_cast<unsigned char>(bytes[k]));
  if (node < 0 || node_token_[static_cast<std::size_t>(node)] < 0) return std::nullopt;
  return node_token_[static_cast<std::size_t>(node)];
}

}  // namespace recur::text
