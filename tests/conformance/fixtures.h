// The conformance suite's fixtures (tests/test_conformance.cpp): small configurations of every
// registered family, one per variant whose code differs, each a config.json text read by
// recur's own reader, with the fields the family must refuse. A new family adds its entries to
// fixtures.cpp; the suite fails while a registered family has none.
#pragma once

#include <string>
#include <vector>

namespace recur::conformance {

/// A config.json edit that must be refused: the text `from` (found once in the config) replaced
/// by `to`, and a fragment of the error it must give (the field's name, at least).
struct Refusal {
  std::string from, to, says;
};

struct Fixture {
  std::string name;    // "gla: short convolutions, grouped kv heads, clamp_min"
  std::string config;  // config.json's text
  std::vector<Refusal> refused;  // at least one: a family's own field it must check
};

/// Every fixture, grouped by family.
const std::vector<Fixture>& fixtures();

}  // namespace recur::conformance
