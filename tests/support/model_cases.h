// The small models and helpers the model tests share.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "models/linear/linear.h"
#include "recur/model.h"

namespace recur::testing {

using models::linear::ModelFeatureMap;

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// A small linear_attn configuration; each case changes a few fields.
inline ModelConfig small_fla(ModelFeatureMap map, bool normalized) {
  ModelConfig c;
  c.architecture = Architecture::kLinearAttn;
  c.vocab_size = 300;  // more ids than bytes, as real vocabularies have
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_heads = 4;
  auto& l = models::linear::edit(c);
  l.feature_map = map;
  l.norm_feature_map = normalized;
  c.intermediate_size = 96;
  return c;
}

// n ids drawn uniformly from [0, vocab).
inline std::vector<int> random_tokens(int n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<int> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

inline bool same_bytes(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace recur::testing
