// Model::load and Model::from_weights: the loader (shapes checked against the architecture's
// table, every value hashed into the fingerprint). The weight sources and the tables of tensors
// are in weights.cpp, random weights in random_weights.cpp.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "kernels/quant.h"
#include "model/fla.h"
#include "model/model_impl.h"
#include "util/file.h"
#include "recur/error.h"
#include "util/hash.h"

namespace recur {
namespace {

namespace fs = std::filesystem;
using model::feature_map_tensors;
using model::layer_prefix;
using Shape = std::vector<std::int64_t>;

using Role = TensorUse::Role;

const char* float_format(DType dtype) {
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
  // byte.
  kernels::PackedMatrix rows(int first, int n) const {
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
// every value into the fingerprint, and remembering which names were used. The architecture's
// table (model_tensor_shapes) is the one list of tensors: the loader takes exactly its names
// with its shapes, so that loading, make-model and the random weights cannot drift apart.
class Loader {
 public:
  Loader(const WeightSource& src, const ModelConfig& config)
      : src_(src), tied_maps_(config.tie_feature_map_qk), quantization_(config.quantization),
        quantization_head_(config.quantization_head) {
    // The fingerprint covers what shapes the numbers; where generation stops does not.
    ModelConfig numeric = config;
    numeric.eos_token_ids.clear();
    const std::string cfg = numeric.to_json();
    hash_.update(cfg.data(), cfg.size());
    for (auto& [name, shape] : model_tensor_shapes(config)) table_.emplace(name, shape);
  }

  /// Every tensor of the table was taken: a loader that skipped one is a bug in recur.
  void check_table() const {
    for (const auto& [name, shape] : table_)
      if (!taken_.count(name))
        throw std::logic_error(fmt::format("[Model] internal: the architecture's table lists "
                                           "'{}' {}, which the loader never read", name,
                                           shape_string(shape)));
  }

  std::vector<float> take(const std::string& name, const Shape& shape, const char* why) {
    return take_as(name, name, shape, why);
  }

  /// take() of `name`, hashed into the fingerprint as `canonical` (a tied tensor stored under
  /// either of two names is the same model).
  std::vector<float> take_as(const std::string& name, const std::string& canonical,
                             const Shape& shape, const char* why, Role role = Role::kOther) {
    claim(name, canonical, shape, why);
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
                           int k_in, Role role, const char* why) {
    const Shape shape{n_out, k_in};
    MatrixWeight w;
    w.n_out = n_out;
    w.k_in = k_in;
    if (!src_.has(name) || is_float_dtype(src_.dtype(name))) {
      w.values = take_as(name, canonical, shape, why, role);
      w.dtype = src_.dtype(name);
      return w;
    }
    claim(name, canonical, shape, why);
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
  bool tied_maps_ = false;
  std::map<std::string, Shape> table_;  // the architecture's tensors
  std::set<std::string> taken_;         // of those, the ones read
  detail::Hasher hash_;
  // NAME.weight's scales: NAME.weight_scale.
  static std::string scale_name(const std::string& name) { return name + "_scale"; }

  // The table check and the presence check that every take begins with.
  void claim(const std::string& name, const std::string& canonical, const Shape& shape,
             const char* why) {
    // One learned map serves q and k when they are tied; the table lists it under q's name.
    std::string listed = canonical;
    const std::string k_map = "attn.feature_map_k.", q_map = "attn.feature_map_q.";
    if (const auto at = listed.find(k_map); tied_maps_ && at != std::string::npos)
      listed.replace(at, k_map.size(), q_map);
    const auto entry = table_.find(listed);
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

model::Dense dense(Loader& L, const std::string& name, int n_out, int k_in, bool bias,
                   const char* why, Role role = Role::kMatrix) {
  model::Dense d;
  const std::string weight = name + ".weight";
  d.w = L.take_matrix(weight, weight, n_out, k_in, role, why).rows(0, n_out);
  if (bias) d.bias = L.take(name + ".bias", {n_out}, why);
  return d;
}

// One Linear(d_key, d_key) of a learned feature map, taken as dense() takes it: weight, then bias.
FeatureMapLinear map_linear(Loader& L, const std::string& name, int d_key, bool bias,
                            const char* why) {
  FeatureMapLinear l;
  l.weight = L.take(name + ".weight", {d_key, d_key}, why);
  l.storage = L.dtype(name + ".weight");
  if (bias) l.bias = L.take(name + ".bias", {d_key}, why);
  return l;
}

model::Norm norm(Loader& L, const std::string& name, int dim, float eps, bool layer_norm, bool affine,
          const char* why) {
  model::Norm n;
  n.dim = dim;
  n.eps = eps;
  n.layer_norm = layer_norm;
  if (affine) n.weight = L.take(name + ".weight", {dim}, why);
  if (layer_norm) n.bias = L.take(name + ".bias", {dim}, why);
  return n;
}



// Rows [first, first + n) of a fused weight as their own matrix (MatrixWeight::rows).
model::Dense rows_of(const MatrixWeight& w, const std::vector<float>& bias, int first, int n) {
  model::Dense out;
  out.w = w.rows(first, n);
  if (!bias.empty())
    out.bias.assign(bias.begin() + first, bias.begin() + first + n);
  return out;
}

// Based: each layer's mixer from the table's names (docs/based.md). The fused projections of
// the checkpoint (BaseConv's in_proj, the window's Wqkv, the MLP's fc1) are split into their
// parts, which the forward pass uses one by one.
void load_based(Loader& L, const WeightSource& weights, const ModelConfig& c, Model::Impl& impl,
                std::vector<float>& embeddings) {
  const int d = c.hidden_size, Hm = c.intermediate_size;
  const int di = c.conv_expand * d / 2;
  const auto eps = static_cast<float>(c.norm_eps);
  const Shape emb_shape{c.embedding_rows, d};
  // The head is tied to the embedding; a checkpoint holds it under either name, or both.
  const std::string emb = "transformer.embeddings.word_embeddings.weight", head = "lm_head.weight";
  const MatrixWeight table =
      weights.has(emb)
          ? L.take_matrix(emb, emb, c.embedding_rows, d, Role::kHead, "vocab_size padded, n_embd")
          : L.take_matrix(head, emb, c.embedding_rows, d, Role::kHead,
                          "vocab_size padded, n_embd (the tied head)");
  if (weights.has(emb)) L.accept_tied(head, table, emb_shape);
  embeddings = table.dense_values();
  L.ignore("transformer.decay.decay");  // based-1b's fixed_decay buffer: no layer reads it
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("transformer.layers.{}.", i);
    Model::Impl::Layer layer;
    layer.mixer = c.mixers[std::size_t(i)];
    layer.attn_norm = norm(L, p + "norm1", d, eps, false, true, "n_embd");
    switch (layer.mixer) {
      case MixerKind::kGated:
      case MixerKind::kAttention:
        break;  // fla's kinds, never in a Based model
      case MixerKind::kShortConv: {
        const std::string in = p + "mixer.in_proj.weight";
        const auto w = L.take_matrix(in, in, 2 * di, d, Role::kMatrix, "expand_proj * n_embd, n_embd");
        std::vector<float> b;
        if (c.conv_bias) b = L.take(p + "mixer.in_proj.bias", {2 * di}, "expand_proj * n_embd");
        layer.in_u1 = rows_of(w, b, 0, di);
        layer.in_u2 = rows_of(w, b, di, di);
        const auto taps = L.take(p + "mixer.conv.conv.weight", {di, 1, c.conv_kernel},
                                 "expand_proj * n_embd / 2, 1, kernel_size");
        layer.conv = std::make_unique<ShortConvolution>(
            Eigen::Map<const RowMatrix>(taps.data(), di, c.conv_kernel));
        layer.out_proj = dense(L, p + "mixer.out_proj", d, di, c.conv_bias, "n_embd, expand_proj * n_embd / 2");
        break;
      }
      case MixerKind::kLinearAttention: {
        layer.q = dense(L, p + "mixer.proj_q", c.key_dim, d, false, "num_heads * feature_dim, n_embd");
        layer.k = dense(L, p + "mixer.proj_k", c.key_dim, d, false, "num_heads * feature_dim, n_embd");
        layer.v = dense(L, p + "mixer.proj_v", d, d, false, "n_embd");
        layer.out_proj = dense(L, p + "mixer.out_proj", d, d, false, "n_embd");
        LinearAttentionConfig ac;
        ac.n_heads = c.la_heads;
        ac.d_key = c.la_feature_dim;
        ac.d_value = c.head_v_dim;
        ac.feature_map = FeatureMapKind::kTaylor;
        ac.normalized = true;
        ac.scale = 1.0f;
        ac.eps = static_cast<float>(c.attn_eps);
        layer.attention = std::make_unique<LinearAttention>(ac);
        break;
      }
      case MixerKind::kWindowAttention: {
        const std::string qkv = p + "mixer.Wqkv.weight";
        const auto w = L.take_matrix(qkv, qkv, 3 * d, d, Role::kMatrix, "3 n_embd, n_embd");
        layer.q = rows_of(w, {}, 0, d);
        layer.k = rows_of(w, {}, d, d);
        layer.v = rows_of(w, {}, 2 * d, d);
        layer.out_proj = dense(L, p + "mixer.out_proj", d, d, false, "n_embd");
        WindowAttentionConfig wc;
        wc.n_heads = c.window_heads;
        wc.d_head = d / c.window_heads;
        wc.window = c.window_size / 2;  // flash-attn's window (window_size // 2, 0)
        wc.rope_theta = static_cast<float>(c.rope_theta);
        layer.window = std::make_unique<WindowAttention>(wc);
        break;
      }
    }
    layer.mlp_norm = norm(L, p + "norm2", d, eps, false, true, "n_embd");
    // GatedMlp: fc1's first half is the value, its second half the gate: fc2(y * silu(gate)).
    const std::string fc1_name = p + "mlp.fc1.weight";
    const auto fc1 = L.take_matrix(fc1_name, fc1_name, 2 * Hm, d, Role::kMatrix, "2 n_inner, n_embd");
    layer.up = rows_of(fc1, {}, 0, Hm);
    layer.gate = rows_of(fc1, {}, Hm, Hm);
    layer.down = dense(L, p + "mlp.fc2", d, Hm, false, "n_embd, n_inner");
    impl.layers.push_back(std::move(layer));
  }
  impl.has_final_norm = true;
  impl.final_norm = norm(L, "transformer.ln_f", d, eps, false, true, "n_embd");
  // Only the vocabulary's rows: the padding rows are never a token.
  impl.lm_head.w = table.rows(0, c.vocab_size);
}

// "q4 (head q8), 2 of 15 matrices f16": the matrices' formats, the most common first.
std::string describe_format(const std::vector<TensorUse>& uses) {
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

}  // namespace

using model::Dense;


// ---------------------------------------------------------------------------------------------
// Model

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;


std::shared_ptr<const Model> Model::load(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw FormatError(fmt::format("[Model::load] {} is not a directory", dir));
  const ModelConfig config = ModelConfig::from_file((fs::path(dir) / "config.json").string());
  return from_weights(config, *open_weights(dir));
}

std::shared_ptr<const Model> Model::from_weights(const ModelConfig& config_in,
                                                 const WeightSource& weights) {
  ModelConfig c = config_in;
  c.resolve(weights.describe());
  std::shared_ptr<Model> m(new Model());
  m->config_ = c;
  m->source_ = weights.describe();
  Impl& impl = *m->impl_;
  Loader L(weights, c);
  const auto finish = [&] {
    L.check_table();
    L.reject_unused();
    m->fingerprint_ = L.fingerprint();
    m->parameters_ = L.parameters();
    impl.tensors = L.uses();
    m->weight_format_ = describe_format(impl.tensors);
  };
  const int d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const auto eps = static_cast<float>(c.norm_eps);
  const bool fla = c.architecture == Architecture::kLinearAttn;

  if (c.architecture == Architecture::kBased) {
    try {
      load_based(L, weights, c, impl, impl.embeddings);
    } catch (const ArgumentError& e) {  // a bad model is a FormatError, whatever layer finds it
      throw FormatError(fmt::format("[Model] {}: {}", weights.describe(), e.what()));
    }
    finish();
    return m;
  }
  if (c.gated_family()) {
    fla::Reader r;
    r.take = [&](const std::string& name, const Shape& shape, const char* why) {
      return L.take(name, shape, why);
    };
    r.dense = [&](const std::string& name, int n_out, int k_in, bool bias, const char* why) {
      return dense(L, name, n_out, k_in, bias, why);
    };
    r.dtype = [&](const std::string& name) { return L.dtype(name); };
    r.ignore = [&](const std::string& name) { L.ignore(name); };
    r.has = [&](const std::string& name) { return weights.has(name); };
    r.accept_tied = [&](const std::string& name, const std::vector<float>& ref, const Shape& shape) {
      L.accept_tied(name, ref, shape);
    };
    r.head = [&](const std::string& name, int n_out, int k_in, const char* why) {
      return dense(L, name, n_out, k_in, false, why, Role::kHead);
    };
    r.tied_table = [&](const std::string& name, const std::string& tied_name, int n_out, int k_in,
                       const char* why, std::vector<float>& values) {
      const MatrixWeight table = L.take_matrix(name, name, n_out, k_in, Role::kHead, why);
      values = table.dense_values();
      L.accept_tied(tied_name, table, {n_out, k_in});
      model::Dense head;
      head.w = table.rows(0, n_out);
      return head;
    };
    try {
      fla::load(c, r, impl);
    } catch (const ArgumentError& e) {  // a bad model is a FormatError, whatever layer finds it
      throw FormatError(fmt::format("[Model] {}: {}", weights.describe(), e.what()));
    }
    finish();
    return m;
  }
  // A tied embedding is the head's matrix too (quantized with it); an untied one is only
  // gathered, a row per token, and stays as stored.
  MatrixWeight table;
  if (c.tie_word_embeddings) {
    table = L.take_matrix("model.embeddings.weight", "model.embeddings.weight", V, d, Role::kHead,
                          "vocab_size, hidden_size");
    impl.embeddings = table.dense_values();
  } else {
    impl.embeddings = L.take("model.embeddings.weight", {V, d}, "vocab_size, hidden_size");
  }
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layer_prefix(i);
    Impl::Layer layer;
    const int kd = c.key_dim / c.kv_groups, vd = c.value_dim / c.kv_groups;
    if (fla) {
      layer.attn_norm = norm(L, p + "attn_norm", d, eps, false, true, "hidden_size");
      layer.q = dense(L, p + "attn.q_proj", c.key_dim, d, false, "key_dim, hidden_size");
      layer.k = dense(L, p + "attn.k_proj", kd, d, false, "key_dim / kv groups, hidden_size");
      layer.v = dense(L, p + "attn.v_proj", vd, d, false, "value_dim / kv groups, hidden_size");
      layer.o = dense(L, p + "attn.o_proj", d, c.value_dim, false, "hidden_size, value_dim");
      layer.mlp_norm = norm(L, p + "mlp_norm", d, eps, false, true, "hidden_size");
      layer.gate = dense(L, p + "mlp.gate_proj", I, d, false, "intermediate_size, hidden_size");
      layer.up = dense(L, p + "mlp.up_proj", I, d, false, "intermediate_size, hidden_size");
      layer.down = dense(L, p + "mlp.down_proj", d, I, false, "hidden_size, intermediate_size");
      layer.has_head_norm = true;  // the library's output_norm is always 'rmsnorm' here
      layer.head_norm = norm(L, p + "attn.norm", c.head_v_dim, eps, false, c.elementwise_affine,
                             "head_v_dim");
    } else {
      layer.q = dense(L, p + "attn.q_proj", d, d, true, "hidden_size");
      layer.k = dense(L, p + "attn.k_proj", d, d, true, "hidden_size");
      layer.v = dense(L, p + "attn.v_proj", d, d, true, "hidden_size");
      layer.o = dense(L, p + "attn.o_proj", d, d, true, "hidden_size");
      layer.attn_norm = norm(L, p + "attn_norm", d, eps, true, true, "hidden_size");
      layer.fc1 = dense(L, p + "mlp.fc1", I, d, true, "intermediate_size, hidden_size");
      layer.fc2 = dense(L, p + "mlp.fc2", d, I, true, "hidden_size, intermediate_size");
      layer.mlp_norm = norm(L, p + "mlp_norm", d, eps, true, true, "hidden_size");
      layer.gelu = c.hidden_act == "gelu";
    }
    // Feature maps for q and k (tied: one set of parameters under either name).
    const int dk = c.head_k_dim;
    const auto make_map = [&](const std::string& prefix) -> std::shared_ptr<const FeatureMap> {
      const char* why = "head_k_dim";
      switch (c.feature_map) {
        case ModelFeatureMap::kElu: return make_feature_map(FeatureMapKind::kEluPlusOne);
        case ModelFeatureMap::kRelu: return make_feature_map(FeatureMapKind::kRelu);
        case ModelFeatureMap::kIdentity: return make_feature_map(FeatureMapKind::kIdentity);
        case ModelFeatureMap::kHedgehog:
          return make_hedgehog_map(dk, map_linear(L, prefix + "layer", dk, true, why));
        case ModelFeatureMap::kT2R:
          return make_t2r_map(dk, map_linear(L, prefix + "layer", dk, false, why));
        case ModelFeatureMap::kElementwiseProduct: {
          FeatureMapLinear l1 = map_linear(L, prefix + "layer1", dk, true, why);
          FeatureMapLinear l2 = map_linear(L, prefix + "layer2", dk, true, why);
          return make_elementwise_product_map(dk, std::move(l1), std::move(l2));
        }
        case ModelFeatureMap::kDpfp: return make_dpfp_map(dk);
      }
      throw std::logic_error("[Model] internal: unknown feature map");
    };
    // norm_q / norm_k: the map, then x / (sum(x) + 1e-4).
    const auto normalized = [](std::shared_ptr<const FeatureMap> f, bool normalize_sum) {
      return normalize_sum ? make_sum_normalized(std::move(f)) : f;
    };
    const std::string fq = p + "attn.feature_map_q.", fk = p + "attn.feature_map_k.";
    const bool learned = c.feature_map == ModelFeatureMap::kHedgehog ||
                         c.feature_map == ModelFeatureMap::kT2R ||
                         c.feature_map == ModelFeatureMap::kElementwiseProduct;
    if (c.tie_feature_map_qk && learned) {
      // One module serves both; checkpoints store it under the q name, the k name, or both.
      std::vector<std::pair<std::string, Shape>> names;
      feature_map_tensors(c, fq, names);
      const bool under_q = weights.has(names.front().first);
      const std::shared_ptr<const FeatureMap> tied = make_map(under_q ? fq : fk);
      layer.phi_q = normalized(tied, c.norm_q);
      layer.phi_k = normalized(tied, c.norm_k);
      if (under_q) {
        for (const auto& [name, shape] : names) {
          const std::string other = fk + name.substr(fq.size());
          if (weights.has(other)) L.accept_tied(other, weights.read(name), shape);
        }
      }
    } else {
      layer.phi_q = normalized(make_map(fq), c.norm_q);
      layer.phi_k = normalized(make_map(fk), c.norm_k);
    }
    LinearAttentionConfig ac;
    ac.n_heads = c.num_heads;
    ac.d_key = c.d_feature;  // the model applies the feature maps itself: q and k may differ
    ac.d_value = c.head_v_dim;
    ac.feature_map = FeatureMapKind::kIdentity;
    ac.normalized = c.norm_feature_map;
    ac.scale = c.attn_scale;
    ac.eps = static_cast<float>(c.attn_eps);
    try {
      layer.attention = std::make_unique<LinearAttention>(ac);
    } catch (const ArgumentError& e) {  // a bad model is a FormatError, whatever layer finds it
      throw FormatError(fmt::format("[Model] {}: layer {}: {}", weights.describe(), i, e.what()));
    }
    impl.layers.push_back(std::move(layer));
  }
  if (fla) {
    impl.has_final_norm = true;
    impl.final_norm = norm(L, "model.norm", d, eps, false, true, "hidden_size");
  }
  if (c.tie_word_embeddings) {
    impl.lm_head.w = table.rows(0, V);
    L.accept_tied("lm_head.weight", table, {V, d});
  } else {
    impl.lm_head = dense(L, "lm_head", V, d, false, "vocab_size, hidden_size", Role::kHead);
  }
  finish();
  return m;
}

ModelConfig Model::builtin_config() {
  ModelConfig c;
  c.architecture = Architecture::kLinearAttn;
  c.vocab_size = 256;
  c.hidden_size = 256;
  c.num_hidden_layers = 4;
  c.num_heads = 4;
  c.feature_map = ModelFeatureMap::kElu;
  c.norm_feature_map = true;
  c.intermediate_size = 0;
  c.resolve("built-in model");
  return c;
}

std::shared_ptr<const Model> Model::builtin(std::uint64_t seed) {
  const ModelConfig c = builtin_config();
  return from_weights(c, RandomWeights(c, seed));
}

std::size_t Model::weight_bytes_per_token() const {
  std::size_t bytes = static_cast<std::size_t>(config_.hidden_size) * sizeof(float);
  const auto dense_bytes = [](const model::Dense& d) {
    return d.w.bytes() + d.bias.size() * sizeof(float);
  };
  for (const auto& l : impl_->layers) {
    for (const auto* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.fc1, &l.fc2,
                          &l.in_u1, &l.in_u2, &l.out_proj, &l.g_proj, &l.gk0, &l.gk1})
      bytes += dense_bytes(*d);
    if (l.phi_q) bytes += l.phi_q->parameter_bytes();
    if (l.phi_k && !config_.tie_feature_map_qk)  // tied maps share one set of matrices
      bytes += l.phi_k->parameter_bytes();
  }
  bytes += dense_bytes(impl_->lm_head);
  return bytes;
}

}  // namespace recur
