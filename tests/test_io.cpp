// Reading checkpoints: the safetensors reader, sharded indexes, config.json, and a config that
// contradicts its weights. Every bad file must give a FormatError naming the file, the tensor and
// the problem (under ASan in CI: no read out of bounds on the way). Quantized tensors and models
// are in test_io_quant.cpp.
#include <catch2/catch.hpp>

#include <clocale>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "recur/error.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/safetensors.h"
#include "support/io_files.h"
#include "support/temp_dir.h"
#include "util/file.h"
#include "util/json.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;
using recur::testing::expect_format_error;
using recur::testing::raw_file;
using recur::testing::TempDir;
using recur::testing::write;

namespace {

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

}  // namespace

TEST_CASE("safetensors: written files read back in F32, F16 and BF16", "[io]") {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 65504.0f, 1e-6f};
  const std::vector<float> b = {0.5f, 0.25f};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string path = dir.file(std::string("t_") + dtype_name(dt) + ".safetensors");
    write_safetensors(path, {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}}, dt, {{"k", "v"}});
    const auto store = TensorStore::open_file(path);
    REQUIRE(store.tensors().size() == 2);
    CHECK(store.info("a").shape == std::vector<std::int64_t>{2, 3});
    CHECK(store.info("a").dtype == dt);
    const auto ra = store.read("a");
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float want = dt == DType::kF32 ? a[i] : dt == DType::kF16 ? f16_to_float(float_to_f16(a[i]))
                                                                      : bf16_to_float(float_to_bf16(a[i]));
      CHECK(ra[i] == want);
    }
    CHECK(store.read("b") == b);
  }
}

TEST_CASE("16-bit conversions round to nearest even and keep subnormals", "[io]") {
  CHECK(f16_to_float(float_to_f16(1.0f)) == 1.0f);
  CHECK(f16_to_float(float_to_f16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(f16_to_float(float_to_f16(65520.0f))));        // rounds up to infinity
  CHECK(f16_to_float(float_to_f16(5.9604645e-8f)) == 5.9604645e-8f);  // smallest subnormal
  CHECK(f16_to_float(float_to_f16(1.0f + 1.0f / 2048)) == 1.0f);      // tie goes to even
  CHECK(f16_to_float(float_to_f16(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024);
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);     // tie goes to even
  CHECK(bf16_to_float(float_to_bf16(-3.0f)) == -3.0f);
  // Every f16 bit pattern that is finite survives a round trip through float.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const float f = f16_to_float(x);
    if (std::isfinite(f)) REQUIRE(float_to_f16(f) == x);
  }
}

TEST_CASE("safetensors: bad files are rejected with the file, the tensor and the problem", "[io]") {
  TempDir dir;
  const std::string t1 = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string d8 = floats({1.0f, 2.0f});
  const auto open = [](const std::string& p) { return [p] { TensorStore::open_file(p); }; };

  SECTION("a good file opens") {
    CHECK_NOTHROW(TensorStore::open_file(write(dir, "ok.st", raw_file("{" + t1 + "}", d8))));
  }
  SECTION("truncated: shorter than the length field") {
    const auto p = write(dir, "a.st", "abc");
    expect_format_error(open(p), {p, "too short"});
  }
  SECTION("truncated: data cut off") {
    const auto p = write(dir, "b.st", raw_file("{" + t1 + "}", d8.substr(0, 5)));
    expect_format_error(open(p), {p, "'w'", "past the end"});
  }
  SECTION("a header length larger than the file") {
    const auto p = write(dir, "c.st", raw_file("{" + t1 + "}", d8, 1000));
    expect_format_error(open(p), {p, "header claims 1000 bytes"});
  }
  SECTION("a header length of 2^64 - 1") {
    const auto p = write(dir, "c2.st", raw_file("{" + t1 + "}", d8, ~0ull));
    expect_format_error(open(p), {p, "header claims"});
  }
  SECTION("a header that is not JSON") {
    const auto p = write(dir, "d.st", raw_file("{\"w\":{\"dtype\":\"F32\",", d8));
    expect_format_error(open(p), {p, "invalid JSON"});
  }
  SECTION("an unsupported dtype") {
    const auto p = write(dir, "e.st", raw_file(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", d8));
    expect_format_error(open(p), {p, "'w'", "I32", "not supported"});
  }
  SECTION("an I64 tensor (a trainer's counter) opens, and is never read as floats") {
    const auto p = write(dir, "e64.st", raw_file(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", d8));
    const auto store = TensorStore::open_file(p);
    CHECK(store.info("w").dtype == recur::DType::kI64);
    CHECK(store.read_bytes("w").size() == 8);
    expect_format_error([&] { (void)store.read("w"); }, {p, "'w'", "I64", "not a float tensor"});
  }
  SECTION("offsets that disagree with the shape") {
    const auto p = write(dir, "f.st", raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8));
    expect_format_error(open(p), {p, "'w'", "span 8 bytes", "takes 12"});
  }
  SECTION("offsets past the end of the file") {
    const auto p = write(dir, "g.st", raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", d8));
    expect_format_error(open(p), {p, "'w'", "past the end"});
  }
  SECTION("offsets that end before they begin") {
    const auto p = write(dir, "g2.st", raw_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8));
    expect_format_error(open(p), {p, "'w'", "end before"});
  }
  SECTION("overlapping tensors") {
    const auto p = write(dir, "h.st", raw_file(
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8));
    expect_format_error(open(p), {p, "'b'", "overlap", "'a'"});
  }
  SECTION("a hole in the data") {
    const auto p = write(dir, "i.st", raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8));
    expect_format_error(open(p), {p, "'w'", "hole"});
  }
  SECTION("negative or fractional shapes") {
    const auto p = write(dir, "j.st", raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8));
    expect_format_error(open(p), {p, "'w'", "non-negative integer"});
    const auto q = write(dir, "j2.st", raw_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", d8));
    expect_format_error(open(q), {q, "'w'", "non-negative integer"});
  }
  SECTION("an element count that overflows") {
    const auto p = write(dir, "k.st", raw_file(
        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8));
    expect_format_error(open(p), {p, "'w'", "overflows"});
  }
  SECTION("a NaN in the data is caught when read") {
    const auto p = write(dir, "l.st", raw_file("{" + t1 + "}", floats({1.0f, NAN})));
    const auto store = TensorStore::open_file(p);
    expect_format_error([&] { store.read("w"); }, {p, "'w'", "element 1"});
  }
  SECTION("a missing file") {
    expect_format_error(open(dir.file("nope.st")), {"nope.st", "cannot read"});
  }
}

TEST_CASE("sharded checkpoints: the index must agree with the shards", "[io]") {
  TempDir dir;
  const ModelConfig c = Model::builtin_config();
  write_random_model(dir.str(), c, 1, DType::kBF16, 4);
  CHECK(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  CHECK(std::filesystem::exists(dir.file("model-00004-of-00004.safetensors")));
  const auto store = TensorStore::open_dir(dir.str());
  CHECK(store.tensors().size() == model_tensor_shapes(c).size());
  CHECK_NOTHROW(Model::load(dir.str()));

  const std::string index = *detail::read_file(dir.file("model.safetensors.index.json"));
  const auto rewrite = [&](const std::string& from, const std::string& to) {
    std::string s = index;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    write(dir, "model.safetensors.index.json", s);
  };
  SECTION("a tensor listed in the wrong shard") {
    rewrite("\"model.embeddings.weight\": \"model-00001-of-00004.safetensors\"",
            "\"model.embeddings.weight\": \"model-00002-of-00004.safetensors\"");
    expect_format_error([&] { TensorStore::open_dir(dir.str()); },
                        {"index.json", "model.embeddings.weight", "found in"});
  }
  SECTION("a shard that escapes the directory") {
    rewrite("\"model-00001-of-00004.safetensors\"", "\"../model-00001-of-00004.safetensors\"");
    expect_format_error([&] { TensorStore::open_dir(dir.str()); }, {"index.json", "not a file in the model directory"});
  }
  SECTION("a missing shard") {
    std::filesystem::remove(dir.file("model-00003-of-00004.safetensors"));
    expect_format_error([&] { TensorStore::open_dir(dir.str()); }, {"model-00003-of-00004.safetensors", "cannot read"});
  }
  SECTION("an index that is not JSON") {
    write(dir, "model.safetensors.index.json", "{\"weight_map\": {");
    expect_format_error([&] { TensorStore::open_dir(dir.str()); }, {"index.json", "invalid JSON"});
  }
  SECTION("a directory with no weights") {
    TempDir empty;
    expect_format_error([&] { TensorStore::open_dir(empty.str()); }, {empty.str(), "neither"});
  }
}

TEST_CASE("config.json: the library's fields, defaults and formulas", "[io][config]") {
  const auto parse = [](const std::string& body) {
    return ModelConfig::from_json("{\"model_type\": \"linear_attn\"" + body + "}", "config.json");
  };
  const ModelConfig d = parse("");
  // The library's defaults.
  CHECK(d.hidden_size == 2048);
  CHECK(d.num_hidden_layers == 24);
  CHECK(d.num_heads == 4);
  CHECK(d.num_kv_heads == 4);
  CHECK(models::linear::config_of(d).feature_map == ModelFeatureMap::kElementwiseProduct);
  CHECK_FALSE(models::linear::config_of(d).norm_feature_map);
  CHECK(d.norm_eps == 1e-6);
  CHECK(d.vocab_size == 32000);
  CHECK_FALSE(d.tie_word_embeddings);
  // intermediate_size: 2/3 of hidden * ratio, rounded up to a multiple of 256.
  CHECK(d.intermediate_size == 5632);
  CHECK(parse(", \"hidden_size\": 512").intermediate_size == 1536);
  CHECK(parse(", \"hidden_size\": 512, \"intermediate_size\": 1000").intermediate_size == 1000);
  // scale = d_feature^-1/2 after the map; normalized eps 1e-10.
  using models::linear::config_of;
  const ModelConfig h = parse(", \"hidden_size\": 256, \"num_heads\": 4, \"feature_map\": \"hedgehog\"");
  CHECK(config_of(h).head_k_dim == 64);
  CHECK(config_of(h).d_feature == 128);
  CHECK(config_of(h).attn_scale == static_cast<float>(1.0 / std::sqrt(128.0)));
  CHECK(config_of(h).attn_eps == 1e-10);
  CHECK(config_of(parse(", \"hidden_size\": 256, \"feature_map\": \"dpfp\"")).d_feature == 8 * 64);
  const ModelConfig g = parse(", \"hidden_size\": 256, \"num_heads\": 8, \"num_kv_heads\": 2, \"expand_k\": 0.5, \"expand_v\": 2");
  CHECK(config_of(g).key_dim == 128);
  CHECK(config_of(g).value_dim == 512);
  CHECK(config_of(g).kv_groups == 4);
  CHECK(config_of(g).head_k_dim == 16);
  CHECK(config_of(g).head_v_dim == 64);
  CHECK_FALSE(config_of(parse(", \"elementwise_affine\": null")).elementwise_affine);
  // Fields that do not change inference are accepted.
  CHECK_NOTHROW(parse(", \"fuse_norm\": true, \"architectures\": [\"LinearAttentionForCausalLM\"], "
                      "\"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"attn_mode\": \"chunk\""));
  CHECK(parse(", \"vocab_size\": 100, \"eos_token_id\": 2").eos_token_ids == std::vector<int>{2});
  CHECK(parse(", \"vocab_size\": 100, \"eos_token_id\": [2, 7]").eos_token_ids == std::vector<int>{2, 7});
  CHECK(parse(", \"eos_token_id\": null").eos_token_ids.empty());
  // Round trip.
  const ModelConfig r = ModelConfig::from_json(g.to_json(), "round trip");
  CHECK(r.to_json() == g.to_json());
}

TEST_CASE("config.json: unknown or unsupported values get a clear error", "[io][config]") {
  const auto bad = [](const std::string& body, std::initializer_list<std::string> parts) {
    expect_format_error([&] { ModelConfig::from_json(body, "cfg.json"); }, parts);
  };
  bad(R"({"model_type": "linear_attn", "rope_theta": 10000})", {"cfg.json", "unknown field 'rope_theta'"});
  bad(R"({"model_type": "linear_attn", "feature_map": "taylor"})", {"feature_map is 'taylor'"});
  bad(R"({"model_type": "linear_attn", "hidden_act": "gelu"})", {"hidden_act is 'gelu'"});
  bad(R"({"model_type": "linear_attn", "attn": {"layers": [1], "num_heads": 4}})", {"attn is set", "hybrid"});
  bad(R"({"model_type": "linear_attn", "attn_mode": "parallel"})", {"attn_mode is 'parallel'"});
  bad(R"({"model_type": "linear_attn", "num_heads": 6, "num_kv_heads": 4})", {"not a multiple of num_kv_heads"});
  bad(R"({"model_type": "linear_attn", "hidden_size": 100, "num_heads": 8})", {"key dim", "num_heads 8"});
  bad(R"({"model_type": "linear_attn", "hidden_size": "64"})", {"hidden_size is \"64\"", "integer"});
  bad(R"({"model_type": "linear_attn", "norm_q": 1})", {"norm_q", "true or false"});
  bad(R"({"model_type": "mamba"})", {"model_type is 'mamba'"});
  bad(R"({"hidden_size": 64})", {"model_type is missing"});
  bad(R"({"model_type": "transformers_are_rnns", "hidden_act": "swish"})", {"expected relu or gelu"});
  bad(R"({"model_type": "linear_attn",})", {"cfg.json", "invalid JSON"});
  bad(R"([1, 2])", {"not an object"});
  bad(R"({"model_type": "linear_attn", "model_type": "linear_attn"})", {"duplicate key"});
  bad(R"({"model_type": "linear_attn", "vocab_size": 10, "eos_token_id": 10})", {"eos_token_id holds 10"});
}

TEST_CASE("a config that contradicts its weights is rejected, naming the tensor", "[io][config]") {
  TempDir dir;
  ModelConfig c = Model::builtin_config();
  c.num_hidden_layers = 2;
  write_random_model(dir.str(), c, 1);
  REQUIRE_NOTHROW(Model::load(dir.str()));
  const std::string config = *detail::read_file(dir.file("config.json"));
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = config;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    write(dir, "config.json", s);
  };
  SECTION("another hidden size") {
    with("\"hidden_size\": 256", "\"hidden_size\": 128");
    expect_format_error([&] { Model::load(dir.str()); },
                        {"model.safetensors", "model.embeddings.weight", "(256, 256)", "(256, 128)"});
  }
  SECTION("more layers than the file holds") {
    with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    expect_format_error([&] { Model::load(dir.str()); }, {"model.layers.2.attn_norm.weight", "missing"});
  }
  SECTION("fewer layers than the file holds") {
    with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    expect_format_error([&] { Model::load(dir.str()); }, {"model.layers.1.", "not part of this configuration"});
  }
  SECTION("another feature map") {
    with("\"feature_map\": \"elu\"", "\"feature_map\": \"hedgehog\"");
    expect_format_error([&] { Model::load(dir.str()); }, {"feature_map_q.layer.weight", "missing"});
  }
  SECTION("tied embeddings while the file has its own LM head") {
    with("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    expect_format_error([&] { Model::load(dir.str()); }, {"lm_head.weight", "differs"});
  }
  SECTION("grouped kv heads that the k projection does not have") {
    with("\"num_kv_heads\": 4", "\"num_kv_heads\": 2");
    expect_format_error([&] { Model::load(dir.str()); }, {"k_proj.weight", "(256, 256)", "(128, 256)"});
  }
  SECTION("a dtype the model cannot use") {
    const auto store = TensorStore::open_dir(dir.str());
    (void)store;
    std::string bytes = *detail::read_file(dir.file("model.safetensors"));
    const auto at = bytes.find("\"F32\"");
    REQUIRE(at != std::string::npos);
    bytes.replace(at, 5, "\"I32\"");
    write(dir, "model.safetensors", bytes);
    expect_format_error([&] { Model::load(dir.str()); }, {"model.safetensors", "I32", "not supported"});
  }
}

TEST_CASE("json: strict parsing", "[io][json]") {
  const auto v = json::parse(R"({"a": [1, 2.5, -3e2, true, null, "x\u00e9\n"], "b": {}})", "t");
  REQUIRE(v.is_object());
  const auto& a = v.find("a")->array();
  CHECK(a[0].is_integer());
  CHECK(a[0].integer() == 1);
  CHECK_FALSE(a[1].is_integer());
  CHECK(a[1].number() == 2.5);
  CHECK(a[2].number() == -300.0);
  CHECK(a[3].boolean());
  CHECK(a[4].is_null());
  CHECK(a[5].string() == "x\xc3\xa9\n");
  CHECK(json::parse("18446744073709551615", "t").is_number());
  CHECK_FALSE(json::parse("18446744073709551615", "t").is_integer());
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "\"\\x\"", "tru", "\"a\" \"b\"",
                          "{\"a\" 1}", "\"\\ud800\"", "1e999"})
    CHECK_THROWS_AS(json::parse(bad, "t"), FormatError);
  std::string deep(100, '[');
  CHECK_THROWS_WITH(json::parse(deep, "t"), Catch::Contains("nesting"));
  CHECK(json::quote("a\"b\\\n\x01") == "\"a\\\"b\\\\\\n\\u0001\"");
}

TEST_CASE("json: Python's bare Infinity is a number only where config.json is read", "[io][json]") {
  const json::ParseOptions python{true};
  const auto v = json::parse(R"({"time_step_limit": [0.0, Infinity], "low": -Infinity})", "t", python);
  const auto& limit = v.find("time_step_limit")->array();
  CHECK(limit[0].number() == 0.0);
  CHECK(std::isinf(limit[1].number()));
  CHECK(limit[1].number() > 0.0);
  CHECK_FALSE(limit[1].is_integer());
  CHECK(std::isinf(v.find("low")->number()));
  CHECK(v.find("low")->number() < 0.0);
  CHECK(std::isinf(json::parse("Infinity", "t", python).number()));
  // Strict JSON elsewhere (request bodies, tokenizer.json, safetensors headers).
  CHECK_THROWS_WITH(json::parse("[Infinity]", "t"), Catch::Contains("unexpected character 'I'"));
  CHECK_THROWS_WITH(json::parse("[-Infinity]", "t"), Catch::Contains("malformed number"));
  for (const char* bad : {"NaN", "[Infinit]", "[+Infinity]", "Infinityx", "[-Inf]"})
    CHECK_THROWS_AS(json::parse(bad, "t", python), FormatError);
  // A ModelConfig reads it through that option (a field that refuses infinity says so by name).
  CHECK_THROWS_WITH(ModelConfig::from_json(R"({"model_type": "linear_attn", "norm_eps": Infinity})", "cfg.json"),
                    Catch::Contains("norm_eps"));
}

TEST_CASE("tied feature maps may be stored under the q name, the k name or both", "[io][config]") {
  ModelConfig c = Model::builtin_config();
  c.num_hidden_layers = 1;
  models::linear::edit(c).feature_map = ModelFeatureMap::kT2R;
  models::linear::edit(c).tie_feature_map_qk = true;
  TempDir dir;
  write_random_model(dir.str(), c, 1);
  const auto reference = Model::load(dir.str());
  // Rewrite the file with the map under both names, then under the k name only.
  const auto store = TensorStore::open_dir(dir.str());
  const std::string q = "model.layers.0.attn.feature_map_q.layer.weight";
  const std::string k = "model.layers.0.attn.feature_map_k.layer.weight";
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, info] : store.tensors()) values[name] = store.read(name);
  const auto rewrite = [&](bool with_q, bool with_k, float k_nudge) {
    std::vector<float> kv = values[q];
    kv[0] += k_nudge;
    std::vector<TensorData> tensors;
    for (const auto& [name, v] : values) {
      if (name == q && !with_q) continue;
      tensors.push_back({name, store.info(name).shape, v.data()});
    }
    if (with_k) tensors.push_back({k, store.info(q).shape, kv.data()});
    write_safetensors(dir.file("model.safetensors"), tensors, DType::kF32);
  };
  rewrite(true, true, 0.0f);
  CHECK(Model::load(dir.str())->fingerprint() == reference->fingerprint());
  rewrite(false, true, 0.0f);
  Decoder a(reference), b(Model::load(dir.str()));
  const Eigen::VectorXf la = a.prefill({1, 2, 3});
  const Eigen::VectorXf lb = b.prefill({1, 2, 3});
  CHECK(std::memcmp(la.data(), lb.data(), sizeof(float) * static_cast<std::size_t>(la.size())) == 0);
  rewrite(true, true, 0.5f);
  expect_format_error([&] { Model::load(dir.str()); }, {k, "differs"});
}

TEST_CASE("safetensors: random corruption gives FormatError, never a crash", "[io]") {
  // Under ASan (CI) this also proves no read outside the buffers.
  TempDir dir;
  const std::vector<float> a(40, 1.5f), b(6, -2.0f);
  const std::string good_path = dir.file("good.st");
  write_safetensors(good_path, {{"a", {5, 8}, a.data()}, {"b", {6}, b.data()}}, DType::kBF16);
  const std::string good = *detail::read_file(good_path);
  std::mt19937 rng(123);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string bytes = good;
    const int kind = trial % 3;
    if (kind == 0) {
      bytes.resize(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(rng));
    } else {
      // Flip 1-3 bytes, mostly in the length field and the header.
      const int flips = 1 + trial % 3;
      for (int f = 0; f < flips; ++f) {
        const std::size_t at = std::uniform_int_distribution<std::size_t>(0, kind == 1 ? 7 + 120 : good.size() - 1)(rng);
        bytes[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      }
    }
    const std::string path = write(dir, "bad.st", bytes);
    try {
      const auto store = TensorStore::open_file(path);
      for (const auto& [name, info] : store.tensors()) (void)store.read(name);
      ++accepted;  // e.g. a flipped byte inside the data: still a valid file
    } catch (const FormatError& e) {
      CHECK(std::string(e.what()).find(path) != std::string::npos);
      ++rejected;
    }
  }
  CHECK(rejected > 300);
  CHECK(accepted > 0);
}

TEST_CASE("config.json: random corruption gives FormatError, never a crash", "[io][config]") {
  const std::string good = Model::builtin_config().to_json();
  std::mt19937 rng(9);
  int ok = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text = good;
    const int edits = 1 + trial % 3;
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const auto at = std::uniform_int_distribution<std::size_t>(0, text.size() - 1)(rng);
      switch (trial % 3) {
        case 0: text[at] = static_cast<char>(std::uniform_int_distribution<int>(32, 126)(rng)); break;
        case 1: text.erase(at, 1); break;
        default: text.resize(at); break;
      }
    }
    try {
      ModelConfig::from_json(text, "fuzz.json");
      ++ok;  // e.g. a digit changed into another valid value
    } catch (const FormatError& e) {
      CHECK(std::string(e.what()).find("fuzz.json") != std::string::npos);
      ++refused;
    }
  }
  CHECK(refused > 1000);
  CHECK(ok > 0);
}

TEST_CASE("config.json: sizes whose products overflow are a FormatError, never undefined behaviour",
          "[io][config]") {
  // Each of these reached a float-to-int cast out of range or a signed overflow before any
  // tensor was read (run under UBSan in CI), or a layer's ArgumentError instead of FormatError.
  const char* hostile[] = {
      R"({"model_type": "linear_attn", "hidden_size": 1048576, "expand_k": 300, "num_heads": 1, "feature_map": "dpfp"})",
      R"({"model_type": "linear_attn", "hidden_size": 1048576, "expand_v": 1000000, "num_heads": 1})",
      R"({"model_type": "linear_attn", "hidden_size": 1048576, "hidden_ratio": 1000000})",
      R"({"model_type": "linear_attn", "hidden_size": 1048576, "num_heads": 1, "feature_map": "hedgehog"})",
      R"({"model_type": "linear_attn", "hidden_size": 131072, "num_heads": 1})",
      R"({"model_type": "linear_attn", "hidden_size": 8, "expand_k": 0.000001, "num_heads": 1})",
      R"({"model_type": "transformers_are_rnns", "hidden_size": 1048576, "num_heads": 2, "intermediate_size": 1})",
  };
  for (const char* text : hostile) {
    INFO(text);
    expect_format_error([&] { ModelConfig::from_json(text, "cfg.json"); }, {"cfg.json"});
  }
  // The same limits hold for a config built in code and handed to the model.
  ModelConfig c = Model::builtin_config();
  c.hidden_size = 1 << 20;
  c.num_heads = 1;
  models::linear::edit(c).feature_map = ModelFeatureMap::kDpfp;
  models::linear::edit(c).expand_k = 300;
  CHECK_THROWS_AS(c.resolve("code"), FormatError);
}

TEST_CASE("json: numbers read the same in a locale whose decimal separator is a comma",
          "[io][json]") {
  // ctest makes this locale with localedef and points LOCPATH at it (tests/CMakeLists.txt).
  const std::string saved = std::setlocale(LC_ALL, nullptr);
  REQUIRE(std::setlocale(LC_ALL, "de_DE.UTF-8") != nullptr);
  REQUIRE(std::strtod("0,5", nullptr) == 0.5);  // the locale is really in force
  const auto v = json::parse(R"({"eps": 0.00001, "x": -2.5e-3, "n": 12})", "t");
  const double eps = v.find("eps")->number(), x = v.find("x")->number();
  const bool n_ok = v.find("n")->is_integer() && v.find("n")->integer() == 12;
  bool throws_on_comma = false;
  try {
    json::parse("0,5", "t");
  } catch (const FormatError&) {
    throws_on_comma = true;
  }
  ModelConfig c;
  bool config_ok = false;
  try {
    c = ModelConfig::from_json(R"({"model_type": "linear_attn", "norm_eps": 0.00001})", "cfg");
    config_ok = true;
  } catch (...) {
  }
  std::setlocale(LC_ALL, saved.c_str());
  CHECK(eps == 1e-5);
  CHECK(x == -2.5e-3);
  CHECK(n_ok);
  CHECK(throws_on_comma);
  REQUIRE(config_ok);
  CHECK(c.norm_eps == 1e-5);
}

TEST_CASE("sharded checkpoints: an index larger than the limit is refused before it is read",
          "[io]") {
  TempDir dir;
  {
    std::ofstream(dir.file("model.safetensors.index.json")) << "{}";
  }
  // A sparse file: its size says 101 MiB, and no byte of it need be read to refuse it.
  std::filesystem::resize_file(dir.file("model.safetensors.index.json"), 101u << 20);
  expect_format_error([&] { TensorStore::open_dir(dir.str()); },
                      {"model.safetensors.index.json", "more than the limit"});
}
