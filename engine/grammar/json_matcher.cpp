// The automaton that runs a compiled JSON schema (json_automaton.h) over bytes: a stack of
// frames per live parse, one frame per value being written; anyOf branches that accept the same
// first byte fork the stack, and a fork dies at the first byte its branch refuses. The schema's
// compiler is json_schema.cpp.
#include "grammar/json_automaton.h"

#include <algorithm>
#include <limits>

#include "util/check.h"

namespace recur {

using grammar::add_sat;
using grammar::Node;
using Frame = JsonMatcher::Frame;
using Stack = JsonMatcher::Stack;

namespace {

constexpr std::size_t kMaxStacks = 64;        // live parses kept (identical ones merged)
constexpr std::uint32_t kMaxDigits = 15;      // integer and fraction digits
constexpr std::uint32_t kMaxExpDigits = 2;
constexpr std::uint32_t kAdditional = 0xFFFFFFFFu;
constexpr std::size_t kMaxAnyDepth = 32;      // nesting of objects and arrays of "any value"

// ---- The automaton ----

enum FrameKind : std::uint8_t { kValue, kObjectFrame, kArrayFrame, kStringFrame, kNumberFrame, kLiteralFrame,
                                kSequenceFrame, kTextFrame };
// A text frame's phase bits: the last byte was a newline; the byte before the tag's partial
// match (its c bytes so far) was a newline.
enum : std::uint8_t { kLastNewline = 1, kNewlineBeforeMatch = 2 };
enum : std::uint8_t { kOpen, kFirst, kKeyStart, kKey, kColon, kAfter, kNext };  // objects, arrays
enum : std::uint8_t { kBody = 1, kEscape, kHex };                               // strings
enum : std::uint8_t { kSign = 1, kZero, kInt, kFrac0, kFrac, kExp0, kExpSign, kExp };  // numbers

Frame value_frame(int node) {
  Frame f;
  f.node = node;
  f.kind = kValue;
  return f;
}

Frame open(const grammar::Grammar& g, int node) {
  Frame f;
  f.node = node;
  const Node& n = g.nodes[std::size_t(node)];
  switch (n.kind) {
    case Node::kObject: f.kind = kObjectFrame; break;
    case Node::kArray: f.kind = kArrayFrame; break;
    case Node::kString: f.kind = kStringFrame; break;
    case Node::kNumber:
    case Node::kInteger: f.kind = kNumberFrame; break;
    case Node::kSequence: f.kind = kSequenceFrame; break;
    case Node::kText: f.kind = kTextFrame; break;
    default:
      f.kind = kLiteralFrame;
      f.a = 0;
      f.b = std::uint32_t(n.literals.size());
      break;
  }
  return f;
}

bool utf8_byte(Frame& f, unsigned char c);
enum class TextStep { kRefused, kTaken, kClosed };
TextStep text_byte(const Node& n, Frame& f, unsigned char c);

bool starts(const grammar::Grammar& g, int node, unsigned char c) {
  const Node& n = g.nodes[std::size_t(node)];
  switch (n.kind) {
    case Node::kSequence:
      for (const int o : g.nodes[std::size_t(n.options[0])].concrete)
        if (starts(g, o, c)) return true;
      return false;
    case Node::kText: {
      Frame f = open(g, node);
      return text_byte(n, f, c) != TextStep::kRefused;
    }
    case Node::kObject: return c == '{';
    case Node::kArray: return c == '[';
    case Node::kString: return c == '"';
    case Node::kNumber:
    case Node::kInteger: return c == '-' || (c >= '0' && c <= '9');
    default:
      for (const auto& l : n.literals)
        if (static_cast<unsigned char>(l[0]) == c) return true;
      return false;
  }
}

// UTF-8: a lead byte sets how many continuation bytes follow and the range of the next one
// (which rules out overlong forms and surrogates); returns false for a byte that cannot lead.
bool utf8_byte(Frame& f, unsigned char c) {
  if (f.utf8_need) {
    if (c < f.utf8_lo || c > f.utf8_hi) return false;
    --f.utf8_need;
    f.utf8_lo = 0x80;
    f.utf8_hi = 0xBF;
    return true;
  }
  if (c < 0x80) return true;
  f.utf8_lo = 0x80;
  f.utf8_hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) f.utf8_need = 1;
  else if (c == 0xE0) f.utf8_need = 2, f.utf8_lo = 0xA0;
  else if (c == 0xED) f.utf8_need = 2, f.utf8_hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) f.utf8_need = 2;
  else if (c == 0xF0) f.utf8_need = 3, f.utf8_lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) f.utf8_need = 3;
  else if (c == 0xF4) f.utf8_need = 3, f.utf8_hi = 0x8F;
  else return false;
  return true;
}

std::uint64_t all_names(const Node& n) {
  return n.names.size() == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << n.names.size()) - 1;
}
bool can_add_key(const Node& n, const Frame& f) { return n.additional >= 0 || (f.seen & all_names(n)) != all_names(n); }
bool required_done(const Node& n, const Frame& f) { return (f.seen & n.required) == n.required; }

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// One byte of a tagged text: the tag's first byte appears once in it, so a broken partial match
// starts over at this byte.
TextStep text_byte(const Node& n, Frame& f, unsigned char c) {
  const std::string& tag = n.literals[0];
  if (f.utf8_need) return utf8_byte(f, c) ? TextStep::kTaken : TextStep::kRefused;
  const bool newline = f.phase & kLastNewline;
  if (f.c > 0 && c == static_cast<unsigned char>(tag[f.c])) {
    if (++f.c < tag.size()) {
      f.phase &= std::uint8_t(~kLastNewline);
      return TextStep::kTaken;
    }
    // The whole tag: the text ends, if the tag may come here (else the text would hold it).
    return !n.newline_before || (f.phase & kNewlineBeforeMatch) ? TextStep::kClosed : TextStep::kRefused;
  }
  f.c = 0;
  if (c == static_cast<unsigned char>(tag[0])) {
    f.c = 1;
    f.phase = newline ? std::uint8_t(kNewlineBeforeMatch) : std::uint8_t(0);
    return TextStep::kTaken;
  }
  if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return TextStep::kRefused;
  if (c == 0x7F || !utf8_byte(f, c)) return TextStep::kRefused;
  f.phase = c == '\n' ? std::uint8_t(kLastNewline) : std::uint8_t(0);
  return TextStep::kTaken;
}

// The fewest bytes that end a tagged text from frame f.
std::size_t text_cost(const Node& n, const Frame& f) {
  const std::size_t tag = n.literals[0].size();
  if (f.c > 0 && (!n.newline_before || (f.phase & kNewlineBeforeMatch))) return tag - f.c;
  const bool newline = f.c == 0 && (f.phase & kLastNewline);
  return std::size_t(f.utf8_need) + (n.newline_before && !newline ? 1 : 0) + tag;
}

bool accepting(const grammar::Grammar& g, const Frame& f) {
  if (f.kind == kNumberFrame) return f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExp;
  if (f.kind == kLiteralFrame) {
    const auto& lits = g.nodes[std::size_t(f.node)].literals;
    return f.a < f.b && lits[f.a].size() == f.c;
  }
  return false;
}

// Feeds one byte to one parse. Returns whether it lives; parses that branch off (anyOf) are
// appended to `forks`.
bool step(const grammar::Grammar& g, Stack& s, unsigned char c, std::vector<Stack>& forks) {
  for (;;) {
    if (s.empty()) return false;
    Frame& f = s.back();
    const Node& n = g.nodes[std::size_t(f.node)];
    switch (f.kind) {
      case kValue: {
        const auto& opts = n.concrete;
        // An object or array of "any value" opens only below kMaxAnyDepth (a scalar may always
        // take its place, so no parse is left without a way on).
        const auto usable = [&](int o) {
          return starts(g, o, c) && !(g.nodes[std::size_t(o)].deep && s.size() > kMaxAnyDepth);
        };
        for (std::size_t k = 1; k < opts.size(); ++k) {
          if (!usable(opts[k])) continue;
          Stack copy = s;
          copy.back() = open(g, opts[k]);
          if (step(g, copy, c, forks)) forks.push_back(std::move(copy));
        }
        if (!usable(opts[0])) return false;
        f = open(g, opts[0]);
        continue;
      }
      case kObjectFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '{') return false;
            f.phase = kFirst;
            return true;
          case kFirst:
          case kAfter:
            if (c == '}') {
              if (!required_done(n, f)) return false;
              s.pop_back();
              return true;
            }
            if (f.phase == kAfter) {
              if (c != ',' || !can_add_key(n, f)) return false;
              f.phase = kKeyStart;
              return true;
            }
            [[fallthrough]];
          case kKeyStart:
            if (c != '"' || !can_add_key(n, f)) return false;
            f.phase = kKey;
            f.a = 0;
            f.b = std::uint32_t(n.names.size());
            f.c = 0;
            return true;
          case kKey: {
            if (c == '"' && !f.utf8_need) {
              const bool exact = f.a < f.b && n.names[f.a].size() == f.c;
              if (exact && !(f.seen >> f.a & 1)) {
                f.seen |= std::uint64_t(1) << f.a;
              } else if (n.additional >= 0 && !exact) {
                f.a = kAdditional;
              } else {
                return false;
              }
              f.phase = kColon;
              return true;
            }
            if (!f.utf8_need && (c < 0x20 || c == '\\' || c == '"')) return false;
            Frame t = f;
            if (!utf8_byte(t, c)) return false;
            // Narrow the names that begin with the key so far.
            std::uint32_t lo = t.a, hi = t.a;
            for (std::uint32_t i = t.a; i < t.b; ++i) {
              const std::string& name = n.names[i];
              const bool match = name.size() > t.c && static_cast<unsigned char>(name[t.c]) == c;
              if (match) {
                if (lo == hi) lo = i;
                hi = i + 1;
              }
            }
            if (lo == hi) lo = hi = t.b;
            if (n.additional < 0) {
              bool open_name = false;
              for (std::uint32_t i = lo; i < hi && !open_name; ++i) open_name = !(t.seen >> i & 1);
              if (!open_name) return false;
            }
            t.a = lo;
            t.b = hi;
            ++t.c;
            f = t;
            return true;
          }
          case kColon: {
            if (c != ':') return false;
            f.phase = kAfter;
            const int value = f.a == kAdditional ? n.additional : n.props[f.a];
            s.push_back(value_frame(value));
            return true;
          }
          default: return false;
        }
      case kArrayFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '[') return false;
            f.phase = kFirst;
            return true;
          case kFirst:
            if (c == ']') {
              if (n.min_items > 0) return false;
              s.pop_back();
              return true;
            }
            if (n.max_items == 0) return false;
            [[fallthrough]];
          case kNext: {
            const std::uint32_t i = f.a;
            f.phase = kAfter;
            ++f.a;
            s.push_back(value_frame(i < n.prefix.size() ? n.prefix[i] : n.items));
            continue;
          }
          case kAfter:
            if (c == ',') {
              if (f.a >= n.max_items) return false;
              f.phase = kNext;
              return true;
            }
            if (c == ']' && f.a >= n.min_items) {
              s.pop_back();
              return true;
            }
            return false;
          default: return false;
        }
      case kStringFrame:
        switch (f.phase) {
          case kOpen:
            if (c != '"') return false;
            f.phase = kBody;
            return true;
          case kBody:
            if (!f.utf8_need) {
              if (c == '"') {
                s.pop_back();
                return true;
              }
              if (c == '\\') {
                f.phase = kEscape;
                return true;
              }
              if (c < 0x20) return false;
            }
            return utf8_byte(f, c);
          case kEscape:
            if (c == 'u') {
              f.phase = kHex;
              f.a = 4;
              return true;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
              f.phase = kBody;
              return true;
            }
            return false;
          case kHex:
            if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
            if (--f.a == 0) f.phase = kBody;
            return true;
          default: return false;
        }
      case kNumberFrame: {
        const bool integer = n.kind == Node::kInteger;
        switch (f.phase) {
          case kOpen:
          case kSign:
            if (c == '-' && f.phase == kOpen) {
              f.phase = kSign;
              return true;
            }
            if (c == '0') {
              f.phase = kZero;
              return true;
            }
            if (is_digit(c)) {
              f.phase = kInt;
              f.a = 1;
              return true;
            }
            return false;
          case kInt:
            if (is_digit(c) && f.a < kMaxDigits) {
              ++f.a;
              return true;
            }
            [[fallthrough]];
          case kZero:
            if (!integer && c == '.') {
              f.phase = kFrac0;
              return true;
            }
            if (!integer && (c == 'e' || c == 'E')) {
              f.phase = kExp0;
              return true;
            }
            break;  // the number ends before c
          case kFrac0:
          case kFrac:
            if (is_digit(c) && (f.phase == kFrac0 || f.a < kMaxDigits)) {
              f.a = f.phase == kFrac0 ? 1 : f.a + 1;
              f.phase = kFrac;
              return true;
            }
            if (f.phase == kFrac0) return false;
            if (c == 'e' || c == 'E') {
              f.phase = kExp0;
              return true;
            }
            break;
          case kExp0:
          case kExpSign:
            if ((c == '+' || c == '-') && f.phase == kExp0) {
              f.phase = kExpSign;
              return true;
            }
            if (!is_digit(c)) return false;
            f.phase = kExp;
            f.a = 1;
            return true;
          case kExp:
            if (is_digit(c) && f.a < kMaxExpDigits) {
              ++f.a;
              return true;
            }
            break;
          default: return false;
        }
        s.pop_back();  // a whole number: c belongs to what holds it
        continue;
      }
      case kSequenceFrame: {
        // The next part; the last one takes the sequence's place.
        const std::uint32_t i = f.a;
        if (std::size_t(i) + 1 == n.options.size()) {
          f = value_frame(n.options[i]);
          continue;
        }
        ++f.a;
        s.push_back(value_frame(n.options[i]));
        continue;
      }
      case kTextFrame:
        switch (text_byte(n, f, c)) {
          case TextStep::kRefused: return false;
          case TextStep::kTaken: return true;
          case TextStep::kClosed: s.pop_back(); return true;
        }
        return false;
      case kLiteralFrame: {
        const auto& lits = n.literals;
        // The literals in [a, b) share their first c bytes and are sorted: those with c next are
        // one run, found by binary search (an enum may hold thousands).
        const auto first = lits.begin() + std::ptrdiff_t(f.a), last = lits.begin() + std::ptrdiff_t(f.b);
        const auto byte_at = [&](const std::string& l) { return l.size() > f.c ? int(static_cast<unsigned char>(l[f.c])) : -1; };
        const auto run_lo = std::partition_point(first, last, [&](const std::string& l) { return byte_at(l) < int(c); });
        const auto run_hi = std::partition_point(run_lo, last, [&](const std::string& l) { return byte_at(l) == int(c); });
        const auto lo = std::uint32_t(run_lo - lits.begin()), hi = std::uint32_t(run_hi - lits.begin());
        if (lo == hi) {
          if (!accepting(g, f)) return false;
          s.pop_back();
          continue;
        }
        f.a = lo;
        f.b = hi;
        ++f.c;
        if (hi - lo == 1 && lits[lo].size() == f.c) s.pop_back();
        return true;
      }
      default: return false;
    }
  }
}

// The fewest bytes that finish this frame once the value it holds (the frame above it) is done.
std::size_t frame_cost(const grammar::Grammar& g, const Frame& f) {
  const Node& n = g.nodes[std::size_t(f.node)];
  const auto missing = [&](std::uint64_t seen, std::size_t& count) {
    std::size_t sum = 0;
    count = 0;
    const std::uint64_t m = n.required & ~seen;
    for (std::size_t i = 0; i < n.names.size(); ++i)
      if (m >> i & 1) {
        sum += n.cost[i];
        ++count;
      }
    return sum;
  };
  switch (f.kind) {
    case kValue: return n.min_len;
    case kObjectFrame: {
      std::size_t m = 0;
      const std::size_t sum = missing(f.seen, m);
      switch (f.phase) {
        case kOpen: return n.min_len;
        case kFirst: return sum + (m ? m - 1 : 0) + 1;
        case kAfter: return sum + m + 1;
        case kColon: {
          const int value = f.a == kAdditional ? n.additional : n.props[f.a];
          return 1 + g.nodes[std::size_t(value)].min_len + sum + m + 1;
        }
        case kKeyStart: {
          if (m) return sum + m;  // the first without a comma, and '}'
          std::size_t best = grammar::kInf;
          if (n.additional >= 0) best = 3 + g.nodes[std::size_t(n.additional)].min_len;
          for (std::size_t i = 0; i < n.names.size(); ++i)
            if (!(f.seen >> i & 1)) best = std::min(best, n.cost[i]);
          return best + 1;
        }
        case kKey: {
          std::size_t best = grammar::kInf;
          for (std::uint32_t i = f.a; i < f.b; ++i) {
            if (f.seen >> i & 1) continue;
            std::size_t mi = 0;
            const std::size_t rest = missing(f.seen | (std::uint64_t(1) << i), mi);
            const std::size_t c = n.names[i].size() - f.c + 2 + g.nodes[std::size_t(n.props[i])].min_len + rest + mi + 1;
            best = std::min(best, c);
          }
          if (n.additional >= 0) {
            const bool seen_exact = f.a < f.b && n.names[f.a].size() == f.c && !f.utf8_need;
            const std::size_t c = f.utf8_need + (seen_exact ? 1 : 0) + 2 +
                                  g.nodes[std::size_t(n.additional)].min_len + sum + m + 1;
            best = std::min(best, c);
          }
          return best;
        }
        default: return 0;
      }
    }
    case kArrayFrame:
      switch (f.phase) {
        case kOpen: return n.min_len;
        case kFirst: return n.min_items ? n.tail[0] : 1;  // tail counts a comma per item: one is ']'
        case kAfter: return (f.a < n.min_items ? n.tail[f.a] : 0) + 1;
        case kNext: {
          const int item = f.a < n.prefix.size() ? n.prefix[f.a] : n.items;
          return g.nodes[std::size_t(item)].min_len + (f.a + 1 < n.min_items ? n.tail[f.a + 1] : 0) + 1;
        }
        default: return 0;
      }
    case kStringFrame:
      switch (f.phase) {
        case kOpen: return 2;
        case kBody: return std::size_t(f.utf8_need) + 1;
        case kEscape: return 2;
        default: return std::size_t(f.a) + 1;
      }
    case kNumberFrame: return accepting(g, f) ? 0 : 1;
    case kSequenceFrame: {
      std::size_t sum = 0;
      for (std::size_t i = f.a; i < n.options.size(); ++i) sum = add_sat(sum, g.nodes[std::size_t(n.options[i])].min_len);
      return sum;
    }
    case kTextFrame: return text_cost(n, f);
    case kLiteralFrame: {
      std::size_t best = grammar::kInf;
      for (std::uint32_t i = f.a; i < f.b; ++i) best = std::min(best, g.nodes[std::size_t(f.node)].literals[i].size() - f.c);
      return best;
    }
    default: return 0;
  }
}

}  // namespace

// ---- JsonMatcher ----

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  if (!grammar_) detail::throw_argument("JsonMatcher", "grammar is null");
  stacks_.push_back(Stack{value_frame(grammar_->impl().g.root)});
}

bool JsonMatcher::advance(unsigned char byte) {
  const grammar::Grammar& g = grammar_->impl().g;
  std::size_t live = 0;
  std::vector<Stack> forks;
  for (const Stack& s : stacks_) {
    if (next_.size() <= live) next_.emplace_back();
    Stack& t = next_[live];
    t = s;
    if (step(g, t, byte, forks)) ++live;
  }
  for (Stack& f : forks) {
    if (next_.size() <= live) next_.emplace_back();
    next_[live++] = std::move(f);
  }
  if (live == 0) return false;
  // Identical parses (two branches that have become the same) are one.
  if (live > 1) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < live; ++i) {
      bool dup = false;
      for (std::size_t j = 0; j < kept && !dup; ++j) dup = grammar::same(next_[i], next_[j]);
      if (!dup && kept < kMaxStacks) {
        if (kept != i) std::swap(next_[kept], next_[i]);
        ++kept;
      }
    }
    live = kept;
  }
  std::swap(stacks_, next_);
  stacks_.resize(live);
  return true;
}

bool JsonMatcher::advance(std::string_view bytes) {
  const std::vector<Stack> saved = stacks_;
  for (const char c : bytes)
    if (!advance(static_cast<unsigned char>(c))) {
      stacks_ = saved;
      return false;
    }
  return true;
}

bool JsonMatcher::complete() const {
  const grammar::Grammar& g = grammar_->impl().g;
  for (const Stack& s : stacks_)
    if (s.empty() || (s.size() == 1 && accepting(g, s.back()))) return true;
  return false;
}

bool JsonMatcher::finished() const {
  for (const Stack& s : stacks_)
    if (!s.empty()) return false;
  return true;
}

std::size_t JsonMatcher::min_close() const {
  const grammar::Grammar& g = grammar_->impl().g;
  std::size_t best = grammar::kInf;
  for (const Stack& s : stacks_) {
    std::size_t sum = 0;
    for (const Frame& f : s) sum = add_sat(sum, frame_cost(g, f));
    best = std::min(best, sum);
  }
  return best;
}

bool JsonMatcher::in_plain_string() const {
  if (stacks_.size() != 1 || stacks_[0].empty()) return false;
  const Frame& f = stacks_[0].back();
  if (f.kind == kTextFrame) return f.c == 0 && f.phase == 0 && f.utf8_need == 0;
  return f.kind == kStringFrame && f.phase == kBody && f.utf8_need == 0;
}

bool json_grammar_accepts(const std::shared_ptr<const JsonGrammar>& grammar, std::string_view text) {
  JsonMatcher m(grammar);
  return m.advance(text) && m.complete();
}

}  // namespace recur
