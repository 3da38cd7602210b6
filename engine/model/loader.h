// The loader every family reads its tensors through: each shape checked against the family's
// tensor table, every value hashed into the model's fingerprint, the names used remembered (so
// that a tensor the model does not use is refused), quantized matrices checked against
// config.json's quantization_config.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quant.h"
#include "layers/dense.h"
#include "model/family.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "recur/feature_map.h"
#include "recur/safetensors.h"
#include "util/hash.h"

namespace recur::model {

using Shape = std::vector<std::int64_t>;
using Role = TensorUse::Role;

inline const char* float_format(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    default: return "f32";
  }
}

// A weight matrix as read: float values (exact in their stored dtype), or quantized codes.
struct MatrixWeight {
  int n_out = 0, k_in = 0;
  std::vector<float> values;  // (n_out, k_in) when not quantized
  DType dtype = DType::kF32;
  bool quantized = false;
  kernels::QuantizedRows quant;  // when quantized

  // Rows [first, first + n) as a packed matrix. Every output is one ordered chain over k_in
  // (over the blocks, for quantized rows) whatever matrix holds its row, so a split changes no
  // byte. A shape-only weight (Loader::recording) gives an empty matrix.
  kernels::PackedMatrix rows(int first, int n) const {
    if (!quantized && values.empty()) return kernels::PackedMatrix();
    if (!quantized)
      return kernels::PackedMatrix(values.data() + std::size_t(first) * std::size_t(k_in), n,
                                   k_in, dtype);
    if (first == 0 && n == quant.n_out) return kernels::PackedMatrix(quant);
    kernels::QuantizedRows part;
    part.type = quant.type;
    part.n_out = n;
    part.k_in = quant.k_in;
    const std::size_t row_bytes = quant.codes.size() / std::size_t(quant.n_out);
    const std::size_t row_scales = std::size_t(quant.blocks_per_row());
    part.codes.assign(quant.codes.begin() + std::ptrdiff_t(std::size_t(first) * row_bytes),
                      quant.codes.begin() + std::ptrdiff_t(std::size_t(first + n) * row_bytes));
    part.scales.assign(quant.scales.begin() + std::ptrdiff_t(std::size_t(first) * row_scales),
                       quant.scales.begin() + std::ptrdiff_t(std::size_t(first + n) * row_scales));
    return kernels::PackedMatrix(part);
  }
  // The values the products multiply by: a quantized matrix's exactly dequantized.
  std::vector<float> dense_values() const {
    if (!quantized) return values;
    std::vector<float> out(std::size_t(n_out) * std::size_t(k_in));
    kernels::dequantize_rows(quant, out.data());
    return out;
  }
  std::string format() const {
    return quantized ? kernels::quant_name(quant.type) : float_format(dtype);
  }
};

// Reads tensors from a WeightSource, checking each shape against the configuration, hashing
// every value into the fingerprint, and remembering which names were used. The family's table
// (tensor_table: its load() run against a recording Loader) is the one list of tensors: the
// loader takes exactly its names with its shapes, so that loading, make-model and the random
// weights cannot drift apart.
class Loader {
 public:
  Loader(const WeightSource& src, const ModelConfig& config, const Family& family)
      : src_(src), config_(config), family_(family), quantization_(config.quantization),
        quantization_head_(config.quantization_head) {
    const std::string cfg = fingerprint_text(config);
    hash_.update(cfg.data(), cfg.size());
    for (const auto& t : tensor_table(family, config)) table_.emplace(t.name, t.shape);
  }

  /// A shape-only loader (as PyTorch's meta device): it reads nothing, and lists in `table`
  /// every tensor the family's load() takes or declares, in that order (tensor_table()). Takes
  /// give zeros (matrices: no values at all), enough for load() to build its layers.
  Loader(const ModelConfig& config, const Family& family, std::vector<TensorSpec>& table)
      : src_(no_weights()), config_(config), family_(family), record_(&table) {}

  /// A source of no tensors: what a recording loader reads.
  static const WeightSource& no_weights() {
    struct None final : WeightSource {
      bool has(const std::string&) const override { return false; }
      std::vector<std::int64_t> shape(const std::string& name) const override { throw missing(name); }
      std::vector<float> read(const std::string& name) const override { throw missing(name); }
      std::vector<std::string> names() const override { return {}; }
      std::string describe() const override { return "the tensor table"; }
      static std::logic_error missing(const std::string& name) {
        return std::logic_error("[Model] internal: a recording loader read '" + name + "'");
      }
    };
    static const None none;
    return none;
  }

  /// Whether this loader only records the table (reads nothing).
  bool recording() const { return record_ != nullptr; }

  /// Lists a tensor in the table here, to be taken later: where the table's order (the files
  /// make-model writes) differs from the order load() reads in (the fingerprint's).
  void declare(const std::string& name, const Shape& shape, Init init) {
    if (record_) record(name, shape, init);
  }

  /// Every tensor of the table was taken: a loader that skipped one is a bug in recur.
  void check_table() const {
    for (const auto& [name, shape] : table_)
      if (!taken_.count(name))
        throw std::logic_error(fmt::format("[Model] internal: the architecture's table lists "
                                           "'{}' {}, which the loader never read", name,
                                           shape_string(shape)));
  }

  /// The tensor `name` of `shape` as float values; `init` is how make-model's random weights
  /// fill it.
  std::vector<float> take(const std::string& name, const Shape& shape, const char* why,
                          Init init) {
    return take_as(name, name, shape, why, init);
  }

  /// take() of `name`, hashed into the fingerprint as `canonical` (a tied tensor stored under
  /// either of two names is the same model).
  std::vector<float> take_as(const std::string& name, const std::string& canonical,
                             const Shape& shape, const char* why, Init init,
                             Role role = Role::kOther) {
    claim(name, canonical, shape, why, init);
    if (record_) return std::vector<float>(element_count(shape), 0.0f);
    const std::string scales = scale_name(name);
    if (src_.has(scales) && role != Role::kOther)
      fail("tensor '{}' is {}, but '{}' is there as if it were quantized: a quantized weight's "
           "codes are I8 (q8) or U8 (q4)", name, dtype_name(src_.dtype(name)), scales);
    const Shape got = src_.shape(name);
    if (got != shape)
      fail("tensor '{}' has shape {}, but config.json implies {} ({})", name, shape_string(got),
           shape_string(shape), why);
    std::vector<float> values = src_.read(name);
    used_.insert(name);
    hash_.update(canonical.data(), canonical.size());
    for (auto d : shape) hash_.update_value(d);
    hash_.update(values.data(), values.size() * sizeof(float));
    parameters_ += static_cast<std::int64_t>(values.size());
    uses_.push_back({name, canonical, shape, role, float_format(src_.dtype(name))});
    return values;
  }

  /// A weight matrix (n_out, k_in) of the forward pass: float values, or the I8 / U8 codes and
  /// F16 scales of a quantized weight (docs/quantization.md), each checked against
  /// config.json's quantization_config, the shape and the block count before it is used.
  MatrixWeight take_matrix(const std::string& name, const std::string& canonical, int n_out,
                           int k_in, Role role, const char* why, Init init = Init::kMatrix) {
    const Shape shape{n_out, k_in};
    MatrixWeight w;
    w.n_out = n_out;
    w.k_in = k_in;
    if (record_) {  // shape only: no values
      claim(name, canonical, shape, why, init);
      return w;
    }
    if (!src_.has(name) || is_float_dtype(src_.dtype(name))) {
      w.values = take_as(name, canonical, shape, why, init, role);
      w.dtype = src_.dtype(name);
      return w;
    }
    claim(name, canonical, shape, why, init);
    const DType dt = src_.dtype(name);
    const auto type = dt == DType::kI8 ? kernels::QuantType::kQ8 : kernels::QuantType::kQ4;
    const char* format = kernels::quant_name(type);
    const std::string scales = scale_name(name);
    const std::string& expected = role == Role::kHead ? quantization_head_ : quantization_;
    if (quantization_.empty())
      fail("tensor '{}' is {}, the codes of a quantized weight, but config.json has no "
           "quantization_config", name, dtype_name(dt));
    if (expected != format)
      fail("tensor '{}' is {} ({} codes), but config.json's quantization_config gives {} for {}",
           name, dtype_name(dt), format, expected, role == Role::kHead ? "the head" : "matrices");
    if (k_in % kernels::kQuantBlock != 0)
      fail("tensor '{}' is quantized, but its k_in {} is not a multiple of {} (such matrices "
           "stay in float)", name, k_in, kernels::kQuantBlock);
    const Shape stored{n_out, type == kernels::QuantType::kQ8 ? k_in : k_in / 2};
    const Shape got = src_.shape(name);
    if (got != stored)
      fail("tensor '{}' is {} with shape {}, but config.json implies {} ({} codes of {} {}, {})",
           name, dtype_name(dt), shape_string(got), shape_string(stored), format,
           shape_string(shape), why, type == kernels::QuantType::kQ8 ? "a byte each" : "two per byte");
    if (!src_.has(scales))
      fail("tensor '{}' is {} but its scales '{}' are missing", name, dtype_name(dt), scales);
    const Shape scale_shape{n_out, k_in / kernels::kQuantBlock};
    if (src_.dtype(scales) != DType::kF16)
      fail("tensor '{}' is {}, expected F16 (one IEEE half per block of {})", scales,
           dtype_name(src_.dtype(scales)), kernels::kQuantBlock);
    if (src_.shape(scales) != scale_shape)
      fail("tensor '{}' has shape {}, but {} {} takes {} (one scale per block of {})", scales,
           shape_string(src_.shape(scales)), name, shape_string(shape),
           shape_string(scale_shape), kernels::kQuantBlock);
    w.quantized = true;
    w.quant.type = type;
    w.quant.n_out = n_out;
    w.quant.k_in = k_in;
    w.quant.codes = src_.read_bytes(name);
    const std::vector<std::uint8_t> raw = src_.read_bytes(scales);
    const std::size_t n_scales = std::size_t(n_out) * std::size_t(k_in / kernels::kQuantBlock);
    if (raw.size() != 2 * n_scales)
      fail("tensor '{}' holds {} bytes, expected {}", scales, raw.size(), 2 * n_scales);
    w.quant.scales.resize(n_scales);
    for (std::size_t i = 0; i < n_scales; ++i)  // little-endian, as the format stores them
      w.quant.scales[i] = static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    const std::string what = fmt::format("[Model] {}: tensor '{}'", src_.describe(), name);
    kernels::check_quantized(w.quant, what.c_str());
    used_.insert(name);
    used_.insert(scales);
    // The fingerprint covers the format, the codes and the scales: the numbers the kernels use.
    hash_.update(canonical.data(), canonical.size());
    for (auto d : shape) hash_.update_value(d);
    hash_.update(format, std::strlen(format));
    hash_.update(w.quant.codes.data(), w.quant.codes.size());
    hash_.update(w.quant.scales.data(), w.quant.scales.size() * sizeof(std::uint16_t));
    parameters_ += std::int64_t(n_out) * k_in;
    uses_.push_back({name, canonical, shape, role, format});
    return w;
  }

  /// A tied tensor that may be stored under a second name: if present, it must equal `ref`.
  void accept_tied(const std::string& name, const std::vector<float>& ref, const Shape& shape) {
    if (!src_.has(name)) return;
    if (!is_float_dtype(src_.dtype(name)) || src_.shape(name) != shape || src_.read(name) != ref)
      fail("tensor '{}' differs from the tensor it is tied to by config.json", name);
    used_.insert(name);
  }

  /// accept_tied() for a matrix: a quantized copy must hold the same codes and scales.
  void accept_tied(const std::string& name, const MatrixWeight& ref, const Shape& shape) {
    if (!ref.quantized) return accept_tied(name, ref.values, shape);
    if (!src_.has(name)) return;
    const std::string scales = scale_name(name);
    std::vector<std::uint8_t> want(ref.quant.scales.size() * 2);
    std::memcpy(want.data(), ref.quant.scales.data(), want.size());  // little-endian hosts
    if (is_float_dtype(src_.dtype(name)) || !src_.has(scales) ||
        src_.read_bytes(name) != ref.quant.codes || src_.read_bytes(scales) != want)
      fail("tensor '{}' differs from the tensor it is tied to by config.json", name);
    used_.insert(name);
    used_.insert(scales);
  }

  /// A tensor a checkpoint may hold that the forward pass never reads: accepted, not loaded.
  void ignore(const std::string& name) {
    if (src_.has(name)) used_.insert(name);
  }

  void reject_unused() const {
    for (const auto& name : src_.names())
      if (!used_.count(name))
        fail("tensor '{}' is not part of this configuration: config.json and the weights disagree",
             name);
  }

  /// Whether the source holds `name` (never, when recording).
  bool has(const std::string& name) const { return src_.has(name); }
  DType dtype(const std::string& name) const { return src_.dtype(name); }
  std::vector<TensorUse> uses() const { return uses_; }
  std::uint64_t fingerprint() const { return hash_.digest(); }
  std::int64_t parameters() const { return parameters_; }
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw FormatError(fmt::format("[Model] {}: {}", src_.describe(),
                                  fmt::format(f, std::forward<Args>(args)...)));
  }

 private:
  const WeightSource& src_;
  const ModelConfig& config_;
  const Family& family_;
  std::map<std::string, Shape> table_;  // the architecture's tensors
  std::set<std::string> taken_;         // of those, the ones read
  std::vector<TensorSpec>* record_ = nullptr;  // the table being recorded (recording())
  std::set<std::string> recorded_;             // its names
  detail::Hasher hash_;
  // NAME.weight's scales: NAME.weight_scale.
  static std::string scale_name(const std::string& name) { return name + "_scale"; }

  static std::size_t element_count(const Shape& shape) {
    std::size_t n = 1;
    for (const auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }

  // Lists a tensor under the table's name for it, once (a declared tensor is taken later).
  void record(const std::string& canonical, const Shape& shape, Init init) {
    std::string listed = family_.table_name(config_, canonical);
    if (recorded_.insert(listed).second) record_->push_back({std::move(listed), shape, init});
  }

  // The table check and the presence check that every take begins with (when recording: the
  // entry it adds to the table).
  void claim(const std::string& name, const std::string& canonical, const Shape& shape,
             const char* why, Init init) {
    if (record_) return record(canonical, shape, init);
    const auto entry = table_.find(family_.table_name(config_, canonical));
    if (entry == table_.end() || entry->second != shape)
      throw std::logic_error(fmt::format("[Model] internal: tensor '{}' {} is not in the "
                                         "architecture's table as read", name, shape_string(shape)));
    taken_.insert(entry->first);
    if (!src_.has(name))
      fail("tensor '{}' {} is missing ({})", name, shape_string(shape), why);
  }

  std::set<std::string> used_;
  std::int64_t parameters_ = 0;
  std::string quantization_, quantization_head_;
  std::vector<TensorUse> uses_;
};

inline Dense dense(Loader& L, const std::string& name, int n_out, int k_in, bool bias,
                   const char* why, Role role = Role::kMatrix) {
  Dense d;
  const std::string weight = name + ".weight";
  d.w = L.take_matrix(weight, weight, n_out, k_in, role, why).rows(0, n_out);
  if (bias) d.bias = L.take(name + ".bias", {n_out}, why, Init::kBias);
  return d;
}

// One Linear(d_key, d_key) of a learned feature map, taken as dense() takes it: weight, then bias.
inline FeatureMapLinear map_linear(Loader& L, const std::string& name, int d_key, bool bias,
                                   const char* why, Init init = Init::kMatrix) {
  FeatureMapLinear l;
  l.weight = L.take(name + ".weight", {d_key, d_key}, why, init);
  l.storage = L.dtype(name + ".weight");
  if (bias) l.bias = L.take(name + ".bias", {d_key}, why, Init::kBias);
  return l;
}

inline Norm norm(Loader& L, const std::string& name, int dim, float eps, bool layer_norm, bool affine,
          const char* why) {
  Norm n;
  n.dim = dim;
  n.eps = eps;
  n.layer_norm = layer_norm;
  if (affine) n.weight = L.take(name + ".weight", {dim}, why, Init::kNorm);
  if (layer_norm) n.bias = L.take(name + ".bias", {dim}, why, Init::kBias);
  return n;
}



/// Where a family keeps its token embedding and its head (lm_head), which every family reads
/// the same way around its layers: take_embedding() first, take_head() after the final norm.
struct Ends {
  std::string embedding;
  std::string head = "lm_head.weight";
  std::int64_t rows = 0;          // the embedding's: vocab_size, or more (padding rows)
  const char* why = "vocab_size, hidden_size";
  bool head_alone = false;        // a tied embedding may be stored as the head alone
};

/// The token embedding into impl.embeddings. A tied one is the head's matrix too (quantized
/// with it), returned for take_head(); an untied one is only gathered, a row per token, and
/// stays as stored.
inline MatrixWeight take_embedding(Loader& L, const ModelConfig& c, Model::Impl& impl,
                                   const Ends& e) {
  const int rows = static_cast<int>(e.rows), d = c.hidden_size;
  if (!c.tie_word_embeddings) {
    if (L.recording()) L.declare(e.embedding, {rows, d}, Init::kEmbedding);  // no zeros: it is big
    else impl.embeddings = L.take(e.embedding, {rows, d}, e.why, Init::kEmbedding);
    return {};
  }
  // Stored under the embedding's name (and perhaps the head's too, the same values), or, where
  // the family allows it, under the head's alone (with neither, the embedding is said missing).
  const bool alone = e.head_alone && !L.has(e.embedding) && L.has(e.head);
  const std::string why = alone ? std::string(e.why) + " (the tied head)" : e.why;
  MatrixWeight table = L.take_matrix(alone ? e.head : e.embedding, e.embedding, rows, d,
                                     Role::kHead, why.c_str(), Init::kEmbedding);
  if (!alone) L.accept_tied(e.head, table, {rows, d});
  impl.embeddings = table.dense_values();
  return table;
}

/// The head into impl.lm_head: the tied embedding's first vocab_size rows (padding rows are
/// never a token), or its own matrix.
inline void take_head(Loader& L, const ModelConfig& c, Model::Impl& impl, const Ends& e,
                      const MatrixWeight& tied) {
  const int V = c.vocab_size, d = c.hidden_size;
  if (c.tie_word_embeddings) {
    impl.lm_head = Dense{};
    impl.lm_head.w = tied.rows(0, V);
    return;
  }
  const std::string head = e.head.substr(0, e.head.size() - std::string(".weight").size());
  impl.lm_head = dense(L, head, V, d, false, "vocab_size, hidden_size", Role::kHead);
}

// Rows [first, first + n) of a fused weight as their own matrix (MatrixWeight::rows).
inline Dense rows_of(const MatrixWeight& w, const std::vector<float>& bias, int first, int n) {
  Dense out;
  out.w = w.rows(first, n);
  if (!bias.empty())
    out.bias.assign(bias.begin() + first, bias.begin() + first + n);
  return out;
}


// "q4 (head q8), 2 of 15 matrices f16": the matrices' formats, the most common first.
inline std::string describe_format(const std::vector<TensorUse>& uses) {
  std::map<std::string, int> body;
  std::string head;
  int matrices = 0;
  for (const auto& u : uses) {
    if (u.role == Role::kMatrix) {
      ++body[u.format];
      ++matrices;
    } else if (u.role == Role::kHead) {
      head = u.format;
    }
  }
  if (body.empty()) return head;
  std::string main = body.begin()->first;
  for (const auto& [f, n] : body)
    if (n > body[main] || (n == body[main] && f[0] == 'q')) main = f;
  std::string out = main;
  if (!head.empty() && head != main) out += " (head " + head + ")";
  for (const auto& [f, n] : body)
    if (f != main) out += fmt::format(", {} of {} matrices {}", n, matrices, f);
  return out;
}


}  // namespace recur::model
