// Tensor names: a checkpoint's names are matched against its family's table as stored, or with
// PyTorch Lightning's wrapper prefix "model." taken off when only those match (docs/models.md,
// "Tensor names"), for every family, quantized and sharded alike; both or neither is refused
// with both attempts named. A trainer's buffers (names holding "metrics" that the table lacks)
// left out, a table's own such name read. And the shard names of an index: any file name in the
// directory.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/family.h"
#include "model/loader.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/safetensors.h"
#include "support/io_files.h"
#include "support/temp_dir.h"
#include "util/file.h"

using namespace recur;
using recur::testing::expect_format_error;
using recur::testing::TempDir;

namespace {

namespace fs = std::filesystem;

// make-model's options as a family reads them: small common sizes, every family option at its
// default.
class SmallOptions final : public model::MakeOptions {
 public:
  explicit SmallOptions(const model::Family& family, bool tied = false) : tied_(tied) {
    for (const auto& o : family.make_model_options())
      fallback_[o.name] = o.fallback ? o.fallback : "";
  }
  bool given(const char* name) const override { return common_.count(name) != 0; }
  bool flag(const char* name) const override { return tied_ && std::string(name) == "tie-embeddings"; }
  std::int64_t integer(const char* name, std::int64_t, std::int64_t) const override {
    return std::stoll(number(name));
  }
  double real(const char* name, double, double) const override { return std::stod(number(name)); }
  std::string str(const char* name) const override { return value(name); }

 private:
  std::string value(const char* name) const {
    if (const auto it = common_.find(name); it != common_.end()) return it->second;
    const auto it = fallback_.find(name);
    if (it == fallback_.end()) FAIL("make-model option --" << name << " is not the family's");
    return it->second;
  }
  std::string number(const char* name) const {
    const std::string v = value(name);
    if (v.empty()) FAIL("make-model option --" << name << " read as a number without a default");
    return v;
  }
  std::map<std::string, std::string> common_ = {
      {"vocab", "300"}, {"hidden", "128"}, {"layers", "2"}, {"heads", "2"}, {"intermediate", "0"}};
  std::map<std::string, std::string> fallback_;
  bool tied_;
};

struct Arch {
  std::string name;
  ModelConfig config;
};

// One configuration of every --arch of every registered family.
std::vector<Arch> every_arch() {
  std::vector<Arch> out;
  for (const model::Family* f : model::families())
    for (const auto& arch : f->make_model_archs())
      out.push_back({arch, ModelConfig::from_json(f->make_model_config(arch, SmallOptions(*f)),
                                                  "make-model " + arch)});
  return out;
}

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

std::vector<Tensor> tensors_of(const std::string& dir) {
  const TensorStore store = TensorStore::open_dir(dir);
  std::vector<Tensor> out;
  for (const auto& [name, info] : store.tensors())
    out.push_back({name, info.dtype, info.shape, store.read_bytes(name)});
  return out;
}

// config.json of `from`, and `tensors` renamed by `rename` (an empty name leaves one out), into
// `to` as `file`.
template <class Rename>
void write_renamed(const std::string& from, const std::string& to, const std::vector<Tensor>& tensors,
                   Rename rename, const std::string& file = "model.safetensors") {
  fs::create_directories(to);
  fs::copy_file(fs::path(from) / "config.json", fs::path(to) / "config.json",
                fs::copy_options::overwrite_existing);
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(rename(t.name));
  std::vector<StoredTensorData> stored;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!names[i].empty())
      stored.push_back({names[i], tensors[i].dtype, tensors[i].shape, tensors[i].bytes.data()});
  write_safetensors_stored((fs::path(to) / file).string(), stored);
}

std::string wrapped(const std::string& name) { return "model." + name; }

// A family whose table names a tensor "metrics": the paper's model (transformers_are_rnns) with
// one more vector, which its loader takes and its layers never read. No family recur reads
// names one so; this one stands for the first that will.
constexpr const char* kMetricsTensor = "layers.0.metrics.weight";

class MetricsNamed final : public model::Family {
 public:
  const char* name() const override { return "metrics_named"; }
  std::vector<std::string> model_types() const override { return {"metrics_named"}; }
  const char* model_type(const ModelConfig&) const override { return "metrics_named"; }
  void read_config(const std::string&, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    paper().read_config("transformers_are_rnns", root, f, c);
    c.type = "metrics_named";
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    paper().resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override {
    std::string s = paper().config_fields(c);  // model_type first: written as this family's
    const std::string type = "\"transformers_are_rnns\"";
    return s.replace(s.find(type), type.size(), "\"metrics_named\"");
  }
  void load(const ModelConfig& c, const WeightSource& weights, model::Loader& L,
            Model::Impl& impl) const override {
    paper().load(c, weights, L, impl);
    L.take(kMetricsTensor, {c.hidden_size}, "hidden_size", model::Init::kNorm);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    return paper().describe(m, label);
  }

 private:
  static const model::Family& paper() { return *model::family_named("transformers_are_rnns"); }
};

[[maybe_unused]] const bool kMetricsNamedRegistered = [] {
  static const MetricsNamed family;
  model::register_family(family);
  return true;
}();

// `s` as a JSON string, control characters escaped.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", int(ch));
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

// The logits after a few tokens: the model as it runs, not only as it hashes.
std::vector<float> logits(const std::shared_ptr<const Model>& m) {
  Decoder dec(m);
  const auto l = dec.prefill({1, 7, 42, 3, 99});
  return std::vector<float>(l.data(), l.data() + l.size());
}

void check_same_model(const std::shared_ptr<const Model>& got,
                      const std::shared_ptr<const Model>& want) {
  CHECK(got->fingerprint() == want->fingerprint());
  CHECK(got->weight_format() == want->weight_format());
  const auto a = logits(got), b = logits(want);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("a checkpoint with Lightning's 'model.' on every name reads as the model, for every "
          "family, float and quantized", "[io]") {
  const auto archs = every_arch();
  REQUIRE(archs.size() >= 9);  // linear_attn ... qwen35: not a vacuous loop
  for (const auto& [arch, c] : archs) {
    INFO("--arch " << arch);
    TempDir dir;
    const std::string plain = dir.file("plain"), quant = dir.file("q8");
    write_random_model(plain, c, 5, DType::kBF16);
    const auto want = Model::load(plain);
    // As Lightning saves it: the model's own names (fla's "model.layers.0...." among them)
    // behind the wrapper's "model.".
    write_renamed(plain, dir.file("wrapped"), tensors_of(plain), wrapped);
    check_same_model(Model::load(dir.file("wrapped")), want);
    // The same rule when recur quantize's output carries the prefix (codes and scales).
    write_quantized_model(quant, c, RandomWeights(c, 5, DType::kBF16), QuantizeOptions{});
    write_renamed(quant, dir.file("q8-wrapped"), tensors_of(quant), wrapped);
    const auto want_q8 = Model::load(quant);
    check_same_model(Model::load(dir.file("q8-wrapped")), want_q8);
    // And write_quantized_model given the wrapped file's tensors as stored: the same rule.
    write_quantized_model(dir.file("q8-again"), c, *open_weights(dir.file("wrapped")), QuantizeOptions{});
    check_same_model(Model::load(dir.file("q8-again")), want_q8);
  }
}

TEST_CASE("names are matched as stored first: a file that matches both ways or neither is "
          "refused, naming both attempts", "[io]") {
  // GLA's table holds model.embeddings.weight and lm_head.weight: transformers' names.
  const auto archs = every_arch();
  const auto gla = std::find_if(archs.begin(), archs.end(), [](const Arch& a) { return a.name == "gla"; });
  REQUIRE(gla != archs.end());
  TempDir dir;
  write_random_model(dir.file("plain"), gla->config, 5);
  const auto tensors = tensors_of(dir.file("plain"));
  const std::string V = std::to_string(gla->config.vocab_size), d = std::to_string(gla->config.hidden_size);

  SECTION("as stored, with a name that starts with 'model.', is not stripped") {
    // Stripping "model." would leave "embeddings.weight": only the stored names match.
    write_renamed(dir.file("plain"), dir.file("copy"), tensors, [](const std::string& n) { return n; });
    check_same_model(Model::load(dir.file("copy")), Model::load(dir.file("plain")));
  }
  SECTION("both ways") {
    // With a tied head GLA's table is model.* alone: a file holding each tensor as stored and
    // again behind the wrapper's prefix (model.model.*) matches both ways.
    const model::Family& fla = model::family_of(gla->config);
    const ModelConfig tied = ModelConfig::from_json(
        fla.make_model_config("gla", SmallOptions(fla, true)), "make-model gla --tie-embeddings");
    REQUIRE(tied.tie_word_embeddings);
    write_random_model(dir.file("tied"), tied, 5);
    const auto plain = tensors_of(dir.file("tied"));
    std::vector<Tensor> twice = plain;
    for (const auto& t : plain) twice.push_back({wrapped(t.name), t.dtype, t.shape, t.bytes});
    write_renamed(dir.file("tied"), dir.file("both"), twice, [](const std::string& n) { return n; });
    expect_format_error([&] { Model::load(dir.file("both")); },
                        {dir.file("both"), "the tensors match the fla gated table of config.json "
                         "both as stored and with the wrapper prefix 'model.' removed"});
  }
  SECTION("neither way") {
    write_renamed(dir.file("plain"), dir.file("neither"), tensors, [](const std::string& n) {
      return n == "lm_head.weight" ? std::string() : n;
    });
    expect_format_error(
        [&] { Model::load(dir.file("neither")); },
        {dir.file("neither"), "tensor 'lm_head.weight' (" + V + ", " + d + ") is missing (as stored)",
         "with the wrapper prefix 'model.' removed, tensor 'model.embeddings.weight' (" + V + ", " +
             d + ") is missing (and "});
  }
  SECTION("a name there both with and without the prefix") {
    // The stored names do not match, and stripping would make two tensors one name.
    std::vector<Tensor> clash = tensors;
    for (const auto& t : tensors)
      if (t.name == "lm_head.weight") clash.push_back({"model.lm_head.weight", t.dtype, t.shape, t.bytes});
    write_renamed(dir.file("plain"), dir.file("clash"), clash, [](const std::string& n) {
      return n == "lm_head.weight" || n == "model.lm_head.weight" ? n : wrapped(n);
    });
    expect_format_error([&] { Model::load(dir.file("clash")); },
                        {dir.file("clash"), "(as stored); with the wrapper prefix 'model.' removed, "
                         "tensor 'lm_head.weight' is there both with and without it"});
  }
  SECTION("a tied tensor under its other name counts as there") {
    // Based's head is its embedding; a Lightning checkpoint may hold it as lm_head.weight alone.
    const auto based = std::find_if(archs.begin(), archs.end(),
                                    [](const Arch& a) { return a.name == "based"; });
    REQUIRE(based != archs.end());
    write_random_model(dir.file("based"), based->config, 5);
    const std::string emb = "transformer.embeddings.word_embeddings.weight";
    write_renamed(dir.file("based"), dir.file("based-head"), tensors_of(dir.file("based")),
                  [&](const std::string& n) { return wrapped(n == emb ? "lm_head.weight" : n); });
    check_same_model(Model::load(dir.file("based-head")), Model::load(dir.file("based")));
  }
  SECTION("the loader's own message when no name has the prefix") {
    write_renamed(dir.file("plain"), dir.file("bare"), tensors, [](const std::string& n) {
      return n.rfind("model.", 0) == 0 ? n.substr(6) : n;
    });
    expect_format_error([&] { Model::load(dir.file("bare")); },
                        {"tensor 'model.embeddings.weight'", "is missing"});
  }
}

TEST_CASE("a name holding 'metrics' is read when the family's table lists it; a trainer's "
          "buffers, which the table lacks, are left out", "[io]") {
  TempDir dir;
  SECTION("the table's own tensor is read: its values are in the fingerprint") {
    const auto c = ModelConfig::from_json(
        R"({"model_type": "metrics_named", "vocab_size": 64, "hidden_size": 32,
            "num_hidden_layers": 1, "num_heads": 2})", "metrics_named");
    write_random_model(dir.file("m"), c, 5);
    CHECK(open_model_files(dir.file("m")).weights->has(kMetricsTensor));
    auto tensors = tensors_of(dir.file("m"));
    for (auto& t : tensors)
      if (t.name == kMetricsTensor) t.bytes[0] ^= 1;  // the last bit of its first value
    write_renamed(dir.file("m"), dir.file("changed"), tensors,
                  [](const std::string& n) { return n; });
    CHECK(Model::load(dir.file("changed"))->fingerprint() !=
          Model::load(dir.file("m"))->fingerprint());
  }
  SECTION("Based's Lightning checkpoint: its train_metrics buffer is left out") {
    const auto archs = every_arch();
    const auto based = std::find_if(archs.begin(), archs.end(),
                                    [](const Arch& a) { return a.name == "based"; });
    REQUIRE(based != archs.end());
    write_random_model(dir.file("based"), based->config, 5);
    // As Lightning saves it: the network under "model.", the metric's int64 counter beside it.
    auto tensors = tensors_of(dir.file("based"));
    const std::string counter = "train_metrics.perplexity.count";
    tensors.push_back({counter, DType::kI64, {}, std::vector<std::uint8_t>(8, 0)});
    write_renamed(dir.file("based"), dir.file("lightning"), tensors,
                  [&](const std::string& n) { return n == counter ? n : wrapped(n); });
    REQUIRE(TensorStore::open_dir(dir.file("lightning")).contains(counter));
    const ModelFiles files = open_model_files(dir.file("lightning"));
    CHECK_FALSE(files.weights->has(counter));
    for (const auto& name : files.weights->names())
      CHECK(name.find("metrics") == std::string::npos);
    check_same_model(Model::load(dir.file("lightning")), Model::load(dir.file("based")));
  }
}

TEST_CASE("an index's shard names are followed whatever they are, inside the model directory",
          "[io]") {
  TempDir dir;
  const ModelConfig c = Model::builtin_config();
  write_random_model(dir.file("plain"), c, 3);
  const auto tensors = tensors_of(dir.file("plain"));
  const auto want = Model::load(dir.file("plain"));
  // Qwen3.5's published name, with Lightning's prefix on every tensor.
  const std::string shard = "model.safetensors-00001-of-00001.safetensors";
  const std::string out = dir.file("sharded");
  write_renamed(dir.file("plain"), out, tensors, wrapped, shard);
  const auto write_index = [&](const std::string& file) {
    std::string map;
    for (const auto& t : tensors)
      map += (map.empty() ? "\"" : ", \"") + wrapped(t.name) + "\": " + json_string(file);
    std::ofstream(fs::path(out) / "model.safetensors.index.json")
        << "{\"metadata\": {}, \"weight_map\": {" + map + "}}";
  };
  write_index(shard);
  check_same_model(Model::load(out), want);
  // Anything else names a file elsewhere, or none: refused before any file is opened.
  for (const std::string& bad : {dir.file("plain") + "/model.safetensors", std::string("../plain/model.safetensors"),
                                 std::string("..\\plain\\model.safetensors"), std::string(".."),
                                 std::string(""), shard + std::string(1, '\0') + "x"}) {
    INFO(bad);
    write_index(bad);
    expect_format_error([&] { Model::load(out); },
                        {"model.safetensors.index.json", "which is not a file in the model directory"});
  }
}
