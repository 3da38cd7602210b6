// RandomWeights, the seeded weights of any configuration (tests, benchmarks, make-model), and
// write_random_model, which stores them as a model directory.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "model/random_weights.h"

#include "model/family.h"
#include "model/model_impl.h"
#include "recur/error.h"
#include "util/file.h"
#include "util/hash.h"

namespace recur {
namespace {

namespace fs = std::filesystem;

// splitmix64: the generator behind RandomWeights, the same on every platform.
std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t name_seed(const std::string& name, std::uint64_t seed) {
  detail::Hasher h;
  h.update_value(seed);
  h.update(name.data(), name.size());
  return h.digest();
}

}  // namespace

RandomWeights::RandomWeights(const ModelConfig& config_in, std::uint64_t seed, DType dtype)
    : seed_(seed), dtype_(dtype) {
  ModelConfig config = config_in;
  config.resolve("RandomWeights");
  // How each tensor is filled is the family's word (TensorSpec::init), not a rule on names.
  for (const auto& t : model::tensor_table(model::family_of(config), config)) {
    Spec s;
    s.shape = t.shape;
    const auto fan = [&](std::size_t axis) {
      return 1.0 / std::sqrt(static_cast<double>(t.shape.at(axis)));
    };
    switch (t.init) {
      case model::Init::kMatrix: s.init = Spec::Init::kNormal; s.std = fan(1); break;
      case model::Init::kEmbedding:
      case model::Init::kUnit: s.init = Spec::Init::kNormal; s.std = 1.0; break;
      case model::Init::kNorm: s.init = Spec::Init::kNearOne; s.std = 0.1; break;
      case model::Init::kBias: s.init = Spec::Init::kSmall; s.std = 0.1; break;
      case model::Init::kConv: s.init = Spec::Init::kNormal; s.std = fan(2); break;
      case model::Init::kIdentity:
        s.init = Spec::Init::kIdentityNear;
        s.std = 0.3 / std::sqrt(static_cast<double>(t.shape.at(1)));
        break;
    }
    specs_.emplace_back(t.name, std::move(s));
  }
}

bool RandomWeights::has(const std::string& name) const {
  for (const auto& [n, s] : specs_)
    if (n == name) return true;
  return false;
}

std::vector<std::int64_t> RandomWeights::shape(const std::string& name) const {
  for (const auto& [n, s] : specs_)
    if (n == name) return s.shape;
  throw FormatError(fmt::format("[RandomWeights] no tensor '{}'", name));
}

std::vector<float> RandomWeights::read(const std::string& name) const {
  for (const auto& [n, s] : specs_) {
    if (n != name) continue;
    std::size_t count = 1;
    for (auto d : s.shape) count *= static_cast<std::size_t>(d);
    std::vector<float> v(count);
    std::uint64_t state = name_seed(name, seed_);
    for (std::size_t i = 0; i < count; i += 2) {
      // Box-Muller on two uniforms in (0, 1].
      const double u1 = (static_cast<double>(splitmix(state) >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double z[2] = {r * std::cos(2 * M_PI * u2), r * std::sin(2 * M_PI * u2)};
      for (std::size_t j = 0; j < 2 && i + j < count; ++j) {
        double x = s.std * z[j];
        if (s.init == Spec::Init::kNearOne) x += 1.0;
        if (s.init == Spec::Init::kIdentityNear) {
          const std::size_t cols = static_cast<std::size_t>(s.shape[1]);
          if ((i + j) / cols == (i + j) % cols) x += 1.0;
        }
        v[i + j] = static_cast<float>(x);
      }
    }
    if (dtype_ == DType::kBF16)
      for (auto& x : v) x = bf16_to_float(float_to_bf16(x));
    if (dtype_ == DType::kF16)
      for (auto& x : v) x = f16_to_float(float_to_f16(x));
    return v;
  }
  throw FormatError(fmt::format("[RandomWeights] no tensor '{}'", name));
}

DType RandomWeights::dtype(const std::string& name) const {
  (void)name;
  return dtype_;
}

std::vector<std::string> RandomWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [n, s] : specs_) out.push_back(n);
  return out;
}

std::string RandomWeights::describe() const {
  return fmt::format("random {} weights (seed {})", dtype_name(dtype_), seed_);
}

int write_random_model(const std::string& dir, const ModelConfig& config, std::uint64_t seed,
                        DType dtype, int shards) {
  constexpr const char* call = "write_random_model";
  if (shards < 1)
    throw ArgumentError(fmt::format("[{}] shards is {}, expected at least 1", call, shards));
  ModelConfig c = config;
  c.resolve(call);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("[{}] cannot create {}: {}", call, dir, ec.message()));
  const RandomWeights weights(c, seed);
  const auto shapes = model_tensor_shapes(c);
  const int n_files = std::min<int>(shards, static_cast<int>(shapes.size()));
  std::string index = "{\n  \"metadata\": {},\n  \"weight_map\": {";
  for (int f = 0; f < n_files; ++f) {
    const std::size_t b = shapes.size() * static_cast<std::size_t>(f) / static_cast<std::size_t>(n_files);
    const std::size_t e = shapes.size() * static_cast<std::size_t>(f + 1) / static_cast<std::size_t>(n_files);
    std::vector<std::vector<float>> values;
    std::vector<TensorData> tensors;
    for (std::size_t i = b; i < e; ++i) values.push_back(weights.read(shapes[i].first));
    const std::string file = n_files == 1 ? "model.safetensors"
                                          : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, n_files);
    for (std::size_t i = b; i < e; ++i) {
      tensors.push_back({shapes[i].first, shapes[i].second, values[i - b].data()});
      index += fmt::format("{}\n    \"{}\": \"{}\"", i == 0 ? "" : ",", shapes[i].first, file);
    }
    write_safetensors((fs::path(dir) / file).string(), tensors, dtype,
                      {{"format", "pt"}, {"generator", fmt::format("recur make-model, seed {}", seed)}});
  }
  index += "\n  }\n}\n";
  if (n_files > 1)
    detail::write_file_atomically((fs::path(dir) / "model.safetensors.index.json").string(), index, call);
  detail::write_file_atomically((fs::path(dir) / "config.json").string(), c.to_json(), call);
  return n_files;
}

}  // namespace recur
