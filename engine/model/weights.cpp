// Where a model's weights come from: the weight sources (safetensors, PyTorch checkpoints) and the
// choice between them for a directory. The tables of tensors are the families' own.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "model/family.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "recur/pytorch.h"
#include "recur/safetensors.h"
#include "util/file.h"

namespace recur {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

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

}  // namespace

std::vector<std::pair<std::string, std::vector<std::int64_t>>> model_tensor_shapes(
    const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  for (auto& t : model::family_of(c.architecture).tensors(c)) out.emplace_back(t.name, t.shape);
  return out;
}

std::vector<std::uint8_t> WeightSource::read_bytes(const std::string& name) const {
  throw FormatError(fmt::format("[Model] {}: tensor '{}' is not stored as bytes (only a "
                                "safetensors file holds quantized weights)", describe(), name));
}

std::string bare_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) return p.extension() == ".pth" ? path : "";
  if (!fs::is_directory(p, ec) || fs::exists(p / "config.json", ec)) return "";
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".pth") found.push_back(e.path().string());
  if (found.size() > 1)
    throw FormatError(fmt::format("[Model::load] {} has no config.json and {} .pth files: give "
                                  "the one to load", path, found.size()));
  return found.empty() ? "" : found.front();
}

ModelFiles open_model_files(const std::string& path) {
  ModelFiles out;
  const std::string pth = bare_checkpoint(path);
  if (!pth.empty()) {
    out.weights = std::make_unique<TorchSource>(TorchCheckpoint::open_file(pth));
    out.config = model::config_from_weights(*out.weights, pth);
    out.config_text = out.config.to_json();
    out.bare = true;
    return out;
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw FormatError(fmt::format("[Model::load] {} is neither a directory nor a .pth file", path));
  const std::string config = (fs::path(path) / "config.json").string();
  const auto text = detail::read_file(config);
  if (!text) throw FormatError(fmt::format("[ModelConfig] {}: cannot read the file", config));
  out.config_text = *text;
  out.config = ModelConfig::from_json(*text, config);
  out.weights = open_weights(path);
  return out;
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
