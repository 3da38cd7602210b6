// The compiled form of a JSON schema (engine-private): what JsonGrammar holds and the token
// mask walks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "recur/json_schema.h"

namespace recur::grammar {

constexpr std::size_t kInf = std::numeric_limits<std::size_t>::max() / 4;

// a + b, held at kInf (a cost that cannot be met stays so).
inline std::size_t add_sat(std::size_t a, std::size_t b) { return a >= kInf - b ? kInf : a + b; }

struct Node {
  enum Kind : std::uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiteral, kChoice, kRef, kSequence, kText };
  Kind kind = kLiteral;
  std::string path;  // where it is in the schema, for messages
  // kObject: properties sorted by name (at most 64), their nodes, the required ones as bits.
  std::vector<std::string> names;
  std::vector<int> props;
  std::vector<std::size_t> cost;  // per property: the fewest bytes of `"name":value`
  std::uint64_t required = 0;
  int additional = -1;  // the node of other keys' values; -1: no other keys
  // kArray: item i's node is prefix[i], or items past the prefix.
  std::vector<int> prefix;
  int items = -1;
  std::uint32_t min_items = 0, max_items = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::size_t> tail;  // tail[i]: the fewest bytes of items i .. min_items-1, commas included
  // kLiteral: the compact texts, sorted, distinct. kText: the closing tag alone.
  // kText: whether the tag must follow a newline of the text.
  bool newline_before = false;
  std::vector<std::string> literals;
  // kChoice: the branches; kRef: the target; kSequence: the parts in order.
  std::vector<int> options;
  // The concrete nodes (object .. literal) a value of this node is one of.
  std::vector<int> concrete;
  std::size_t min_len = kInf;  // the fewest bytes of a value
  bool deep = false;  // an object or array of any value: refused past kMaxAnyDepth frames
};

struct Grammar {
  std::vector<Node> nodes;
  int root = 0;
  // A bound on how much one byte can raise JsonMatcher::min_close (the mask skips the budget
  // check when even that cannot exceed what is left).
  std::size_t growth = 0;
};

inline bool same(const JsonMatcher::Stack& a, const JsonMatcher::Stack& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i];
    const auto& y = b[i];
    if (x.node != y.node || x.kind != y.kind || x.phase != y.phase || x.utf8_need != y.utf8_need ||
        x.utf8_lo != y.utf8_lo || x.utf8_hi != y.utf8_hi || x.a != y.a || x.b != y.b || x.c != y.c ||
        x.seen != y.seen)
      return false;
  }
  return true;
}

}  // namespace recur::grammar

namespace recur {
struct JsonGrammar::Impl {
  grammar::Grammar g;
};
}  // namespace recur
