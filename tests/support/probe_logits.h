// The float64 references' expected.json of tests/mamba2 and tests/falcon_h1: a fixture's logits
// of a few probe ids at every position of the prompt, against recur's.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "recur/model.h"
#include "util/json.h"

namespace recur::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// expected.json, whose Python writer may have put a bare Infinity in a spec.
inline json::Value read_expected(const std::string& path) {
  return json::parse(slurp(path), "expected.json", json::ParseOptions{true});
}

// Whitespace-separated ids (prompt_ids.txt).
inline std::vector<int> read_ids(const std::string& path) {
  std::vector<int> ids;
  std::istringstream in(slurp(path));
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

// Every position's logits (rows of vocab_size), prefilled in chunks of 64 on 2 threads.
inline std::vector<float> prefill_logits(const std::shared_ptr<const Model>& m,
                                         const std::vector<int>& ids) {
  Decoder d(m, DecoderOptions{64, 2});
  std::vector<float> out;
  const auto vocab = std::size_t(m->config().vocab_size);
  d.prefill(ids, {}, [&](std::int64_t, const float* l) { out.insert(out.end(), l, l + vocab); });
  return out;
}

// The largest normwise error over the positions of one fixture's entry: at each position, the
// largest |recur - reference| over the probe ids, over that position's largest |logit| (a logit
// near 0 has no relative error of its own).
inline double probe_error(const json::Value& entry, const std::vector<float>& logits,
                          std::size_t vocab) {
  const auto& probe = entry.find("probe_ids")->array();
  const auto& want = entry.find("probe_logits")->array();
  const auto& scale = entry.find("logit_max_abs")->array();
  REQUIRE(logits.size() == want.size() * vocab);
  double worst = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t j = 0; j < probe.size(); ++j) {
      const double w = want[t].array()[j].number();
      const double g = double(logits[t * vocab + std::size_t(probe[j].integer())]);
      worst = std::max(worst, std::abs(g - w) / scale[t].number());
    }
  return worst;
}

// Every fixture of `dir`/expected.json (`count` of them) loaded from `dir` and prefilled with
// `ids`: its logits within `tolerance` of the reference's at every position, or within the
// error of the same reference computed in float32 by PyTorch (the entry's
// float32_reference_normwise_error) where float32's own rounding goes past `tolerance`.
inline void check_reference_fixtures(const std::string& dir, const std::vector<int>& ids,
                                     std::size_t count, double tolerance) {
  const json::Value want = read_expected(dir + "/expected.json");
  const auto& fixtures = want.find("fixtures")->object();
  REQUIRE(fixtures.size() == count);
  for (const auto& [name, entry] : fixtures) {
    INFO(name);
    const auto m = Model::load(dir + "/" + name);
    const double worst =
        probe_error(entry, prefill_logits(m, ids), std::size_t(m->config().vocab_size));
    const double float32 = entry.find("float32_reference_normwise_error")->number();
    INFO("largest difference over the position's largest logit: " << worst
         << " (PyTorch in float32: " << float32 << ")");
    CHECK(worst < std::max(tolerance, float32));
  }
}

}  // namespace recur::testing
