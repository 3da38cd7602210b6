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
#include "models/based/based.h"
#include "models/gla/gla.h"
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

namespace {

// A small fla configuration: the sizes every case shares, and `fields`.
std::string fla_json(const std::string& fields) {
  return "{\"vocab_size\": 301, \"hidden_size\": 32, \"num_hidden_layers\": 4, " + fields + "}";
}

// Reads `text`, writes it, reads that: the same configuration, written the same again.
ModelConfig round_trip(const std::string& text) {
  INFO(text);
  const ModelConfig a = ModelConfig::from_json(text, "given.json");
  const std::string written = a.to_json();
  INFO(written);
  const ModelConfig b = ModelConfig::from_json(written, "written.json");
  CHECK(b.to_json() == written);
  CHECK(b.model_type() == a.model_type());
  CHECK(b.mixers == a.mixers);
  CHECK(b.intermediate_size == a.intermediate_size);
  CHECK(b.num_heads == a.num_heads);
  CHECK(b.num_kv_heads == a.num_kv_heads);
  return b;
}

// `text` is refused, naming the file and each of `parts` (the key first).
void refused(const std::string& text, std::vector<std::string> parts) {
  INFO(text);
  parts.push_back("bad.json");
  recur::testing::expect_format_error([&] { ModelConfig::from_json(text, "bad.json"); }, parts);
}

}  // namespace

TEST_CASE("fla's layouts, written then read, are the same configuration, every field kept",
          "[model][config][schema][fla]") {
  using recur::models::gla::config_of;
  SECTION("gla: grouped kv heads, widths, null affine, silu, clamp_min, short convolutions") {
    const ModelConfig c = round_trip(fla_json(
        R"("model_type": "gla", "num_heads": 4, "num_kv_heads": 2, "expand_k": 1, "expand_v": 2,
           "elementwise_affine": null, "feature_map": "silu", "clamp_min": -2.5,
           "use_short_conv": true, "conv_size": 3, "use_output_gate": false, "fuse_norm": false,
           "hidden_ratio": 2, "attn_mode": "fused_recurrent", "use_gk": true, "use_gv": false)"));
    const auto& f = config_of(c);
    CHECK(c.num_kv_heads == 2);
    CHECK(f.expand_k == 1);
    CHECK(f.expand_v == 2);
    CHECK_FALSE(f.elementwise_affine);  // null: no weight
    CHECK(f.qk_activation == "swish");
    REQUIRE(f.clamp_min);
    CHECK(*f.clamp_min == -2.5);
    CHECK(f.use_short_conv);
    CHECK(f.conv_size == 3);
    CHECK_FALSE(f.use_output_gate);
    CHECK_FALSE(f.fuse_norm);
    CHECK(c.intermediate_size == 256);  // from hidden_ratio 2: 2/3 * 64, rounded up to 256
  }
  SECTION("gla's defaults: no clamp_min, no feature map, written as null") {
    const ModelConfig c = round_trip(fla_json(R"("model_type": "gla", "num_heads": 4)"));
    CHECK_FALSE(config_of(c).clamp_min);
    CHECK(config_of(c).qk_activation.empty());
    CHECK_THAT(c.to_json(), Contains("\"feature_map\": null") && Contains("\"clamp_min\": null"));
    CHECK(config_of(c).expand_k == 0.5);
  }
  SECTION("retnet: its own defaults, relu, the parallel mode") {
    const ModelConfig c = round_trip(fla_json(
        R"("model_type": "retnet", "num_heads": 2, "feature_map": "relu", "attn_mode": "parallel",
           "use_short_conv": true, "conv_size": 9)"));
    CHECK(config_of(c).expand_v == 2);
    CHECK(config_of(c).qk_activation == "relu");
    CHECK_FALSE(config_of(c).use_short_conv);  // RetNet's block has none
    CHECK_THAT(c.to_json(), !Contains("use_short_conv") && Contains("\"attn_mode\": \"chunk\""));
  }
  SECTION("hgrn2: expand_ratio, or hidden_size / num_heads when it is null") {
    const ModelConfig a = round_trip(fla_json(
        R"("model_type": "hgrn2", "expand_ratio": 8, "use_lower_bound": false, "elementwise_affine": false)"));
    CHECK(config_of(a).expand_ratio == 8);
    CHECK(a.num_heads == 4);
    CHECK_FALSE(config_of(a).use_lower_bound);
    const ModelConfig b =
        round_trip(fla_json(R"("model_type": "hgrn2", "expand_ratio": null, "num_heads": 2)"));
    CHECK(config_of(b).expand_ratio == 16);
    CHECK(b.num_heads == 2);
    const ModelConfig c = round_trip(
        R"({"model_type": "hgrn2", "num_heads": 2, "hidden_size": 256, "num_hidden_layers": 2})");
    CHECK(config_of(c).expand_ratio == 128);  // num_heads counts only when expand_ratio is null
  }
  SECTION("the hybrid attention block, as an object and as a list") {
    const ModelConfig one = round_trip(fla_json(
        R"("model_type": "gla", "num_heads": 4,
           "attn": {"layers": [1, 3], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": true, "rope_theta": 500})"));
    const auto& a = config_of(one).attn;
    CHECK_FALSE(a.is_list);
    REQUIRE(a.specs.size() == 1);
    CHECK(a.specs[0].layers == std::vector<int>{1, 3});
    CHECK(a.specs[0].num_kv_heads == 2);
    CHECK(a.specs[0].qkv_bias);
    CHECK(a.specs[0].rope_theta == 500);
    CHECK(a.specs[0].window_size == 0);
    CHECK_THAT(one.to_json(), Contains("\"attn\": {\"layers\": [1, 3], \"num_heads\": 4, "
                                       "\"num_kv_heads\": 2, \"qkv_bias\": true, \"window_size\": null"));
    const ModelConfig list = round_trip(fla_json(
        R"("model_type": "hgrn2", "expand_ratio": 8,
           "attn": [{"layers": [2], "num_heads": 2, "window_size": 8}, {"layers": [0], "num_heads": 4}])"));
    const auto& b = config_of(list).attn;
    CHECK(b.is_list);
    REQUIRE(b.specs.size() == 2);
    CHECK(b.specs[0].window_size == 8);
    CHECK(b.specs[0].num_kv_heads == 2);  // as many as heads
    CHECK(b.specs[1].layers == std::vector<int>{0});
    CHECK(list.mixers[0] == recur::MixerKind::kAttention);
    CHECK(list.mixers[1] == recur::MixerKind::kDecayedRecurrence);
    CHECK(list.mixers[2] == recur::MixerKind::kAttention);
    CHECK_THAT(list.to_json(), Contains("\"attn\": [{\"layers\": [2]"));
    CHECK_THAT(round_trip(fla_json(R"("model_type": "retnet", "num_heads": 2, "attn": [])")).to_json(),
               Contains("\"attn\": []"));
  }
}

TEST_CASE("a bad value of an fla layout is refused with its key and the file",
          "[model][config][schema][fla]") {
  const auto gla = [](const std::string& fields) {
    return fla_json("\"model_type\": \"gla\", \"num_heads\": 4, " + fields);
  };
  refused(gla(R"("clamp_min": 1)"), {"clamp_min is 1", "null or a number"});
  refused(gla(R"("clamp_min": "x")"), {"clamp_min is \"x\""});
  refused(gla(R"("feature_map": "elu")"), {"feature_map is 'elu'", "null, relu, swish or silu"});
  refused(gla(R"("elementwise_affine": 1)"), {"elementwise_affine is 1", "true, false or null"});
  refused(gla(R"("use_gk": false)"), {"use_gk is false", "gk gate"});
  refused(gla(R"("use_gv": true)"), {"use_gv is true"});
  refused(gla(R"("attnres_block_size": 2)"), {"attnres_block_size is 2"});
  refused(gla(R"("conv_size": 65)"), {"conv_size is 65", "1 to 64"});
  refused(gla(R"("expand_k": 0)"), {"expand_k is 0"});
  refused(gla(R"("hidden_act": "gelu")"), {"hidden_act is 'gelu'"});
  refused(gla(R"("attn_mode": "parallel")"), {"attn_mode is 'parallel'", "fused_recurrent"});
  refused(gla(R"("use_short_conv": 1)"), {"use_short_conv is 1"});
  refused(gla(R"("expand_ratio": 8)"), {"unknown field 'expand_ratio'"});
  refused(fla_json(R"("model_type": "retnet", "num_heads": 2, "clamp_min": -1)"),
          {"unknown field 'clamp_min'"});
  refused(fla_json(R"("model_type": "hgrn2", "expand_ratio": 0)"), {"expand_ratio is 0"});
  refused(fla_json(R"("model_type": "hgrn2", "num_heads": 2.5, "expand_ratio": null)"),
          {"num_heads is 2.5"});
  refused(fla_json(R"("model_type": "hgrn2", "use_lower_bound": "no")"), {"use_lower_bound is \"no\""});
  refused(fla_json(R"("model_type": "hgrn2", "feature_map": "relu")"), {"unknown field 'feature_map'"});
  // The attention block: each entry's fields by their place.
  refused(gla(R"("attn": 3)"), {"attn is a number", "an object or a list"});
  refused(gla(R"("attn": [3])"), {"attn[0] is a number", "expected an object"});
  refused(gla(R"("attn": {"layers": [4], "num_heads": 4})"), {"attn.layers holds 4", "0 to num_hidden_layers - 1 = 3"});
  refused(gla(R"("attn": {"layers": [1, 1], "num_heads": 4})"), {"attn.layers names layer 1 twice"});
  refused(gla(R"("attn": {"num_heads": 4})"), {"attn.layers is missing"});
  refused(gla(R"("attn": {"layers": [1], "num_heads": null})"), {"attn.num_heads is missing"});
  refused(gla(R"("attn": {"layers": [1], "num_heads": 4, "qkv_bias": "yes"})"), {"attn.qkv_bias is \"yes\""});
  refused(gla(R"("attn": [{"layers": [1], "num_heads": 4}, {"layers": [2], "num_heads": 4, "window_size": 1}])"),
          {"attn[1].window_size is 1"});
  refused(gla(R"("attn": [{"layers": [1], "num_heads": 4}, {"layers": [2], "num_heads": 4, "rope_theta": 1}])"),
          {"attn[1].rope_theta is 1"});
  refused(gla(R"("attn": [{"layers": [1], "num_heads": 4}, {"layers": [1], "num_heads": 4}])"),
          {"attn[1].layers names layer 1, which attn[0] already has"});
  refused(gla(R"("attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 3})"),
          {"attn: num_heads 4 is not a multiple of num_kv_heads 3"});
  refused(gla(R"("attn": {"layers": [1], "num_heads": 4, "qk_norm": true})"), {"unknown field 'attn.qk_norm'"});
}

namespace {

// Based as its checkpoints publish it: a GPT-2 config with the mixer specs; `extra` adds fields.
std::string based_json(const std::string& extra = "") {
  return std::string(R"({"model_type": "gpt2", "vocab_size": 250, "n_embd": 32, "n_layer": 4, "n_head": 4,
      "rms_norm": true, "activation_function": "swiglu", "pad_vocab_size_multiple": 8,
      "alt_mixer_layers": [1, 3], "alt_mixer_2_layers": [2],
      "mixer": {"_target_": "based.models.mixers.convolution.BaseConv", "use_bias": false,
                "expand_proj": 6, "kernel_size": 5, "kernel_sizes": 3, "l_max": 1024},
      "alt_mixer": {"_target_": "x.LinearAttention", "feature_dim": 8, "num_heads": 2,
                    "num_key_value_heads": 2, "eps": 1e-12,
                    "feature_map": {"_target_": "x.TaylorExp", "input_dim": 8}},
      "alt_mixer_2": {"_target_": "x.SlidingAttention", "window_size": 12, "num_heads": 4,
                      "causal": true})") +
         extra + "}";
}

}  // namespace

TEST_CASE("Based, written then read, is the same configuration, every field kept",
          "[model][config][schema][based]") {
  using recur::models::based::config_of;
  const ModelConfig c = round_trip(based_json(R"(, "rotary_emb_base": 500, "n_inner": 300,
      "layer_norm_epsilon": 1e-6, "prenorm": true, "summary_type": "cls_index")"));
  const auto& b = config_of(c);
  CHECK(c.hidden_size == 32);
  CHECK(c.intermediate_size == 512);  // rounded up to 256
  CHECK(c.norm_eps == 1e-6);
  CHECK(b.rope_theta == 500);
  CHECK(b.linear_layers == std::vector<int>{1, 3});
  CHECK(b.window_layers == std::vector<int>{2});
  CHECK_FALSE(b.conv_bias);
  CHECK(b.conv_expand == 6);
  CHECK(b.conv_kernel == 5);  // kernel_size over kernel_sizes
  CHECK(b.la_feature_dim == 8);
  CHECK(b.la_heads == 2);
  CHECK(b.window_size == 12);
  CHECK(b.window_heads == 4);
  CHECK(b.embedding_rows == 256);
  CHECK(c.mixers == std::vector<recur::MixerKind>{recur::MixerKind::kShortConv, recur::MixerKind::kLinearAttention,
                                                  recur::MixerKind::kWindowAttention,
                                                  recur::MixerKind::kLinearAttention});
  // Written as the published layout: every mixer spec whole, the kernel once.
  CHECK_THAT(c.to_json(), Contains("\"model_type\": \"gpt2\"") &&
                              Contains("\"kernel_sizes\": 5}") && !Contains("kernel_size\"") &&
                              Contains("\"feature_map\": {\"_target_\": "
                                       "\"based.models.mixers.linear_attention.TaylorExp\", \"input_dim\": 8}"));
  // model_type "based" reads the same fields.
  std::string as_based = based_json();
  as_based.replace(as_based.find("\"gpt2\""), 6, "\"based\"");
  CHECK(round_trip(as_based).to_json() == round_trip(based_json()).to_json());
  // Absent mixer specs keep their defaults when no layer needs them.
  const ModelConfig conv_only = round_trip(R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2,
      "vocab_size": 50, "rms_norm": true, "activation_function": "swiglu",
      "mixer": {"_target_": "based.models.mixers.convolution.BaseConv"}})");
  CHECK(config_of(conv_only).la_heads == 16);
  CHECK(config_of(conv_only).window_size == 256);
}

TEST_CASE("a bad value of Based's config is refused with its key and the file",
          "[model][config][schema][based]") {
  refused(based_json(R"(, "rotary_emb_fraction": 0.5)"), {"rotary_emb_fraction is 0.5"});
  refused(based_json(R"(, "max_position_embeddings": 1024)"), {"max_position_embeddings is 1024"});
  refused(based_json(R"(, "rotary_emb_dim": 8)"), {"rotary_emb_dim is 8"});
  refused(based_json(R"(, "prenorm": false)"), {"prenorm is false"});
  refused(based_json(R"(, "qkv_proj_bias": true)"), {"qkv_proj_bias is true"});
  refused(based_json(R"(, "tie_word_embeddings": false)"), {"tie_word_embeddings is false"});
  std::string no_rms = based_json();
  no_rms.erase(no_rms.find("\"rms_norm\": true, "), 18);
  refused(no_rms, {"rms_norm is missing"});
  refused(based_json(R"(, "mixer_extra": 1)"), {"unknown field 'mixer_extra'"});
  const auto with = [](const char* key, const char* from, const char* to) {
    std::string s = based_json();
    const auto at = s.find(from, s.find(key));
    REQUIRE(at != std::string::npos);
    return s.replace(at, std::string(from).size(), to);
  };
  refused(with("\"mixer\"", "\"l_max\": 1024", "\"fused\": 1"), {"unknown field 'mixer.fused'"});
  refused(with("\"mixer\"", "\"expand_proj\": 6", "\"expand_proj\": 5"), {"mixer.expand_proj is 5", "even"});
  refused(with("\"mixer\"", "\"kernel_size\": 5", "\"kernel_size\": 65"), {"mixer.kernel_size is 65"});
  refused(with("\"mixer\"", "\"use_bias\": false", "\"use_cuda\": true"), {"mixer.use_cuda is true"});
  refused(with("\"mixer\"", "\"_target_\": \"based.models.mixers.convolution.BaseConv\", ", ""),
          {"mixer._target_ is missing"});
  refused(with("\"alt_mixer\"", "\"feature_dim\": 8", "\"feature_dim\": 257"), {"alt_mixer.feature_dim is 257"});
  refused(with("\"alt_mixer\"", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1"),
          {"alt_mixer.num_key_value_heads 1 differs"});
  refused(with("\"alt_mixer\"", "\"input_dim\": 8", "\"input_dim\": 4"),
          {"alt_mixer.feature_map.input_dim 4 differs"});
  refused(with("\"alt_mixer\"", "\"input_dim\": 8", "\"temp\": 1, \"scale\": 2"),
          {"unknown field 'alt_mixer.feature_map.scale'"});
  refused(with("\"alt_mixer\"", "x.TaylorExp", "x.PosELU"), {"alt_mixer.feature_map._target_ is 'x.PosELU'"});
  refused(with("\"alt_mixer_2\"", "\"num_heads\": 4", "\"num_heads\": 2"), {"alt_mixer_2.num_heads 2 differs"});
  refused(with("\"alt_mixer_2\"", "\"causal\": true", "\"causal\": false"), {"alt_mixer_2.causal is false"});
  refused(with("\"alt_mixer_2\"", "\"window_size\": 12", "\"window_size\": 0"), {"alt_mixer_2.window_size is 0"});
  refused(with("\"n_head\"", "4", "2.5"), {"n_head is 2.5"});
  refused(with("\"alt_mixer_layers\"", "[1, 3]", "[1, 4]"), {"alt_mixer_layers holds 4", "n_layer - 1 = 3"});
  refused(with("\"alt_mixer_2_layers\"", "[2]", "[2, 2]"), {"alt_mixer_2_layers names layer 2 twice"});
  refused(with("\"alt_mixer_2_layers\"", "[2]", "[3]"), {"layer 3 is in both"});
}

namespace {

// A toy family whose layers are a list of kinds, and whose flag picks a name.
struct ListToy final : recur::FamilyConfig {
  bool rotary = false;
};

const recur::model::Schema<ListToy>& list_toy_schema() {
  static const recur::model::Schema<ListToy> s = [] {
    recur::model::Schema<ListToy> t;
    t.written("architectures", "[\"ListToyForCausalLM\"]").for_other_tools()
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 2, 1, 64)
        .list("layer_types", &ModelConfig::mixers,
              {{recur::MixerKind::kDecayedRecurrence, "mamba"}, {recur::MixerKind::kAttention, "attention"}},
              &ModelConfig::num_hidden_layers, "num_hidden_layers")
        .choice("positions", &ListToy::rotary, false, {{true, "rope"}, {false, "nope"}})
        .flag("rope", "rotary positions")
        .made_by([](const recur::model::MakeOptions&, const char*) { return std::string("\"rope\""); });
    return t;
  }();
  return s;
}

// make-model's options with one flag set.
class OneFlag final : public recur::model::MakeOptions {
 public:
  explicit OneFlag(std::string name) : name_(std::move(name)) {}
  bool given(const char* name) const override { return name == name_; }
  bool flag(const char* name) const override { return name == name_; }
  std::int64_t integer(const char*, std::int64_t, std::int64_t) const override { return 0; }
  double real(const char*, double, double) const override { return 0; }
  std::string str(const char*) const override { return ""; }

 private:
  std::string name_;
};

}  // namespace

TEST_CASE("a schema's list of names reads as many kinds as its length field says, writes them "
          "back, and refuses by key", "[model][config][schema]") {
  const auto read = [](const std::string& text) { return read_by(list_toy_schema(), text); };
  const auto refused = [&](const std::string& text, std::vector<std::string> parts) {
    INFO(text);
    parts.push_back("toy.json");
    recur::testing::expect_format_error([&] { read(text); }, parts);
  };
  const auto [c, g] = read(R"({"num_hidden_layers": 3, "layer_types": ["mamba", "attention", "mamba"]})");
  using recur::MixerKind;
  CHECK(c.mixers == std::vector<MixerKind>{MixerKind::kDecayedRecurrence, MixerKind::kAttention, MixerKind::kDecayedRecurrence});
  recur::model::FieldWriter w;
  list_toy_schema().write(w, c, g);
  CHECK_THAT(w.text(), Contains("  \"layer_types\": [\"mamba\", \"attention\", \"mamba\"],\n"));
  // A field written for other tools is left out of what the fingerprint hashes.
  CHECK_THAT(w.text(), Contains("\"architectures\""));
  recur::model::FieldWriter hashed;
  list_toy_schema().write(hashed, c, g, true);
  CHECK(hashed.text() == "  \"num_hidden_layers\": 3,\n  \"layer_types\": [\"mamba\", \"attention\", \"mamba\"],\n"
                         "  \"positions\": \"nope\",\n");
  // Absent, the member is left as it was.
  CHECK(read(R"({"num_hidden_layers": 3})").first.mixers.empty());
  refused(R"({"num_hidden_layers": 3, "layer_types": ["mamba", "attention"]})",
          {"layer_types is", "expected 3 entries (num_hidden_layers)"});
  refused(R"({"num_hidden_layers": 2, "layer_types": ["mamba", "mlp"]})",
          {"layer_types holds \"mlp\"", "mamba or attention"});
  refused(R"({"num_hidden_layers": 1, "layer_types": "mamba"})", {"layer_types is \"mamba\""});
  CHECK(list_toy_schema().fields()[0].for_other_tools);
  const auto spec = list_toy_schema().fields()[2];
  CHECK(spec.type == recur::model::FieldSpec::Type::kList);
  CHECK(spec.choices == std::vector<std::string>{"mamba", "attention"});
  // A flag whose field is a name writes the name its made_by() gives.
  CHECK(list_toy_schema().make_fields(OneFlag("rope")) == "\"positions\": \"rope\"");
  CHECK(list_toy_schema().make_fields(OneFlag("other")) == "");
}

namespace {

// A toy whose make-model options reach further than one field each: a size made from an option
// of a field after it, a list option over two fields, one flag over two fields, a value written
// with no option, a common flag written either way, a block made when its option is given and a
// text written only when a flag is.
struct MadeBlock {
  std::vector<int> layers;
  int width = 0;
};

struct MadeToy final : recur::FamilyConfig {
  int heads = 4, head_dim = 8, rank_a = 1, rank_b = 1, experts = 8;
  double scale = 1, shift = 0;
  recur::model::ObjectBlock<MadeBlock> block;
};

const recur::model::Schema<MadeBlock>& made_block_schema() {
  static const recur::model::Schema<MadeBlock> s = [] {
    recur::model::Schema<MadeBlock> t;
    t.layers("layers", &MadeBlock::layers, "num_hidden_layers").required()
        .option("block-layers", "the block's layers")
        .integer("width", &MadeBlock::width, 0, 1, 4096)
        .option("block-width", "its width (default: --hidden)",
                [](const ModelConfig& c, const MadeBlock&) { return double(c.hidden_size); });
    return t;
  }();
  return s;
}

const recur::model::Schema<MadeToy>& made_toy_schema() {
  static const recur::model::Schema<MadeToy> s = [] {
    using F = MadeToy;
    recur::model::Schema<F> t;
    t.integer("hidden_size", &ModelConfig::hidden_size, 64, 1, 4096).common_option("hidden")
        .integer("heads", &F::heads, 4, 1, 64)
        .made_from([](const recur::model::MakeOptions&, const ModelConfig& c, const F& g) {
          if (c.hidden_size % g.head_dim != 0) throw recur::ArgumentError("--hidden is not heads");
          return double(c.hidden_size / g.head_dim);
        })
        .integer("head_dim", &F::head_dim, 8, 1, 64).option("head-dim", "head size", "8")
        .integer("rank_a", &F::rank_a, 1, 1, 32).option_item("ranks", 0, 2, "ranks a,b")
        .integer("rank_b", &F::rank_b, 1, 1, 32).option_item("ranks", 1, 2)
        .number("scale", &F::scale, 1, 0, 10).flag("tuned", "made-up scales").made_as("2")
        .number("shift", &F::shift, 0, -1, 1).flag("tuned", "").made_as("0.5")
        .integer("experts", &F::experts, 8, 0, 64).made_as("0")
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, true)
        .common_flag("tie-embeddings")
        .objects("block", &F::block, made_block_schema(), "the block has layers and width only")
        // Written as text made from the fields, and only when --alt is given.
        .accepted("alt_width", "a toy's")
        .made_as([](const recur::model::MakeOptions&, const ModelConfig& c, const F&) {
          return "[" + std::to_string(2 * c.hidden_size) + "]";
        })
        .made_when([](const recur::model::MakeOptions& o) { return o.flag("alt"); });
    return t;
  }();
  return s;
}

}  // namespace

TEST_CASE("make-model's options: sizes made from later options, lists, flags over several "
          "fields, blocks made when their option is given, fields written when a flag says",
          "[model][config][schema]") {
  const auto& schema = made_toy_schema();
  std::vector<std::string> names;
  for (const auto& o : schema.make_options()) names.push_back(o.name);
  // An option over several fields is listed once, with the help of its first.
  CHECK(names == std::vector<std::string>{"head-dim", "ranks", "tuned", "block-layers", "block-width"});
  CHECK(std::string(schema.make_options()[1].help) == "ranks a,b");
  // heads is made from --head-dim, whose field comes after it; a common flag not given is false.
  CHECK(schema.make_fields(GivenOptions({}, schema.make_options())) ==
        "\"hidden_size\": 64, \"heads\": 8, \"head_dim\": 8, \"experts\": 0, "
        "\"tie_word_embeddings\": false");
  CHECK(schema.make_fields(GivenOptions(
            Given{{"hidden", "96"}, {"head-dim", "16"}, {"ranks", "3,5"}, {"tuned", ""},
                  {"tie-embeddings", ""}, {"block-layers", "0,1"}, {"alt", ""}},
            schema.make_options())) ==
        "\"hidden_size\": 96, \"heads\": 6, \"head_dim\": 16, \"rank_a\": 3, \"rank_b\": 5, "
        "\"scale\": 2, \"shift\": 0.5, \"experts\": 0, \"tie_word_embeddings\": true, "
        "\"block\": {\"layers\": [0,1], \"width\": 96}, \"alt_width\": [192]");
  const auto refused = [&](Given given, const std::string& part) {
    INFO(part);
    try {
      schema.make_fields(GivenOptions(std::move(given), schema.make_options()));
      FAIL("no ArgumentError");
    } catch (const recur::ArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains(part));
    }
  };
  refused({{"ranks", "3"}}, "--ranks is \"3\", expected 2 integers from 1 to 32 between commas");
  refused({{"ranks", "3,5,"}}, "--ranks is \"3,5,\"");
  refused({{"ranks", "3,33"}}, "--ranks is \"3,33\"");
  refused({{"hidden", "100"}}, "--hidden is not heads");
  refused({{"block-width", "8"}}, "--block-width needs --block-layers");
  refused({{"block-layers", ""}}, "--block-layers is \"\"");
}
