// Where a model's weights come from: the weight sources (safetensors, PyTorch checkpoints) and the
// choice between them for a directory. The tables of tensors are the families' own.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "model/family.h"
#include "model/loader.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "recur/pytorch.h"
#include "recur/safetensors.h"
#include "util/file.h"

namespace recur {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

namespace {

// A safetensors file's tensors (or an index's shards'), under the names the files give them.
class TensorStoreSource final : public WeightSource {
 public:
  explicit TensorStoreSource(TensorStore store) : store_(std::move(store)) {}
  bool has(const std::string& name) const override { return store_.contains(name); }
  std::vector<std::int64_t> shape(const std::string& name) const override {
    return store_.info(name).shape;
  }
  std::vector<float> read(const std::string& name) const override { return store_.read(name); }
  DType dtype(const std::string& name) const override { return store_.info(name).dtype; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& entry : store_.tensors()) out.push_back(entry.first);
    return out;
  }
  std::string describe() const override { return store_.source(); }
  std::vector<std::uint8_t> read_bytes(const std::string& name) const override {
    return store_.read_bytes(name);
  }

 private:
  TensorStore store_;
};

// A pytorch_model.bin's tensors, under the names the file gives them.
class TorchSource final : public WeightSource {
 public:
  explicit TorchSource(TorchCheckpoint ckpt) : ckpt_(std::move(ckpt)) {}
  bool has(const std::string& name) const override { return ckpt_.contains(name); }
  std::vector<std::int64_t> shape(const std::string& name) const override {
    return info(name).shape;
  }
  std::vector<float> read(const std::string& name) const override {
    const auto& t = info(name);
    if (t.dtype != TorchDType::kF32 && t.dtype != TorchDType::kF16 && t.dtype != TorchDType::kBF16)
      throw FormatError(fmt::format("[Model] {}: tensor '{}' is {}, expected F32, F16 or BF16",
                                    ckpt_.source(), name, torch_dtype_name(t.dtype)));
    try {
      return ckpt_.read_f32(name);
    } catch (const NumericError& e) {
      throw FormatError(fmt::format("[Model] {}: {}", ckpt_.source(), e.what()));
    }
  }
  DType dtype(const std::string& name) const override {
    switch (info(name).dtype) {
      case TorchDType::kBF16: return DType::kBF16;
      case TorchDType::kF16: return DType::kF16;
      default: return DType::kF32;
    }
  }
  std::vector<std::string> names() const override { return ckpt_.names(); }
  std::string describe() const override { return ckpt_.source(); }

 private:
  const TorchTensorInfo& info(const std::string& name) const {
    if (!has(name))
      throw FormatError(fmt::format("[Model] {}: no tensor '{}'", ckpt_.source(), name));
    return ckpt_.info(name);
  }
  TorchCheckpoint ckpt_;
};

// The one wrapper prefix recur knows: PyTorch Lightning's module holds the network as `model`,
// so a state dict saved from the Lightning module (Based's checkpoints) names every tensor
// "model.<name>". transformers' save_pretrained writes "model." too, but as part of the names
// the families' tables list (fla's "model.layers.0...."), so the prefix is never taken off
// blindly: model::as_named_by_table decides.
constexpr const char* kWrapperPrefix = "model.";

bool has_wrapper_prefix(const std::string& name) { return name.rfind(kWrapperPrefix, 0) == 0; }

// Another source's tensors under the names the model reads: with the wrapper prefix taken off
// the names that have it (when `strip`), the names in `dropped` (so named) left out. A name then
// held twice (with and without the prefix) is the view's clash(): such a view is never read.
class TableView final : public WeightSource {
 public:
  TableView(const WeightSource& inner, bool strip, const std::set<std::string>& dropped = {})
      : inner_(inner) {
    const std::size_t cut = std::string(kWrapperPrefix).size();
    for (const auto& name : inner_.names()) {
      const std::string bare = strip && has_wrapper_prefix(name) ? name.substr(cut) : name;
      if (dropped.count(bare)) continue;
      if (!stored_.emplace(bare, name).second) {
        if (clash_.empty()) clash_ = bare;
        continue;
      }
      order_.push_back(bare);
    }
  }
  bool has(const std::string& name) const override { return stored_.count(name) != 0; }
  std::vector<std::int64_t> shape(const std::string& name) const override {
    return inner_.shape(stored(name));
  }
  std::vector<float> read(const std::string& name) const override {
    return inner_.read(stored(name));
  }
  DType dtype(const std::string& name) const override { return inner_.dtype(stored(name)); }
  std::vector<std::string> names() const override { return order_; }
  std::string describe() const override { return inner_.describe(); }
  std::vector<std::uint8_t> read_bytes(const std::string& name) const override {
    return inner_.read_bytes(stored(name));
  }
  /// A name the source holds both with and without the prefix, or "".
  const std::string& clash() const { return clash_; }
  /// Keeps the source alive as long as the view: `inner` is the source it was made on.
  void own(std::unique_ptr<WeightSource> inner) { owned_ = std::move(inner); }

 private:
  const std::string& stored(const std::string& name) const {
    const auto it = stored_.find(name);
    if (it == stored_.end())
      throw FormatError(fmt::format("[Model] {}: no tensor '{}'", inner_.describe(), name));
    return it->second;
  }
  const WeightSource& inner_;
  std::unique_ptr<WeightSource> owned_;       // inner_, when the view owns it (own())
  std::map<std::string, std::string> stored_;  // name the model reads -> name in the source
  std::vector<std::string> order_;             // the source's order
  std::string clash_;
};

// The tensors of the family's table for `config` that `weights` lack ("'name' (shape)"), in the
// table's order; `error` instead when the configuration cannot be fitted to the tensors.
struct TableCheck {
  std::vector<std::string> missing;
  std::string error;
  bool matches() const { return missing.empty() && error.empty(); }
  // "tensor 'lm_head.weight' (300, 64) is missing (and 2 more)", or the error.
  std::string say() const {
    if (!error.empty()) return error;
    std::string out = "tensor " + missing.front() + " is missing";
    if (missing.size() > 1) out += fmt::format(" (and {} more)", missing.size() - 1);
    return out;
  }
};

TableCheck check_table(const ModelConfig& config, const WeightSource& weights) {
  TableCheck out;
  ModelConfig c = config;
  const model::Family& family = model::family_of(c);
  try {
    family.fit_to_weights(c, weights);
    c.resolve(weights.describe());
  } catch (const Error& e) {
    out.error = e.what();
    return out;
  }
  std::set<std::string> listed;  // the stored names as the table lists them
  for (const auto& name : weights.names()) listed.insert(family.table_name(c, name));
  for (const auto& t : model::tensor_table(family, c))
    if (!listed.count(t.name))
      out.missing.push_back(fmt::format("'{}' {}", t.name, shape_string(t.shape)));
  return out;
}

// Whether `weights` are read with the wrapper prefix taken off (docs/models.md, "Tensor names"):
// only when some name has it, the names as stored do not match the table, and the names without
// it do. FormatError naming both attempts when both match, or neither.
bool strip_wrapper(const ModelConfig& config, const WeightSource& weights) {
  const auto names = weights.names();
  if (std::none_of(names.begin(), names.end(), has_wrapper_prefix)) return false;
  const TableCheck as_stored = check_table(config, weights);
  const TableView stripped(weights, true);
  TableCheck without = check_table(config, stripped);
  if (!stripped.clash().empty())
    without.error = fmt::format("tensor '{}' is there both with and without it", stripped.clash());
  if (as_stored.matches() && !without.matches()) return false;
  if (!as_stored.matches() && without.matches()) return true;
  if (as_stored.matches())
    throw FormatError(fmt::format(
        "[Model] {}: the tensors match the {} table of config.json both as stored and with the "
        "wrapper prefix '{}' removed: which names are the model's is ambiguous",
        weights.describe(), model::family_of(config).name(), kWrapperPrefix));
  throw FormatError(fmt::format(
      "[Model] {}: the tensors do not match the {} table of config.json: {} (as stored); with "
      "the wrapper prefix '{}' removed, {}",
      weights.describe(), model::family_of(config).name(), as_stored.say(),
      kWrapperPrefix, without.say()));
}

// A trainer's bookkeeping, which a checkpoint saved from a training wrapper's state dict carries:
// PyTorch Lightning's torchmetrics buffers (Based's `train_metrics.*` counters), part of no
// model. They are the names holding "metrics" that the configuration's table lacks, as the
// model reads the names (`strip`: without the wrapper prefix); every reader leaves them out, as
// Based's published loader does. A name the table lists is the model's, whatever it holds.
std::set<std::string> training_bookkeeping(const ModelConfig& config, const WeightSource& weights,
                                           bool strip) {
  const TableView named(weights, strip);
  std::vector<std::string> found;
  for (const auto& name : named.names())
    if (name.find("metrics") != std::string::npos) found.push_back(name);
  if (found.empty()) return {};
  ModelConfig c = config;
  const model::Family& family = model::family_of(c);
  family.fit_to_weights(c, named);
  c.resolve(named.describe());
  std::set<std::string> listed;
  for (const auto& t : model::tensor_table(family, c)) listed.insert(t.name);
  std::set<std::string> out;
  for (const auto& name : found)
    if (!listed.count(family.table_name(c, name))) out.insert(name);
  return out;
}

// The view under which the model reads `weights` (docs/models.md, "Tensor names"), or null when
// it reads them as stored.
std::unique_ptr<TableView> table_view(const ModelConfig& config, const WeightSource& weights) {
  const bool strip = strip_wrapper(config, weights);
  const auto dropped = training_bookkeeping(config, weights, strip);
  if (!strip && dropped.empty()) return nullptr;
  return std::make_unique<TableView>(weights, strip, dropped);
}

// The configuration a bare checkpoint's tensors give: by their names as stored, or, when no
// family recognises those and some have the wrapper prefix, by the names without it. Whichever
// it is, as_named_by_table then checks the names against that configuration's table.
ModelConfig bare_config(const WeightSource& raw, const std::string& source) {
  try {
    return model::config_from_weights(raw, source);
  } catch (const FormatError& as_stored) {
    const auto names = raw.names();
    const TableView stripped(raw, true);
    if (std::none_of(names.begin(), names.end(), has_wrapper_prefix) || !stripped.clash().empty())
      throw;
    try {
      return model::config_from_weights(stripped, source);
    } catch (const FormatError& without) {
      throw FormatError(fmt::format("{} (as stored); with the wrapper prefix '{}' removed: {}",
                                    as_stored.what(), kWrapperPrefix, without.what()));
    }
  }
}

}  // namespace

namespace model {

std::vector<TensorSpec> tensor_table(const Family& family, const ModelConfig& c) {
  std::vector<TensorSpec> table;
  Loader recorder(c, family, table);
  Model::Impl impl;
  family.load(c, Loader::no_weights(), recorder, impl);
  return table;
}

std::unique_ptr<WeightSource> as_named_by_table(const ModelConfig& config,
                                                std::unique_ptr<WeightSource> weights) {
  auto view = table_view(config, *weights);
  if (!view) return weights;
  view->own(std::move(weights));
  return view;
}

const WeightSource& as_named_by_table(const ModelConfig& config, const WeightSource& weights,
                                      std::unique_ptr<WeightSource>& view) {
  view = table_view(config, weights);
  return view ? *view : weights;
}

}  // namespace model

std::vector<std::pair<std::string, std::vector<std::int64_t>>> model_tensor_shapes(
    const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  for (auto& t : model::tensor_table(model::family_of(c), c)) out.emplace_back(t.name, t.shape);
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
    out.config = bare_config(*out.weights, pth);
    out.weights = model::as_named_by_table(out.config, std::move(out.weights));
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
  out.weights = model::as_named_by_table(out.config, open_weights(path));
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
