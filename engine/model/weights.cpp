// Where a model's weights come from: the weight sources (safetensors, PyTorch checkpoints), the
// choice between them for a directory, and the tables of tensors each architecture reads.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "model/fla.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "recur/pytorch.h"
#include "recur/safetensors.h"

namespace recur {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

std::string model::layer_prefix(int i) { return fmt::format("model.layers.{}.", i); }

// Names of one feature map's parameters (under attn.feature_map_q / _k), with shapes.
void model::feature_map_tensors(const ModelConfig& c, const std::string& prefix,
                                std::vector<std::pair<std::string, Shape>>& out) {
  const std::int64_t d = c.head_k_dim;
  switch (c.feature_map) {
    case ModelFeatureMap::kHedgehog:
      out.push_back({prefix + "layer.weight", {d, d}});
      out.push_back({prefix + "layer.bias", {d}});
      break;
    case ModelFeatureMap::kT2R:
      out.push_back({prefix + "layer.weight", {d, d}});
      break;
    case ModelFeatureMap::kElementwiseProduct:
      out.push_back({prefix + "layer1.weight", {d, d}});
      out.push_back({prefix + "layer1.bias", {d}});
      out.push_back({prefix + "layer2.weight", {d, d}});
      out.push_back({prefix + "layer2.bias", {d}});
      break;
    default:
      break;
  }
}

namespace {

// A trainer's bookkeeping that checkpoints saved from a training wrapper's state dict carry
// (PyTorch Lightning's torchmetrics buffers, e.g. Based's `train_metrics.*` int64 counters):
// part of no model, whatever the file format. Every source leaves these names out, as the
// published loader does.
bool training_bookkeeping(const std::string& name) {
  return name.find("metrics") != std::string::npos;
}

class TensorStoreSource final : public WeightSource {
 public:
  explicit TensorStoreSource(TensorStore store) : store_(std::move(store)) {}
  bool has(const std::string& name) const override {
    return store_.contains(name) && !training_bookkeeping(name);
  }
  std::vector<std::int64_t> shape(const std::string& name) const override {
    return store_.info(name).shape;
  }
  std::vector<float> read(const std::string& name) const override { return store_.read(name); }
  DType dtype(const std::string& name) const override { return store_.info(name).dtype; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, info] : store_.tensors()) {
      (void)info;
      if (!training_bookkeeping(name)) out.push_back(name);
    }
    return out;
  }
  std::string describe() const override { return store_.source(); }
  std::vector<std::uint8_t> read_bytes(const std::string& name) const override {
    return store_.read_bytes(name);
  }

 private:
  TensorStore store_;
};

// A pytorch_model.bin's tensors. Checkpoints saved from a training wrapper's state dict (as
// Based's are, from PyTorch Lightning) prefix every name with "model." and carry the trainer's
// metric buffers: the prefix is taken off and the metrics are left out (training_bookkeeping).
class TorchSource final : public WeightSource {
 public:
  explicit TorchSource(TorchCheckpoint ckpt) : ckpt_(std::move(ckpt)) {
    for (const auto& name : ckpt_.names()) {
      if (training_bookkeeping(name)) continue;
      const std::string clean = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
      if (!names_.emplace(clean, name).second)
        throw FormatError(fmt::format("[Model] {}: tensor '{}' appears with and without the "
                                      "'model.' prefix", ckpt_.source(), clean));
    }
  }
  bool has(const std::string& name) const override { return names_.count(name) != 0; }
  std::vector<std::int64_t> shape(const std::string& name) const override {
    return ckpt_.info(original(name)).shape;
  }
  std::vector<float> read(const std::string& name) const override {
    const auto& info = ckpt_.info(original(name));
    if (info.dtype != TorchDType::kF32 && info.dtype != TorchDType::kF16 &&
        info.dtype != TorchDType::kBF16)
      throw FormatError(fmt::format("[Model] {}: tensor '{}' is {}, expected F32, F16 or BF16",
                                    ckpt_.source(), name, torch_dtype_name(info.dtype)));
    try {
      return ckpt_.read_f32(original(name));
    } catch (const NumericError& e) {
      throw FormatError(fmt::format("[Model] {}: {}", ckpt_.source(), e.what()));
    }
  }
  DType dtype(const std::string& name) const override {
    switch (ckpt_.info(original(name)).dtype) {
      case TorchDType::kBF16: return DType::kBF16;
      case TorchDType::kF16: return DType::kF16;
      default: return DType::kF32;
    }
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [clean, name] : names_) out.push_back(clean);
    return out;
  }
  std::string describe() const override { return ckpt_.source(); }

 private:
  const std::string& original(const std::string& name) const {
    const auto it = names_.find(name);
    if (it == names_.end())
      throw FormatError(fmt::format("[Model] {}: no tensor '{}'", ckpt_.source(), name));
    return it->second;
  }
  TorchCheckpoint ckpt_;
  std::map<std::string, std::string> names_;  // name the model reads -> name in the file
};

// Based's tensors, as its checkpoints name them (after the "model." prefix the training code's

// state dict adds is taken off). Loading, make-model and the random weights all read this table.
std::vector<std::pair<std::string, Shape>> based_tensor_shapes(const ModelConfig& c) {
  std::vector<std::pair<std::string, Shape>> out;
  const std::int64_t d = c.hidden_size, Hm = c.intermediate_size;
  const std::int64_t di = std::int64_t(c.conv_expand) * d / 2;
  out.push_back({"transformer.embeddings.word_embeddings.weight", {c.embedding_rows, d}});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("transformer.layers.{}.", i);
    out.push_back({p + "norm1.weight", {d}});
    switch (c.mixers[std::size_t(i)]) {
      case MixerKind::kGated:
      case MixerKind::kAttention:
        break;  // fla's kinds, never in a Based model
      case MixerKind::kShortConv:
        out.push_back({p + "mixer.in_proj.weight", {2 * di, d}});
        if (c.conv_bias) out.push_back({p + "mixer.in_proj.bias", {2 * di}});
        out.push_back({p + "mixer.conv.conv.weight", {di, 1, c.conv_kernel}});
        out.push_back({p + "mixer.out_proj.weight", {d, di}});
        if (c.conv_bias) out.push_back({p + "mixer.out_proj.bias", {d}});
        break;
      case MixerKind::kLinearAttention:
        out.push_back({p + "mixer.proj_q.weight", {c.key_dim, d}});
        out.push_back({p + "mixer.proj_k.weight", {c.key_dim, d}});
        out.push_back({p + "mixer.proj_v.weight", {d, d}});
        out.push_back({p + "mixer.out_proj.weight", {d, d}});
        break;
      case MixerKind::kWindowAttention:
        out.push_back({p + "mixer.Wqkv.weight", {3 * d, d}});
        out.push_back({p + "mixer.out_proj.weight", {d, d}});
        break;
    }
    out.push_back({p + "norm2.weight", {d}});
    out.push_back({p + "mlp.fc1.weight", {2 * Hm, d}});
    out.push_back({p + "mlp.fc2.weight", {d, Hm}});
  }
  out.push_back({"transformer.ln_f.weight", {d}});
  return out;
}

}  // namespace

using model::feature_map_tensors;
using model::layer_prefix;

std::vector<std::pair<std::string, std::vector<std::int64_t>>> model_tensor_shapes(
    const ModelConfig& c) {
  if (c.architecture == Architecture::kBased) return based_tensor_shapes(c);
  if (c.gated_family()) return fla::tensor_shapes(c);
  std::vector<std::pair<std::string, Shape>> out;
  const std::int64_t d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  out.push_back({"model.embeddings.weight", {V, d}});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layer_prefix(i);
    if (c.architecture == Architecture::kLinearAttn) {
      const std::int64_t kd = c.key_dim / c.kv_groups, vd = c.value_dim / c.kv_groups;
      out.push_back({p + "attn_norm.weight", {d}});
      out.push_back({p + "attn.q_proj.weight", {c.key_dim, d}});
      out.push_back({p + "attn.k_proj.weight", {kd, d}});
      out.push_back({p + "attn.v_proj.weight", {vd, d}});
      feature_map_tensors(c, p + "attn.feature_map_q.", out);
      if (!c.tie_feature_map_qk) feature_map_tensors(c, p + "attn.feature_map_k.", out);
      if (c.elementwise_affine) out.push_back({p + "attn.norm.weight", {c.head_v_dim}});
      out.push_back({p + "attn.o_proj.weight", {d, c.value_dim}});
      out.push_back({p + "mlp_norm.weight", {d}});
      out.push_back({p + "mlp.gate_proj.weight", {I, d}});
      out.push_back({p + "mlp.up_proj.weight", {I, d}});
      out.push_back({p + "mlp.down_proj.weight", {d, I}});
    } else {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        out.push_back({p + "attn." + proj + ".weight", {d, d}});
        out.push_back({p + "attn." + proj + ".bias", {d}});
      }
      out.push_back({p + "attn_norm.weight", {d}});
      out.push_back({p + "attn_norm.bias", {d}});
      out.push_back({p + "mlp.fc1.weight", {I, d}});
      out.push_back({p + "mlp.fc1.bias", {I}});
      out.push_back({p + "mlp.fc2.weight", {d, I}});
      out.push_back({p + "mlp.fc2.bias", {d}});
      out.push_back({p + "mlp_norm.weight", {d}});
      out.push_back({p + "mlp_norm.bias", {d}});
    }
  }
  if (c.architecture == Architecture::kLinearAttn) out.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {V, d}});
  return out;
}



std::vector<std::uint8_t> WeightSource::read_bytes(const std::string& name) const {
  throw FormatError(fmt::format("[Model] {}: tensor '{}' is not stored as bytes (only a "
                                "safetensors file holds quantized weights)", describe(), name));
}

std::unique_ptr<WeightSource> open_weights(const std::string& dir) {
  // safetensors first (a directory converted with `recur convert` holds both); a checkpoint
  // published as pytorch_model.bin alone is read with the restricted unpickler.
  std::error_code ec;
  const fs::path base(dir);
  if (!fs::exists(base / "model.safetensors", ec) &&
      !fs::exists(base / "model.safetensors.index.json", ec) &&
      fs::exists(base / "pytorch_model.bin", ec))
    return std::make_unique<TorchSource>(TorchCheckpoint::open_file((base / "pytorch_model.bin").string()));
  return std::make_unique<TensorStoreSource>(TensorStore::open_dir(dir));
}

}  // namespace recur
