// Quantized weights on disk: I8 and U8 tensors read as bytes, and every bad tensor of a quantized
// model refused by name, with the sizes.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "recur/error.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/safetensors.h"
#include "support/io_files.h"
#include "support/temp_dir.h"
#include "util/file.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;
using recur::testing::expect_format_error;
using recur::testing::raw_file;
using recur::testing::TempDir;
using recur::testing::write;

namespace {

// A small linear_attn model whose MLP width (80) is not a multiple of 32: its down projection
// stays in float, every other matrix is quantized.
ModelConfig small_quant_config() {
  ModelConfig c;
  c.architecture = Architecture::kLinearAttn;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.num_hidden_layers = 1;
  c.num_heads = 2;
  models::linear::edit(c).feature_map = ModelFeatureMap::kHedgehog;
  models::linear::edit(c).norm_feature_map = true;
  c.intermediate_size = 80;
  c.tie_word_embeddings = true;
  return c;
}

struct StoredTensor {
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// Every tensor of a file with its bytes, to change and write back.
std::map<std::string, StoredTensor> read_all(const std::string& path) {
  const auto store = TensorStore::open_file(path);
  std::map<std::string, StoredTensor> out;
  for (const auto& [name, info] : store.tensors())
    out[name] = {info.dtype, info.shape, store.read_bytes(name)};
  return out;
}

void write_all(const std::string& path, const std::map<std::string, StoredTensor>& tensors) {
  std::vector<StoredTensorData> data;
  for (const auto& [name, t] : tensors) data.push_back({name, t.dtype, t.shape, t.bytes.data()});
  write_safetensors_stored(path, data);
}

}  // namespace

TEST_CASE("safetensors: I8 and U8 tensors are read as bytes, never widened to float", "[io][quant]") {
  TempDir dir;
  const std::vector<std::uint8_t> codes = {0x01, 0xff, 0x80, 0x7f};
  const std::vector<std::uint8_t> nibbles = {0x12, 0x34};
  write_safetensors_stored(dir.file("q.st"), {{"c", DType::kI8, {2, 2}, codes.data()},
                                              {"n", DType::kU8, {2}, nibbles.data()}});
  const auto store = TensorStore::open_file(dir.file("q.st"));
  CHECK(store.info("c").dtype == DType::kI8);
  CHECK(store.info("n").dtype == DType::kU8);
  CHECK(store.read_bytes("c") == codes);
  CHECK(store.read_bytes("n") == nibbles);
  expect_format_error([&] { store.read("c"); }, {"q.st", "'c'", "(2, 2)", "I8", "quantized"});
  expect_format_error([&] { store.read("n"); }, {"'n'", "U8"});
  // The header's byte count is checked at a byte per element.
  const auto p = write(dir, "bad.st", raw_file(R"({"c":{"dtype":"I8","shape":[3],"data_offsets":[0,4]}})", "abcd"));
  expect_format_error([&] { TensorStore::open_file(p); }, {"'c'", "span 4 bytes", "takes 3"});
  CHECK_THROWS_AS(parse_dtype("I8"), ArgumentError);  // not a dtype for float tensors
}

TEST_CASE("quantized models: a bad tensor is refused, naming the file, the tensor and the sizes",
          "[io][quant]") {
  TempDir dir;
  const ModelConfig c = small_quant_config();
  const std::string q8 = dir.file("q8"), q4 = dir.file("q4");
  write_quantized_model(q8, c, RandomWeights(c, 3), {"q8", ""});
  write_quantized_model(q4, c, RandomWeights(c, 3), {"q4", ""});
  REQUIRE(Model::load(q8)->weight_format() == "q8, 1 of 7 matrices f32");
  REQUIRE(Model::load(q4)->weight_format() == "q4, 1 of 7 matrices f32");
  const std::string file8 = q8 + "/model.safetensors", file4 = q4 + "/model.safetensors";
  const auto base8 = read_all(file8), base4 = read_all(file4);
  const std::string up = "model.layers.0.mlp.up_proj.weight", up_scale = up + "_scale";
  REQUIRE(base8.at(up).dtype == DType::kI8);
  REQUIRE(base8.at(up).shape == std::vector<std::int64_t>{80, 64});
  REQUIRE(base4.at(up).dtype == DType::kU8);
  REQUIRE(base4.at(up).shape == std::vector<std::int64_t>{80, 32});
  REQUIRE(base8.at(up_scale).shape == std::vector<std::int64_t>{80, 2});
  const auto load8 = [&] { Model::load(q8); };
  const auto load4 = [&] { Model::load(q4); };
  auto t = base8;

  SECTION("the scales cut short") {
    t.at(up_scale).shape = {80, 1};
    t.at(up_scale).bytes.resize(160);
    write_all(file8, t);
    expect_format_error(load8, {file8, up_scale, "(80, 1)", "(80, 2)"});
  }
  SECTION("the scales missing") {
    t.erase(up_scale);
    write_all(file8, t);
    expect_format_error(load8, {file8, up, "scales", "missing"});
  }
  SECTION("a NaN scale") {
    t.at(up_scale).bytes[6] = 0x00;
    t.at(up_scale).bytes[7] = 0x7e;
    write_all(file8, t);
    expect_format_error(load8, {file8, up});
  }
  SECTION("an infinite scale") {
    t.at(up_scale).bytes[0] = 0x00;
    t.at(up_scale).bytes[1] = 0x7c;
    write_all(file8, t);
    expect_format_error(load8, {file8, up});
  }
  SECTION("a negative scale") {
    t.at(up_scale).bytes[1] = static_cast<std::uint8_t>(t.at(up_scale).bytes[1] | 0x80);
    write_all(file8, t);
    expect_format_error(load8, {file8, up});
  }
  SECTION("a q8 code of -128") {
    t.at(up).bytes[5] = 0x80;
    write_all(file8, t);
    expect_format_error(load8, {file8, up});
  }
  SECTION("scales stored as F32") {
    std::vector<std::uint8_t> wide(t.at(up_scale).bytes.size() * 2);
    for (std::size_t i = 0; i < wide.size() / 4; ++i) {
      const float one = 0.01f;
      std::memcpy(wide.data() + 4 * i, &one, 4);
    }
    t.at(up_scale) = {DType::kF32, {80, 2}, wide};
    write_all(file8, t);
    expect_format_error(load8, {file8, up_scale, "F32", "expected F16"});
  }
  SECTION("q8 codes with the shape of q4's") {
    t.at(up).shape = {80, 32};
    t.at(up).bytes.resize(80 * 32);
    write_all(file8, t);
    expect_format_error(load8, {file8, up, "I8", "(80, 32)", "(80, 64)"});
  }
  SECTION("q4 codes where config.json says q8") {
    t.at(up) = base4.at(up);
    write_all(file8, t);
    expect_format_error(load8, {file8, up, "U8", "q4", "gives q8"});
  }
  SECTION("q4 codes with the shape of q8's") {
    auto t4 = base4;
    t4.at(up).shape = {80, 64};
    t4.at(up).bytes.resize(80 * 64);
    write_all(file4, t4);
    expect_format_error(load4, {file4, up, "U8", "(80, 64)", "(80, 32)"});
  }
  SECTION("a float weight with scales beside it") {
    const auto f32 = [&] {
      TempDir plain;
      write_random_model(plain.str(), c, 3);
      return read_all(plain.file("model.safetensors")).at(up);
    }();
    t.at(up) = f32;
    write_all(file8, t);
    expect_format_error(load8, {file8, up, "F32", up_scale});
  }
  SECTION("a matrix whose k_in is not a multiple of 32 stored as codes") {
    const std::string down = "model.layers.0.mlp.down_proj.weight";
    REQUIRE(t.at(down).dtype == DType::kF32);
    t.at(down) = {DType::kI8, {64, 80}, std::vector<std::uint8_t>(64 * 80, 1)};
    t[down + "_scale"] = {DType::kF16, {64, 2}, std::vector<std::uint8_t>(64 * 2 * 2, 0)};
    write_all(file8, t);
    expect_format_error(load8, {file8, down, "k_in 80", "multiple of 32"});
  }
  SECTION("a norm stored as codes") {
    const std::string norm = "model.layers.0.attn_norm.weight";
    t.at(norm) = {DType::kI8, {64}, std::vector<std::uint8_t>(64, 1)};
    write_all(file8, t);
    expect_format_error(load8, {file8, norm, "I8", "quantized"});
  }
  SECTION("a feature map's weight stored as codes") {
    const std::string fm = "model.layers.0.attn.feature_map_q.layer.weight";
    t.at(fm) = {DType::kI8, {32, 32}, std::vector<std::uint8_t>(32 * 32, 1)};
    write_all(file8, t);
    expect_format_error(load8, {file8, fm, "I8"});
  }
  SECTION("scales for a tensor that is not quantized") {
    t["model.norm.weight_scale"] = {DType::kF16, {64, 2}, std::vector<std::uint8_t>(256, 0)};
    write_all(file8, t);
    expect_format_error(load8, {"model.norm.weight_scale", "not part of this configuration"});
  }
  SECTION("codes without a quantization_config in config.json") {
    std::string cfg = *detail::read_file(q8 + "/config.json");
    const auto at = cfg.find("  \"quantization_config\"");
    REQUIRE(at != std::string::npos);
    cfg.erase(at, cfg.find('\n', at) - at + 1);
    write(dir, "q8/config.json", cfg);
    expect_format_error(load8, {file8, "I8", "no quantization_config"});
  }
  SECTION("another tool's quantization_config, or another block size") {
    const std::string cfg = *detail::read_file(q8 + "/config.json");
    for (const auto& [from, to, says] : std::vector<std::array<std::string, 3>>{
             {"\"quant_method\": \"recur\"", "\"quant_method\": \"gptq\"", "gptq"},
             {"\"block_size\": 32", "\"block_size\": 64", "block_size is 64"},
             {"\"format\": \"q8\"", "\"format\": \"q3\"", "q3"},
             {"\"scale_dtype\": \"float16\"", "\"bits\": 8", "quantization_config.bits"}}) {
      std::string s = cfg;
      const auto at = s.find(from);
      REQUIRE(at != std::string::npos);
      s.replace(at, from.size(), to);
      write(dir, "q8/config.json", s);
      expect_format_error(load8, {"config.json", says});
    }
  }
  SECTION("the fingerprint covers the codes and the scales") {
    const auto fp = Model::load(q8)->fingerprint();
    t.at(up).bytes[0] = static_cast<std::uint8_t>(t.at(up).bytes[0] ^ 1);
    write_all(file8, t);
    CHECK(Model::load(q8)->fingerprint() != fp);
    t = base8;
    t.at(up_scale).bytes[0] = static_cast<std::uint8_t>(t.at(up_scale).bytes[0] ^ 1);
    write_all(file8, t);
    CHECK(Model::load(q8)->fingerprint() != fp);
    write_all(file8, base8);
    CHECK(Model::load(q8)->fingerprint() == fp);
    CHECK(Model::load(q4)->fingerprint() != fp);
  }
}

TEST_CASE("write_quantized_model refuses a quantized model and an unknown format", "[io][quant]") {
  TempDir dir;
  const ModelConfig c = small_quant_config();
  CHECK_THROWS_AS(write_quantized_model(dir.file("a"), c, RandomWeights(c, 1), {"q5", ""}),
                  ArgumentError);
  CHECK_THROWS_AS(write_quantized_model(dir.file("a"), c, RandomWeights(c, 1), {"q8", "f16"}),
                  ArgumentError);
  write_quantized_model(dir.file("q"), c, RandomWeights(c, 1), {"q8", ""});
  const auto cfg = ModelConfig::from_file(dir.file("q/config.json"));
  CHECK(cfg.quantization == "q8");
  CHECK(cfg.quantization_head == "q8");
  CHECK_THROWS_AS(
      write_quantized_model(dir.file("b"), cfg, *open_weights(dir.file("q")), {"q4", ""}),
      ArgumentError);
}
