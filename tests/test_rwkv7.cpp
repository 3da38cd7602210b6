// RWKV-7's configuration and tensors (engine/models/rwkv7): what fla-hub's config.json may leave
// stale is taken from the tensors, what the layer would refuse is refused naming the field or the
// tensor; BlinkDL's .pth is sized from its tensors alone; a layer's state refuses bytes of another
// shape. Missing and misshapen tensors, for every family: test_conformance. The numbers
// themselves are checked against the float64 reference by tests/model_test.sh (rwkv7).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/family.h"
#include "model/model_impl.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/model.h"

namespace {

using recur::Decoder;
using recur::FormatError;
using recur::Model;
using recur::ModelConfig;
using recur::RandomWeights;
using recur::WeightSource;
using Catch::Matchers::Contains;
using Shape = std::vector<std::int64_t>;

// A small fla-hub config.json (C 32, two heads of 16, 3 layers), a field replaced, added or (with
// an empty value) removed by `with`.
std::string fla_json(const std::vector<std::pair<std::string, std::string>>& with = {},
                     bool blink = false) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"model_type", "\"rwkv7\""}, {"vocab_size", "96"}, {"hidden_size", "32"},
      {"head_dim", "16"}, {"num_heads", "null"}, {"num_hidden_layers", "3"},
      {"intermediate_size", "64"}, {"decay_low_rank_dim", "5"}, {"a_low_rank_dim", "3"},
      {"v_low_rank_dim", "2"}, {"gate_low_rank_dim", "7"}, {"norm_eps", "1e-05"},
      {"hidden_act", "\"sqrelu\""}, {"fuse_norm", "false"}, {"value_dim", "[32, 32, 32]"},
      {"attn", "null"}, {"attn_mode", "\"chunk\""}};
  if (blink) {
    fields = {{"model_type", "\"rwkv7\""}, {"checkpoint_layout", "\"blinkdl\""},
              {"vocab_size", "96"}, {"hidden_size", "32"}, {"head_dim", "16"},
              {"num_hidden_layers", "3"}, {"intermediate_size", "64"},
              {"decay_low_rank_dim", "5"}, {"a_low_rank_dim", "3"}, {"v_low_rank_dim", "2"},
              {"gate_low_rank_dim", "7"}};
  }
  for (const auto& [k, v] : with) {
    bool found = false;
    for (auto it = fields.begin(); it != fields.end(); ++it)
      if (it->first == k) {
        found = true;
        if (v.empty()) fields.erase(it);
        else it->second = v;
        break;
      }
    if (!found && !v.empty()) fields.emplace_back(k, v);
  }
  std::string s = "{";
  for (const auto& [k, v] : fields) s += (s.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  return s + "}";
}

ModelConfig config(const std::vector<std::pair<std::string, std::string>>& with = {},
                   bool blink = false) {
  return ModelConfig::from_json(fla_json(with, blink), "config.json");
}

// Tensors in memory, copied from another source and then edited.
class Tensors final : public WeightSource {
 public:
  explicit Tensors(const WeightSource& from) {
    for (const auto& n : from.names()) t_[n] = {from.shape(n), from.read(n)};
  }
  bool has(const std::string& name) const override { return t_.count(name) != 0; }
  Shape shape(const std::string& name) const override { return t_.at(name).first; }
  std::vector<float> read(const std::string& name) const override { return t_.at(name).second; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, v] : t_) out.push_back(n);
    return out;
  }
  std::string describe() const override { return "test tensors"; }
  void drop(const std::string& name) { t_.erase(name); }
  void put(const std::string& name, Shape shape, float value = 0.1f) {
    std::size_t n = 1;
    for (auto d : shape) n *= std::size_t(d);
    t_[name] = {std::move(shape), std::vector<float>(n, value)};
  }

 private:
  std::map<std::string, std::pair<Shape, std::vector<float>>> t_;
};

Tensors random_tensors(const ModelConfig& c) { return Tensors(RandomWeights(c, 7)); }

std::vector<float> logits_of(const std::shared_ptr<const Model>& m) {
  Decoder d(m, {4, 1});
  const auto l = d.prefill({1, 5, 9, 17, 33, 65, 2});
  return std::vector<float>(l.data(), l.data() + l.size());
}

std::string refusal(const ModelConfig& c, const WeightSource& w) {
  try {
    Model::from_weights(c, w);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("an RWKV-7 tensor no reading uses is refused by name", "[rwkv7][model]") {
  const ModelConfig c = config();
  Tensors w = random_tensors(c);
  w.put("model.layers.0.attn.v_lora.lora.0.weight", {2, 32});  // fla has no v LoRA on layer 0
  CHECK_THAT(refusal(c, w), Contains("'model.layers.0.attn.v_lora.lora.0.weight'"));
  Tensors extra = random_tensors(c);
  extra.put("model.layers.3.attn.k_k", {32});  // a fourth layer that config.json does not have
  CHECK_THAT(refusal(c, extra), Contains("'model.layers.3.attn.k_k'"));
}

TEST_CASE("a stale RWKV-7 config field is overridden by the tensors as fla's layer derives it",
          "[rwkv7][model]") {
  const ModelConfig c = config();
  const Tensors w = random_tensors(c);
  const auto want = logits_of(Model::from_weights(c, w));
  // fla's converter leaves num_heads at its default config's 32; head_dim wins.
  CHECK(logits_of(Model::from_weights(config({{"num_heads", "32"}}), w)) == want);
  // Ranks, the FFN width and the vocabulary come from the tensors.
  const auto stale = config({{"decay_low_rank_dim", "64"}, {"a_low_rank_dim", "64"},
                             {"v_low_rank_dim", "32"}, {"gate_low_rank_dim", "128"},
                             {"intermediate_size", ""}, {"vocab_size", "50"}});
  const auto m = Model::from_weights(stale, w);
  CHECK(m->config().vocab_size == 96);
  CHECK(m->config().intermediate_size == 64);
  CHECK(logits_of(m) == want);
  CHECK(m->fingerprint() == Model::from_weights(c, w)->fingerprint());
}

TEST_CASE("an RWKV-7 config the layer cannot run is refused, naming the field or the tensor",
          "[rwkv7][model]") {
  const ModelConfig c = config();
  const Tensors w = random_tensors(c);
  // head_dim that r_k contradicts: the table's r_k and the stored one are named.
  CHECK_THAT(refusal(config({{"head_dim", "32"}}), w),
             Contains("'model.layers.0.attn.r_k'") && Contains("(2, 16)"));
  CHECK_THAT(refusal(config({{"hidden_size", "64"}, {"value_dim", ""}}), w),
             Contains("'model.embeddings.weight'"));
  const auto refused = [](const std::vector<std::pair<std::string, std::string>>& with,
                          const char* field) {
    INFO(fla_json(with));
    CHECK_THROWS_WITH(config(with), Contains(field));
  };
  refused({{"value_dim", "[32, 64, 32]"}}, "value_dim");
  refused({{"hidden_act", "\"swish\""}}, "hidden_act");
  refused({{"attn", "{\"layers\": [1], \"num_heads\": 2}"}}, "attn");
  refused({{"head_dim", "null"}}, "head_dim and num_heads");
  refused({{"head_dim", "8"}, {"hidden_size", "32"}}, "head_dim 8");
  refused({{"rwkv_extra", "1"}}, "rwkv_extra");
}

TEST_CASE("a bare RWKV-7 state dict is sized from its tensors alone", "[rwkv7][model]") {
  const ModelConfig written = config({}, true);
  Tensors w = random_tensors(written);
  const ModelConfig c = recur::model::config_from_weights(w, "x.pth");
  CHECK(c.to_json() == written.to_json());
  const auto want = logits_of(Model::from_weights(c, w));
  // Layer 0's v0/v1/v2, saved by the training code, are accepted and never read.
  Tensors with_v = w;
  with_v.put("blocks.0.att.v0", {1, 1, 32}, 5.0f);
  with_v.put("blocks.0.att.v1", {32, 2}, 5.0f);
  with_v.put("blocks.0.att.v2", {2, 32}, 5.0f);
  CHECK(logits_of(Model::from_weights(recur::model::config_from_weights(with_v, "x.pth"), with_v)) == want);
  // Required on the other layers.
  Tensors no_v = w;
  no_v.drop("blocks.2.att.v0");
  CHECK_THAT(refusal(recur::model::config_from_weights(no_v, "x.pth"), no_v),
             Contains("'blocks.2.att.v0'"));
  // r_k that does not cover the width, and tensors of no known layout.
  Tensors bad_rk = w;
  bad_rk.put("blocks.0.att.r_k", {3, 16});
  CHECK_THROWS_WITH(recur::model::config_from_weights(bad_rk, "x.pth"),
                    Contains("'blocks.0.att.r_k'") && Contains("x.pth"));
  Tensors other = w;
  other.drop("emb.weight");
  CHECK_THROWS_WITH(recur::model::config_from_weights(other, "x.pth"), Contains("x.pth"));
}

TEST_CASE("an RWKV-7 layer's state refuses bytes of another shape and keeps its own",
          "[rwkv7][model]") {
  const ModelConfig c = config();
  const auto m = Model::from_weights(c, random_tensors(c));
  auto state = recur::model::impl_of(*m).network->make_state(1);
  auto other = recur::model::impl_of(*m).network->make_state(1);
  // A state's bytes with an entry of att_x changed: the other state loads them; a wrong size
  // or a NaN is refused and leaves it as it was.
  std::vector<unsigned char> bytes = state->raw_bytes();
  CHECK(bytes.size() == state->raw_size());
  const float one = 1.0f;
  std::memcpy(bytes.data() + 4, &one, sizeof one);
  const auto before = other->raw_bytes();
  CHECK_THROWS_AS(other->load_raw_bytes(bytes.data(), bytes.size() - 4), FormatError);
  CHECK(other->raw_bytes() == before);
  std::vector<unsigned char> nan = bytes;
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 8, &bad, sizeof bad);
  CHECK_THROWS_WITH(other->load_raw_bytes(nan.data(), nan.size()), Contains("non-finite"));
  CHECK(other->raw_bytes() == before);
  // The record's frame: another format, a negative token count.
  std::vector<unsigned char> format = bytes;
  const std::uint32_t two = 2;
  std::memcpy(format.data(), &two, sizeof two);
  CHECK_THROWS_WITH(other->load_raw_bytes(format.data(), format.size()),
                    Contains("state format 2"));
  CHECK(other->raw_bytes() == before);
  std::vector<unsigned char> negative = bytes;
  const std::int64_t minus = -1;
  std::memcpy(negative.data() + negative.size() - 8, &minus, sizeof minus);
  CHECK_THROWS_WITH(other->load_raw_bytes(negative.data(), negative.size()),
                    Contains("token count is -1"));
  CHECK(other->raw_bytes() == before);
  other->load_raw_bytes(bytes.data(), bytes.size());
  CHECK(other->raw_bytes() == bytes);
  // 2C + H N^2 floats, the format and the token count.
  CHECK(state->raw_size() == 4 + (2 * 32 + 2 * 16 * 16) * 4 + 8);
}

TEST_CASE("RWKV-7's two layouts are two configurations", "[rwkv7][model]") {
  // (That each written out reads back as itself is test_conformance's.)
  CHECK(config({}, true).to_json() != config().to_json());
}
