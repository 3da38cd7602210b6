// A family is its registry entry, named by its model_type strings: the known types and the
// refusal of an unknown one come from the registry; a configuration built in code names its
// family by `type`. And each family's config.json fields, declared once in its schema: what is
// refused names the key and the file; what is written reads back as the same configuration.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config_schema.h"
#include "model/family.h"
#include "support/given_options.h"
#include "support/io_files.h"
#include "recur/error.h"
#include "util/json.h"
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

namespace {

// A toy family's fields, to test the schema apart from any real family.
struct ToyConfig final : recur::FamilyConfig {
  enum class Mode { kPlain, kFancy };
  int rank = 8;
  double ratio = 2.5;
  bool gated = false;
  Mode mode = Mode::kPlain;
};

const recur::model::Schema<ToyConfig>& toy_schema() {
  static const recur::model::Schema<ToyConfig> s = [] {
    recur::model::Schema<ToyConfig> t;
    t.written("model_type", "\"toy\"")
        .integer("hidden_size", &ModelConfig::hidden_size, 64, 1, 1024)
        .integer("rank", &ToyConfig::rank, 8, 1, 64)
        .option("rank", "the rank")
        .number("ratio", &ToyConfig::ratio, 2.5, 0.5, 8.0)
        .boolean("gated", &ToyConfig::gated, false)
        .flag("gated", "gate it")
        .choice("mode", &ToyConfig::mode, ToyConfig::Mode::kPlain,
                {{ToyConfig::Mode::kPlain, "plain"}, {ToyConfig::Mode::kFancy, "fancy"}})
        .integer("fancy_width", &ModelConfig::intermediate_size, 0, 1, 99)
        .only_when([](const ModelConfig&, const ToyConfig& g) { return g.mode == ToyConfig::Mode::kFancy; })
        .accepted("use_cache", "caching only: the same function");
    return t;
  }();
  return s;
}

// Reads `text` through a toy schema as a family's reader does, refusing unknown fields.
template <class G>
std::pair<ModelConfig, G> read_by(const recur::model::Schema<G>& schema, const std::string& text) {
  const recur::json::Value root = recur::json::parse(text, "toy");
  const std::string source = "toy.json";
  recur::model::Fields f(root, source);
  ModelConfig c;
  G g;
  schema.read(f, c, g);
  f.accept("model_type", "names the layout");
  f.reject_unknown("recur does not know what it changes");
  return {c, g};
}

std::pair<ModelConfig, ToyConfig> read_toy(const std::string& text) {
  return read_by(toy_schema(), text);
}


std::string write_toy(const ModelConfig& c, const ToyConfig& g) {
  recur::model::FieldWriter w;
  toy_schema().write(w, c, g);
  return w.text();
}

}  // namespace

TEST_CASE("a schema reads its fields with their defaults, and refuses by key and file",
          "[model][config][schema]") {
  const auto [c, g] = read_toy(R"({"model_type": "toy", "rank": 16, "mode": "fancy", "fancy_width": 7})");
  CHECK(c.hidden_size == 64);  // the default
  CHECK(g.rank == 16);
  CHECK(g.ratio == 2.5);
  CHECK(g.mode == ToyConfig::Mode::kFancy);
  CHECK(c.intermediate_size == 7);
  const auto refused = [](const std::string& text, std::vector<std::string> parts) {
    INFO(text);
    parts.push_back("toy.json");
    recur::testing::expect_format_error([&] { read_toy(text); }, parts);
  };
  // Out of range, of the wrong type, a name not among the choices, unknown.
  refused(R"({"rank": 65})", {"rank is 65", "1 to 64"});
  refused(R"({"ratio": 0.25})", {"ratio is 0.25", "0.5 to 8"});
  refused(R"({"rank": 2.5})", {"rank is 2.5", "an integer"});
  refused(R"({"gated": "yes"})", {"gated is \"yes\"", "true or false"});
  refused(R"({"mode": "odd"})", {"mode is 'odd'", "plain or fancy"});
  refused(R"({"colour": 1})", {"unknown field 'colour'"});
  // A field of another layout is unknown in this one.
  refused(R"({"fancy_width": 7})", {"unknown field 'fancy_width'"});
  // An accepted field is read whatever its value, and carries its reason.
  CHECK_NOTHROW(read_toy(R"({"use_cache": true})"));
  bool found = false;
  for (const auto& field : toy_schema().fields())
    if (std::string(field.key) == "use_cache") {
      found = true;
      CHECK(field.type == recur::model::FieldSpec::Type::kAccepted);
      CHECK_THAT(std::string(field.reason), Contains("same function"));
      CHECK_FALSE(field.written);
    }
  CHECK(found);
}

TEST_CASE("a schema writes what it reads, in its order, and only its layout's fields",
          "[model][config][schema]") {
  auto [c, g] = read_toy(R"({"rank": 16, "gated": true})");
  const std::string plain = write_toy(c, g);
  CHECK(plain == "  \"model_type\": \"toy\",\n  \"hidden_size\": 64,\n  \"rank\": 16,\n"
                 "  \"ratio\": 2.5,\n  \"gated\": true,\n  \"mode\": \"plain\",\n");
  g.mode = ToyConfig::Mode::kFancy;
  c.intermediate_size = 9;
  const std::string fancy = write_toy(c, g);
  CHECK_THAT(fancy, Contains("\"mode\": \"fancy\",\n  \"fancy_width\": 9,\n"));
  // Reading what was written gives the same fields.
  const auto [c2, g2] = read_toy("{" + fancy.substr(0, fancy.size() - 2) + "}");
  CHECK(write_toy(c2, g2) == fancy);
}

namespace {

// make-model's options as the tool gives them when none is passed: its own defaults for the
// common ones, each family option's fallback.
class DefaultOptions final : public recur::model::MakeOptions {
 public:
  explicit DefaultOptions(std::vector<recur::model::MakeOption> family) : family_(std::move(family)) {}
  bool given(const char*) const override { return false; }
  bool flag(const char*) const override { return false; }
  std::int64_t integer(const char* name, std::int64_t, std::int64_t) const override {
    return std::stoll(text(name));
  }
  double real(const char* name, double, double) const override { return std::stod(text(name)); }
  std::string str(const char* name) const override { return text(name); }

 private:
  std::string text(const std::string& name) const {
    if (name == "vocab") return "256";
    if (name == "hidden") return "256";  // HGRN2's default expand_ratio, 128, must divide it
    if (name == "layers") return "2";
    if (name == "heads") return "4";
    if (name == "intermediate") return "0";
    for (const auto& o : family_)
      if (name == o.name && o.fallback) return o.fallback;
    return "";
  }
  std::vector<recur::model::MakeOption> family_;
};

}  // namespace

TEST_CASE("for every family, config.json written then read is the same configuration",
          "[model][config][schema]") {
  int checked = 0;
  for (const recur::model::Family* f : recur::model::families()) {
    const DefaultOptions options(f->make_model_options());
    for (const std::string& arch : f->make_model_archs()) {
      INFO(f->name() << " --arch " << arch);
      const ModelConfig a = ModelConfig::from_json(f->make_model_config(arch, options), "made.json");
      const std::string text = a.to_json();
      const ModelConfig b = ModelConfig::from_json(text, "written.json");
      CHECK(b.to_json() == text);
      CHECK(b.model_type() == a.model_type());
      CHECK(b.mixers == a.mixers);
      CHECK(b.intermediate_size == a.intermediate_size);
      ++checked;
    }
  }
  CHECK(checked >= 9);  // every make-model --arch of every family
}

TEST_CASE("a family's make-model options and their defaults come from its schema",
          "[model][config][schema]") {
  const auto options = toy_schema().make_options({"toy"});
  REQUIRE(options.size() == 2);
  CHECK(std::string(options[0].name) == "rank");
  CHECK_FALSE(options[0].flag);
  CHECK(std::string(options[1].name) == "gated");
  CHECK(options[1].flag);
  // Only the options given are written.
  CHECK(toy_schema().make_fields(DefaultOptions({})) == "");
}


namespace {

// A toy family whose layer sits in a nested object, as Qwen3.5's text model in text_config, with
// defaults computed from other fields.
struct NestedToy final : recur::FamilyConfig {
  int heads = 4, kv_heads = 4, head_dim = 16;
  double theta = 1e4, ratio = 1;
  std::vector<int> marks;
};

const recur::model::Schema<NestedToy>& nested_toy_schema() {
  static const recur::model::Schema<NestedToy> s = [] {
    using Schema = recur::model::Schema<NestedToy>;
    Schema rope;
    rope.number("theta", &NestedToy::theta, 1e4, 1, 1e9)
        .default_from([](const ModelConfig&, const NestedToy& g) { return g.theta; });
    Schema text;
    text.integer("hidden_size", &ModelConfig::hidden_size, 64, 1, 4096)
        .common_option("hidden")
        .integer("heads", &NestedToy::heads, 4, 1, 64)
        .common_option("heads")
        // As many kv heads as heads unless given.
        .integer("kv_heads", &NestedToy::kv_heads, 4, 1, 64)
        .default_from([](const ModelConfig&, const NestedToy& g) { return g.heads; })
        .option("kv", "kv heads (default: --heads)",
                [](const ModelConfig&, const NestedToy& g) { return g.heads; })
        .integer("head_dim", &NestedToy::head_dim, 16, 1, 4096)
        .option("head-dim", "head size (default hidden / heads)",
                [](const ModelConfig& c, const NestedToy& g) { return c.hidden_size / g.heads; })
        // Written as a ratio of head_dim, made from a width.
        .number("ratio", &NestedToy::ratio, 1, 0.01, 100)
        .option("width", "the width (default: twice head_dim)",
                [](const ModelConfig&, const NestedToy& g) { return 2.0 * g.head_dim; },
                [](double width, const ModelConfig&, const NestedToy& g) { return width / g.head_dim; })
        .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, 4096)
        .common_option("intermediate", true,
                       [](const ModelConfig& c, const NestedToy&) { return 3.0 * c.hidden_size; })
        .number("theta", &NestedToy::theta, 1e4, 1, 1e9).not_written()
        .object("rope", rope, "recur does not know what it changes in the rotary")
        .custom("marks",
                [](recur::model::Fields& f, ModelConfig&, NestedToy& g) {
                  if (const recur::json::Value* v = f.get("marks"))
                    for (const auto& m : v->array()) g.marks.push_back(int(m.integer()));
                },
                [](recur::model::FieldWriter& w, const ModelConfig&, const NestedToy& g) {
                  std::string t;
                  for (const int m : g.marks) t += (t.empty() ? "" : ", ") + std::to_string(m);
                  w.add("marks", "[" + t + "]");
                });
    Schema top;
    top.written("model_type", "\"nested_toy\"")
        .object("text_config", text, "recur does not know what it changes in the model");
    return top;
  }();
  return s;
}

std::pair<ModelConfig, NestedToy> read_nested(const std::string& text) {
  return read_by(nested_toy_schema(), text);
}

}  // namespace

TEST_CASE("a schema reads a nested object's fields, names them by their path, and writes the "
          "object on one line", "[model][config][schema]") {
  auto [c, g] = read_nested(R"({"model_type": "nested_toy", "text_config": {"hidden_size": 96,
      "heads": 6, "head_dim": 8, "ratio": 0.5, "theta": 500, "marks": [3, 1],
      "rope": {"theta": 2e6}}})");
  CHECK(c.hidden_size == 96);
  CHECK(g.heads == 6);
  CHECK(g.kv_heads == 6);  // its default: heads
  CHECK(g.theta == 2e6);   // the nested object's value over the outer one
  CHECK(g.marks == std::vector<int>{3, 1});
  recur::model::FieldWriter w;
  nested_toy_schema().write(w, c, g);
  CHECK(w.text() == "  \"model_type\": \"nested_toy\",\n  \"text_config\": {\"hidden_size\": 96, "
                    "\"heads\": 6, \"kv_heads\": 6, \"head_dim\": 8, \"ratio\": 0.5, "
                    "\"intermediate_size\": 0, \"rope\": {\"theta\": 2000000}, \"marks\": [3, 1]},\n");
  // A nested object without its field keeps the outer one's value (default_from).
  CHECK(read_nested(R"({"text_config": {"theta": 500, "rope": {}}})").second.theta == 500);
  CHECK(read_nested(R"({"text_config": {"theta": 500, "rope": {"theta": null}}})").second.theta == 500);
  const auto refused = [](const std::string& text, std::vector<std::string> parts) {
    INFO(text);
    parts.push_back("toy.json");
    recur::testing::expect_format_error([&] { read_nested(text); }, parts);
  };
  refused(R"({"text_config": {"heads": 65}})", {"text_config.heads is 65", "1 to 64"});
  refused(R"({"text_config": {"rope": {"theta": 0.5}}})", {"text_config.rope.theta is 0.5"});
  refused(R"({"text_config": {"rope": {"scale": 2}}})",
          {"unknown field 'text_config.rope.scale'", "in the rotary"});
  refused(R"({"text_config": {"experts": 8}})",
          {"unknown field 'text_config.experts'", "in the model"});
  refused(R"({"text_config": 3})", {"text_config is 3, expected an object"});
  refused(R"({"heads": 4})", {"unknown field 'heads'"});
  // The table lists the object's fields as its members.
  const auto fields = nested_toy_schema().fields();
  REQUIRE(fields.size() == 2);
  CHECK(fields[1].type == recur::model::FieldSpec::Type::kObject);
  CHECK(fields[1].members.size() == 9);
  CHECK(fields[1].members[2].derived);
}

using recur::testing::GivenOptions;
using Given = GivenOptions::Values;

TEST_CASE("make-model's options derive their defaults from the fields made before them",
          "[model][config][schema]") {
  const auto& schema = nested_toy_schema();
  // The common options are the tool's: not listed among the family's.
  const auto options = schema.make_options();
  REQUIRE(options.size() == 3);
  CHECK(std::string(options[0].name) == "kv");
  CHECK(std::string(options[2].name) == "width");
  CHECK(schema.make_fields(GivenOptions({})) ==
        "\"text_config\": {\"hidden_size\": 64, \"heads\": 4, \"kv_heads\": 4, \"head_dim\": 16, "
        "\"ratio\": 2, \"intermediate_size\": 192}");
  CHECK(schema.make_fields(GivenOptions(Given{{"hidden", "96"}, {"heads", "3"}, {"width", "8"},
                                         {"kv", "1"}, {"intermediate", "40"}})) ==
        "\"text_config\": {\"hidden_size\": 96, \"heads\": 3, \"kv_heads\": 1, \"head_dim\": 32, "
        "\"ratio\": 0.25, \"intermediate_size\": 40}");
  // A given option is range-checked as its field.
  CHECK_THROWS_AS(schema.make_fields(GivenOptions(Given{{"kv", "65"}})), recur::ArgumentError);
}
