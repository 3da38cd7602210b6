#include "recur/quantize.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "kernels/quant.h"
#include "model/family.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "recur/safetensors.h"
#include "util/file.h"

namespace recur {
namespace {

constexpr const char* kCall = "write_quantized_model";

// One tensor's bytes as the file stores them.
struct Stored {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

// Float values back into their stored dtype: exact, since they were read from it.
std::vector<std::uint8_t> float_bytes(const std::vector<float>& v, DType dtype) {
  std::vector<std::uint8_t> out(v.size() * std::size_t(dtype_size(dtype)));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t h = dtype == DType::kF16 ? float_to_f16(v[i]) : float_to_bf16(v[i]);
    out[2 * i] = static_cast<std::uint8_t>(h & 0xff);
    out[2 * i + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  return out;
}

}  // namespace

QuantizeReport write_quantized_model(const std::string& dir, const ModelConfig& config,
                                     const WeightSource& stored, const QuantizeOptions& options,
                                     const QuantizeProgress& progress) {
  // The names the loader reads (as stored, or without a wrapper's prefix), which are also the
  // names written.
  std::unique_ptr<WeightSource> view;
  const WeightSource& weights = model::as_named_by_table(config, stored, view);
  const kernels::QuantType body = kernels::parse_quant(options.format, kCall);
  const kernels::QuantType head =
      options.head.empty() ? body : kernels::parse_quant(options.head, kCall);
  if (!config.quantization.empty())
    throw ArgumentError(fmt::format(
        "[{}] {} is already quantized ({}): quantize the model it was made from", kCall,
        weights.describe(), config.quantization));
  // Loading checks every tensor against the configuration, and says which tensors are the
  // forward pass's matrices, under which names.
  const auto model = Model::from_weights(config, weights);
  const auto& uses = model::impl_of(*model).tensors;

  QuantizeReport report;
  std::vector<Stored> out;
  out.reserve(2 * uses.size());
  int done = 0;
  for (const auto& u : uses) {
    const std::vector<float> values = weights.read(u.name);
    const bool matrix = u.role != TensorUse::Role::kOther;
    if (matrix && u.shape[1] % kernels::kQuantBlock == 0) {
      const int n_out = int(u.shape[0]), k_in = int(u.shape[1]);
      const auto type = u.role == TensorUse::Role::kHead ? head : body;
      kernels::QuantizedRows q = kernels::quantize_rows(values.data(), n_out, k_in, type);
      const std::int64_t code_cols = type == kernels::QuantType::kQ8 ? k_in : k_in / 2;
      out.push_back({u.canonical, type == kernels::QuantType::kQ8 ? DType::kI8 : DType::kU8,
                     {n_out, code_cols}, std::move(q.codes)});
      std::vector<std::uint8_t> scales(2 * q.scales.size());
      for (std::size_t i = 0; i < q.scales.size(); ++i) {  // little-endian, as the format says
        scales[2 * i] = static_cast<std::uint8_t>(q.scales[i] & 0xff);
        scales[2 * i + 1] = static_cast<std::uint8_t>(q.scales[i] >> 8);
      }
      out.push_back({u.canonical + "_scale", DType::kF16,
                     {n_out, k_in / kernels::kQuantBlock}, std::move(scales)});
      ++report.quantized;
    } else {
      DType dtype = weights.dtype(u.name);
      if (!is_float_dtype(dtype)) dtype = DType::kF32;
      out.push_back({u.canonical, dtype, u.shape, float_bytes(values, dtype)});
      if (matrix) ++report.kept;
    }
    ++report.tensors;
    if (progress) progress(++done, int(uses.size()), u.canonical);
  }

  ModelConfig written = model->config();
  written.quantization = kernels::quant_name(body);
  written.quantization_head = kernels::quant_name(head);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("[{}] cannot create {}: {}", kCall, dir, ec.message()));
  std::vector<StoredTensorData> tensors;
  for (const auto& t : out) {
    tensors.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
    report.bytes += t.bytes.size();
  }
  write_safetensors_stored((fs::path(dir) / "model.safetensors").string(), tensors,
                           {{"format", "pt"},
                            {"quantization", written.quantization},
                            {"quantization_head", written.quantization_head},
                            {"block_size", std::to_string(kernels::kQuantBlock)},
                            {"quantized_from", weights.describe()}});
  detail::write_file_atomically((fs::path(dir) / "config.json").string(), written.to_json(), kCall);
  // What a reader will see: the same load, from the files just written.
  report.weight_format = Model::load(dir)->weight_format();
  return report;
}

}  // namespace recur
