#include "recur/json_constraint.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "grammar/json_automaton.h"
#include "recur/tokenizer.h"
#include "util/check.h"

namespace recur {

namespace {

// GPT-2's byte-level alphabet backwards: the code point that stands for each byte.
int byte_level_byte(std::uint32_t cp) {
  const auto self = [](std::uint32_t b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; };
  if (cp < 256) return self(cp) ? int(cp) : -1;
  std::uint32_t n = 256;
  for (std::uint32_t b = 0; b < 256; ++b)
    if (!self(b)) {
      if (n == cp) return int(b);
      ++n;
    }
  return -1;
}

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i (0xFFFFFFFF: bad).
std::uint32_t next_code_point(const std::string& s, std::size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const std::size_t n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 4;
  if (n == 4 || i + n >= s.size()) {
    i = s.size();
    return n == 0 ? c : 0xFFFFFFFFu;
  }
  std::uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1Fu) : n == 2 ? (c & 0x0Fu) : (c & 0x07u);
  for (std::size_t k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  i += n + 1;
  return cp;
}

// Bytes that leave a string's or a tagged text's plain text where it is ('<' may open a closing tag).
bool plain_text(unsigned char b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\' && b != '<'; }

}  // namespace

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tokenizer, int n_ids) {
  if (n_ids < 1) detail::throw_argument("TokenTrie::build", "n_ids is {}, expected at least 1", n_ids);
  const int V = std::min(n_ids, tokenizer.vocab_size());
  // A byte-level vocabulary writes its bytes in GPT-2's alphabet ("Ġ" for a space), a
  // SentencePiece one its spaces as "▁": whichever of the two more tokens begin with decides (a
  // large vocabulary of either kind holds a few of the other's).
  bool byte_level = false;
  if (!tokenizer.world_vocabulary()) {
    std::int64_t g = 0, m = 0;
    for (int id = 0; id < V; ++id) {
      if (!tokenizer.has_id(id)) continue;
      const std::string& t = tokenizer.id_to_token(id);
      g += t.compare(0, 2, "\xC4\xA0") == 0;
      m += t.compare(0, 3, "\xE2\x96\x81") == 0;
    }
    byte_level = g > m;
  }
  std::vector<std::string> bytes(static_cast<std::size_t>(n_ids));
  for (int id = 0; id < V; ++id) {
    if (!tokenizer.has_id(id) || tokenizer.is_special(id)) continue;
    const std::string& t = tokenizer.id_to_token(id);
    std::string& out = bytes[std::size_t(id)];
    if (tokenizer.world_vocabulary()) {
      out = t;
    } else if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
      out = std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
    } else if (byte_level) {
      for (std::size_t i = 0; i < t.size();) {
        const int b = byte_level_byte(next_code_point(t, i));
        if (b < 0) {
          out = t;  // an added token written as text
          break;
        }
        out += char(b);
      }
    } else {
      for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
          out += ' ';
          i += 2;
        } else {
          out += t[i];
        }
      }
    }
  }
  return from_bytes(bytes);
}

std::shared_ptr<const TokenTrie> TokenTrie::from_bytes(const std::vector<std::string>& bytes) {
  auto trie = std::make_shared<TokenTrie>();
  // Copied first, then moved in: GCC 12 for aarch64 sees a null dereference in the copy
  // assignment of a vector of strings into the new trie (-Wnull-dereference, a false positive).
  std::vector<std::string> copy(bytes);
  trie->bytes_ = std::move(copy);
  std::vector<int> order;
  for (int id = 0; id < int(bytes.size()); ++id)
    if (!bytes[std::size_t(id)].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& x = bytes[std::size_t(a)];
    const auto& y = bytes[std::size_t(b)];
    return x != y ? x < y : a < b;
  });
  TokenTrie& t = *trie;
  t.byte_.push_back(0);
  t.depth_.push_back(0);
  t.end_.push_back(0);
  t.ids_begin_.push_back(0);
  std::vector<int> path{0};  // the nodes of the previous token's bytes, the root first
  const std::string* prev = nullptr;
  for (const int id : order) {
    const std::string& s = bytes[std::size_t(id)];
    if (s.size() > 0xFFFF) detail::throw_argument("TokenTrie", "id {} has {} bytes, at most 65535 are supported", id, s.size());
    std::size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    while (path.size() > common + 1) {
      t.end_[std::size_t(path.back())] = int(t.byte_.size());
      path.pop_back();
    }
    for (std::size_t k = common; k < s.size(); ++k) {
      path.push_back(int(t.byte_.size()));
      t.byte_.push_back(static_cast<unsigned char>(s[k]));
      t.depth_.push_back(std::uint16_t(k + 1));
      t.end_.push_back(0);
      t.ids_begin_.push_back(int(t.ids_.size()));
    }
    t.ids_.push_back(id);
    t.max_depth_ = std::max(t.max_depth_, int(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    t.end_[std::size_t(path.back())] = int(t.byte_.size());
    path.pop_back();
  }
  t.ids_begin_.push_back(int(t.ids_.size()));
  t.special_before_.assign(t.byte_.size() + 1, 0);
  for (std::size_t i = 0; i < t.byte_.size(); ++i)
    t.special_before_[i + 1] = t.special_before_[i] + (i > 0 && !plain_text(t.byte_[i]) ? 1 : 0);
  bool ascii = true;
  for (int b = 0x20; b < 0x7F && ascii; ++b) {
    bool found = false;
    for (const auto& s : bytes) found |= s.size() == 1 && static_cast<unsigned char>(s[0]) == b;
    ascii = found;
  }
  t.ascii_bytes_ = ascii;
  return trie;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
                               std::vector<int> end_ids, std::int64_t max_tokens)
    : trie_(std::move(trie)), matcher_(grammar), end_ids_(std::move(end_ids)), max_tokens_(max_tokens) {
  constexpr const char* call = "JsonConstraint";
  if (!trie_) detail::throw_argument(call, "trie is null");
  if (max_tokens < 1) detail::throw_argument(call, "max_tokens is {}, expected at least 1", max_tokens);
  if (grammar->min_bytes() > std::size_t(max_tokens))
    detail::throw_argument(call, "max_tokens is {} but the schema's shortest value takes {} bytes (one byte a token "
                           "at worst): raise max_tokens", max_tokens, grammar->min_bytes());
  states_.assign(std::size_t(trie_->max_depth_) + 1, matcher_);
  at_.assign(std::size_t(trie_->max_depth_) + 1, nullptr);
}

const std::vector<char>& JsonConstraint::allowed(int n_ids) {
  const TokenTrie& t = *trie_;
  allowed_.assign(std::size_t(std::max(n_ids, 0)), 0);
  const std::int64_t left = max_tokens_ - generated_ - 1;  // tokens after this one
  if (matcher_.complete())
    for (const int id : end_ids_)
      if (id >= 0 && id < n_ids) allowed_[std::size_t(id)] = 1;
  if (left < 0) return allowed_;
  // The budget: after a token, min_close must fit in what is left. One byte raises min_close by
  // at most `growth`, so within `depth` bytes of a state whose min_close is m no check is needed
  // while m + depth * growth <= left.
  const std::size_t growth = matcher_.grammar().impl().g.growth;
  const std::size_t base = matcher_.min_close();
  const auto budget = std::size_t(left);
  at_[0] = &matcher_;
  const int N = t.n_nodes();
  for (int i = 1; i < N;) {
    const std::size_t d = t.depth_[std::size_t(i)];
    const unsigned char b = t.byte_[std::size_t(i)];
    const JsonMatcher* parent = at_[d - 1];
    const JsonMatcher* here = parent;
    const bool plain = plain_text(b) && parent->in_plain_string();
    const int end = t.end_[std::size_t(i)];
    if (plain && t.special_before_[std::size_t(end)] == t.special_before_[std::size_t(i)]) {
      // A subtree of plain text inside a string: every token in it leaves the automaton where
      // it is (min_close unchanged), so all are allowed or none, at once.
      if (base + (d - 1) * growth <= budget || parent->min_close() <= budget)
        for (int k = t.ids_begin_[std::size_t(i)]; k < t.ids_begin_[std::size_t(end)]; ++k) {
          const int id = t.ids_[std::size_t(k)];
          if (id < n_ids) allowed_[std::size_t(id)] = 1;
        }
      i = end;
      continue;
    }
    // Plain text in a string leaves the automaton where it is: no copy, no step.
    if (!plain) {
      JsonMatcher& s = states_[d];
      s.assign_state(*parent);
      if (!s.advance(b)) {
        i = t.end_[std::size_t(i)];
        continue;
      }
      here = &s;
    }
    at_[d] = here;
    const int from = t.ids_begin_[std::size_t(i)], to = t.ids_begin_[std::size_t(i) + 1];
    if (from < to) {
      const bool check = base + d * growth > budget;
      if (!check || here->min_close() <= budget)
        for (int k = from; k < to; ++k) {
          const int id = t.ids_[std::size_t(k)];
          if (id < n_ids) allowed_[std::size_t(id)] = 1;
        }
    }
    ++i;
  }
  return allowed_;
}

void JsonConstraint::accept(int id) {
  ++generated_;
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return;
  if (id < 0 || id >= trie_->n_ids() || !matcher_.advance(trie_->bytes(id)))
    detail::throw_argument("JsonConstraint::accept", "id {} does not continue the JSON value (the mask did not allow it)", id);
}

}  // namespace recur
