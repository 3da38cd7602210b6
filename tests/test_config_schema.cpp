// A family is its registry entry, named by its model_type strings: the known types and the
// refusal of an unknown one come from the registry; a configuration built in code names its
// family by `type`. And each family's config.json fields, declared once in its schema: what is
// refused names the key and the file; what is written reads back as the same configuration.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "model/family.h"
#include "recur/error.h"
#include "recur/model.h"

namespace {

using recur::FormatError;
using recur::ModelConfig;
using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("every model type the registry's families name is listed, Based's gpt2 too",
          "[model][config][family]") {
  const std::string known = recur::model::known_model_types();
  int types = 0;
  for (const recur::model::Family* f : recur::model::families())
    for (const std::string& t : f->model_types()) {
      INFO(t);
      CHECK_THAT(known, Contains(t));
      CHECK(recur::model::family_named(t) == f);
      ++types;
    }
  CHECK(types >= 11);
  CHECK_THAT(known, Contains("based") && Contains("gpt2 with Based's mixer fields"));
  CHECK(recur::model::family_named("gpt2") == nullptr);
  // An unknown model_type is refused with the list, naming the file.
  CHECK_THROWS_WITH(ModelConfig::from_json(R"({"model_type": "mamba9"})", "cfg.json"),
                    Contains("cfg.json") && Contains("'mamba9'") && Contains(known));
  CHECK_THROWS_WITH(ModelConfig::from_json(R"({"hidden_size": 8})", "cfg.json"),
                    Contains("model_type is missing") && Contains(known));
}

TEST_CASE("a configuration built in code names its family by type, before the deprecated enum",
          "[model][config][family]") {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.type = "gla";  // architecture stays at its default, kLinearAttn: type decides
  c.resolve("in code");
  CHECK(c.model_type() == "gla");
  CHECK(std::string(recur::model::family_of(c).name()) == "fla gated");
  CHECK_THAT(c.to_json(), Contains("\"model_type\": \"gla\""));
  // The same fields under the deprecated enum alone give the same configuration.
  ModelConfig old;
  old.hidden_size = 32;
  old.num_heads = 2;
  old.architecture = recur::Architecture::kGla;
  old.resolve("in code");
  CHECK(old.to_json() == c.to_json());
  // A type no family reads is refused by resolve, naming the source and the known types.
  ModelConfig bad;
  bad.type = "mamba9";
  CHECK_THROWS_AS(bad.resolve("in code"), FormatError);
  CHECK_THROWS_WITH(bad.resolve("in code"), Contains("in code") && Contains("'mamba9'") &&
                                                Contains(recur::model::known_model_types()));
  CHECK_THROWS_AS(bad.to_json(), recur::ArgumentError);
}
