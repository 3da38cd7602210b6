// What a config.json as its publisher writes it holds that recur's own config.json leaves out:
// make-model's files must carry the published keys for other tools (llama.cpp's
// convert_hf_to_gguf.py) to read recur's random models as they read the published ones.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "util/json.h"

namespace recur::testing {

/// The top-level keys of `published` that `written` lacks (both config.json texts), but for
/// those in `ignored`.
inline std::vector<std::string> keys_left_out(const std::string& published,
                                              const std::string& written,
                                              const std::set<std::string>& ignored) {
  const json::ParseOptions python{true};
  const json::Value p = json::parse(published, "published config.json", python);
  const json::Value w = json::parse(written, "written config.json", python);
  std::vector<std::string> out;
  for (const auto& [key, value] : p.object())
    if (!ignored.count(key) && !w.find(key)) out.push_back(key);
  return out;
}

}  // namespace recur::testing
