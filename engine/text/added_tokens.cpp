#include "text/added_tokens.h"

#include <algorithm>

#include "text/unicode.h"

namespace recur::text {

void AddedMatcher::add(const std::string& text, int token) {
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

std::tuple<std::size_t, std::size_t, int> AddedMatcher::find(std::string_view s,
                                                            std::size_t from) const {
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

void split_added(const Part& part, const AddedMatcher& matcher,
                 const std::vector<AddedToken>& added, std::vector<Part>& out) {
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

}  // namespace recur::text
