// Model::load and Model::from_weights: the family of the configuration reads its tensors through
// the loader (model/loader.h: shapes checked against the family's table, every value hashed
// into the fingerprint). The weight sources are in weights.cpp, random weights in
// random_weights.cpp.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "model/family.h"
#include "model/loader.h"
#include "model/network.h"
#include "recur/error.h"
#include "model/random_weights.h"

namespace recur {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Model

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;


std::shared_ptr<const Model> Model::load(const std::string& dir) {
  const ModelFiles files = open_model_files(dir);
  return from_weights(files.config, *files.weights);
}

std::shared_ptr<const Model> Model::from_weights(const ModelConfig& config_in,
                                                 const WeightSource& stored) {
  std::unique_ptr<WeightSource> view;
  const WeightSource& weights = model::as_named_by_table(config_in, stored, view);
  ModelConfig c = config_in;
  model::family_of(c).fit_to_weights(c, weights);
  c.resolve(weights.describe());
  std::shared_ptr<Model> m(new Model());
  m->config_ = c;
  m->source_ = weights.describe();
  Impl& impl = *m->impl_;
  const model::Family& family = model::family_of(c);
  model::Loader L(weights, c, family);
  try {
    family.load(c, weights, L, impl);
  } catch (const ArgumentError& e) {  // a bad model is a FormatError, whatever layer finds it
    throw FormatError(fmt::format("[Model] {}: {}", weights.describe(), e.what()));
  }
  L.check_table();
  L.reject_unused();
  m->fingerprint_ = L.fingerprint();
  m->parameters_ = L.parameters();
  impl.tensors = L.uses();
  m->weight_format_ = model::describe_format(impl.tensors);
  return m;
}

ModelConfig Model::builtin_config() {
  // Its config.json, so that the generic code names no family.
  return ModelConfig::from_json(
      R"({"model_type": "linear_attn", "vocab_size": 256, "hidden_size": 256,
          "num_hidden_layers": 4, "num_heads": 4, "feature_map": "elu",
          "norm_feature_map": true})",
      "built-in model");
}

std::shared_ptr<const Model> Model::builtin(std::uint64_t seed) {
  const ModelConfig c = builtin_config();
  return from_weights(c, RandomWeights(c, seed));
}

std::string Model::describe(const std::string& label) const {
  return model::family_of(config_).describe(*this, label);
}

std::string Model::missing_tokenizer(const std::string& dir) const {
  // With 256 ids or fewer, bytes are the only reading of the ids: any family's byte-level model
  // takes text without a file.
  if (config_.vocab_size <= 256) return "";
  return model::family_of(config_).missing_tokenizer(dir);
}

namespace model {

std::string describe_lines(const Model& m, const std::string& label, const std::string& what,
                           const std::string& sizes, const std::string& state_note) {
  const ModelConfig& c = m.config();
  return fmt::format("model: {}: {}, hidden {}{}, vocab {}, {:.2f}M parameters\n"
                     "state: {:.2f} MiB{}\n",
                     label, what, c.hidden_size, sizes, c.vocab_size, double(m.parameters()) / 1e6,
                     double(new_state_bytes(*impl_of(m).network)) / double(1 << 20), state_note);
}

std::string tokenizer_json_needed(const std::string& dir) {
  return fmt::format("{} holds no tokenizer.json (the model's vocabulary): pass --tokenizer "
                     "FILE|DIR, or give and take token ids (--prompt-ids and --ids, "
                     "--token-ids)", dir);
}

}  // namespace model

std::size_t Model::weight_bytes_per_token() const {
  return static_cast<std::size_t>(config_.hidden_size) * sizeof(float) +
         impl_->network->weight_bytes() + model::dense_bytes(impl_->lm_head);
}

}  // namespace recur
