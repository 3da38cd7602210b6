// recur make-model, recur convert, recur quantize: the commands that write models.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <vector>

#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "commands.h"
#include "model/family.h"
#include "text_model.h"
#include "recur/error.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "util/file.h"
#include "util/json.h"

namespace recur::cli {

namespace {

// The files of a model recur writes and reads in a directory.
bool is_model_file(const std::string& name) {
  if (name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json")
    return true;
  return name.rfind("model-", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

// make-model writes into an empty or new directory; one that holds a model is replaced only
// with --force, and then every model file in it goes first, so that no old shard or index can
// be paired with the new config.
void prepare_model_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status))
    throw ArgumentError(fmt::format("{} exists and is not a directory", printable(dir)));
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_model_file(e.path().filename().string())) found.push_back(e.path());
  if (found.empty()) return;
  if (!force)
    throw ArgumentError(fmt::format("{} already holds a model ({} and {} more files); pass --force "
                                    "to replace it", printable(dir),
                                    printable(found.front().filename().string()), found.size() - 1));
  for (const auto& f : found) {
    fs::remove(f, ec);
    if (ec) throw Error(fmt::format("cannot remove {}: {}", printable(f.string()), ec.message()));
  }
}

// make-model's options that families declare, each once, with the --arch values it serves.
struct FamilyOptions {
  std::vector<std::string> archs;  // every family's --arch values, in the registry's order
  std::map<std::string, model::MakeOption> options;
  std::map<std::string, std::vector<std::string>> served_by;
  // A value option's default for each --arch it serves: families may differ (--full-attention-
  // interval is 4 for qwen35, 2 for lfm2).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> defaults;
};

bool one_default(const std::vector<std::pair<std::string, std::string>>& defaults) {
  for (const auto& d : defaults)
    if (d.second != defaults.front().second) return false;
  return true;
}

FamilyOptions family_options() {
  FamilyOptions fo;
  for (const model::Family* f : model::families()) {
    const auto names = f->make_model_archs();
    fo.archs.insert(fo.archs.end(), names.begin(), names.end());
    for (const auto& o : f->make_model_options()) {
      fo.options.emplace(o.name, o);
      auto& list = fo.served_by[o.name];
      const auto& served = o.archs.empty() ? names : o.archs;
      list.insert(list.end(), served.begin(), served.end());
      if (o.flag) continue;
      for (const auto& arch : served) fo.defaults[o.name].emplace_back(arch, o.fallback ? o.fallback : "");
    }
  }
  return fo;
}

void declare_make_model_options(Args& args, const FamilyOptions& fo) {
  args.option("arch", "linear_attn", fmt::format("{}", fmt::join(fo.archs, ", ")))
      .option("config", "", "take the configuration from this config.json")
      .option("vocab", "256", "vocabulary size")
      .option("hidden", "64", "hidden size (d_model)")
      .option("layers", "2", "layers")
      .option("heads", "4", "attention heads")
      .option("intermediate", "0", "MLP width, 0: the model type's default")
      .option("dtype", "f32", "stored dtype: f32, bf16 or f16")
      .option("shards", "1", "files to split the weights over (more than 1 writes an index)")
      .option("seed", "1", "seed of the random weights")
      .flag("tie-embeddings", "the LM head reuses the embedding matrix");
  for (const auto& [name, o] : fo.options) {
    const std::string help = fmt::format("{}: {}", fmt::join(fo.served_by.at(name), ", "), o.help);
    if (o.flag) {
      args.flag(name, help);
      continue;
    }
    const auto& defaults = fo.defaults.at(name);
    if (one_default(defaults)) {
      args.option(name, defaults.front().second, help);
      continue;
    }
    // Each --arch's own default, which run_make_model sets once --arch is known.
    std::vector<std::string> each;
    for (const auto& [arch, value] : defaults) each.push_back(fmt::format("{} for {}", value, arch));
    args.option(name, "", fmt::format("{} (default {})", help, fmt::join(each, ", ")));
  }
  args.flag("builtin", "write the random-weight test model (--random-model: its configuration and seed)")
      .flag("force", "replace a model already in DIR (its config.json, safetensors and index go "
                     "first; other files stay)")
      .positionals(1, "DIR")
      .footer("DIR is created if needed. A DIR that already holds a model is refused unless\n"
              "--force. Files are written beside their final names and renamed into place.");
}

// The shape comes from one place: --builtin, --config, or the shape options of --arch's family.
// Returns that family; ArgumentError for an option that does not apply.
const model::Family& check_shape_options(const Args& args, const FamilyOptions& fo) {
  std::vector<std::string> shape_options = {"arch", "vocab", "hidden", "layers", "heads",
                                            "intermediate", "tie-embeddings", "seed"};
  for (const auto& [name, o] : fo.options) shape_options.push_back(name);
  for (const auto& o : shape_options) {
    if (args.flag_set("builtin") && args.given(o))
      throw ArgumentError(fmt::format("--builtin writes the built-in model as it is: --{} does not apply", o));
    if (args.given("config") && args.given(o) && o != "seed")
      throw ArgumentError(fmt::format("--config gives the shape: --{} does not apply", o));
  }
  if (args.flag_set("builtin") && args.given("config"))
    throw ArgumentError("give at most one of --builtin and --config");
  const std::string arch = args.str("arch");
  const model::Family* family = model::family_for_arch(arch);
  if (!family)
    throw ArgumentError(fmt::format("--arch is '{}', expected {}", printable(arch),
                                    fmt::join(fo.archs, ", ")));
  // An option of another family does not apply to this one.
  for (const auto& [name, o] : fo.options) {
    const auto& served = fo.served_by.at(name);
    if (args.given(name) && std::find(served.begin(), served.end(), arch) == served.end())
      throw ArgumentError(fmt::format("--{} does not apply to --arch {}: it applies to --arch {} "
                                      "only", name, arch, fmt::join(served, ", ")));
  }
  return *family;
}

// make-model's options as a family reads them.
class ArgsMakeOptions final : public model::MakeOptions {
 public:
  explicit ArgsMakeOptions(const Args& a) : a_(a) {}
  bool given(const char* name) const override { return a_.given(name); }
  bool flag(const char* name) const override { return a_.flag_set(name); }
  std::int64_t integer(const char* name, std::int64_t min, std::int64_t max) const override {
    return a_.integer(name, min, max);
  }
  double real(const char* name, double min, double max) const override {
    return a_.real(name, min, max);
  }
  std::string str(const char* name) const override { return a_.str(name); }

 private:
  const Args& a_;
};

// The configuration to write: the built-in model's, --config's, or the one the family writes
// from the options (its reader then checks it as any other).
ModelConfig make_model_config(const Args& args, const model::Family& family) {
  if (args.flag_set("builtin")) return Model::builtin_config();
  if (args.given("config"))
    return ModelConfig::from_json(read_input(args.str("config"), "--config", 16u << 20), args.str("config"));
  return ModelConfig::from_json(family.make_model_config(args.str("arch"), ArgsMakeOptions(args)),
                                "make-model options");
}

}  // namespace

int run_make_model(int argc, char** argv) {
  Args args("make-model",
            "Writes a model with random weights (config.json + model.safetensors, or shards with\n"
            "model.safetensors.index.json) in the layout `recur generate -m DIR` reads. For tests\n"
            "and demos: the weights are random, so is the text.");
  const FamilyOptions fo = family_options();
  declare_make_model_options(args, fo);
  if (!args.parse(argc, argv, 2)) return 0;
  if (args.positional().empty()) throw ArgumentError("give the directory to write: recur make-model DIR");
  const std::string dir = args.positional()[0];
  const model::Family& family = check_shape_options(args, fo);
  for (const auto& [name, defaults] : fo.defaults)
    for (const auto& [arch, value] : defaults)
      if (arch == args.str("arch")) args.default_to(name, value);
  std::uint64_t seed = static_cast<std::uint64_t>(args.integer("seed", 0, INT64_MAX));
  if (args.flag_set("builtin")) seed = kBuiltinSeed;
  const ModelConfig c = make_model_config(args, family);
  const DType dtype = parse_dtype(args.str("dtype"));
  const int shards = static_cast<int>(args.integer("shards", 1, 4096));
  std::int64_t params = 0;
  for (const auto& [name, shape] : model_tensor_shapes(c)) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    params += n;
  }
  // The values of one shard are held as float32 while it is written.
  check_memory(4.0 * double(params) / shards, "a model of " + std::to_string(params) + " parameters");
  prepare_model_dir(dir, args.flag_set("force"));
  const int files = write_random_model(dir, c, seed, dtype, shards);
  fmt::print("wrote {}: {}, {} layers, hidden {}, {} parameters as {}, "
             "{} weight file{}{}, seed {}\n",
             printable(dir), c.model_type(), c.num_hidden_layers, c.hidden_size,
             params, dtype_name(dtype), files,
             files > 1 ? "s" : "",
             files < shards ? fmt::format(" (--shards {}: the model has only {} tensors)", shards, files) : "",
             seed);
  flush_stdout();
  return 0;
}

int run_convert(int argc, char** argv) {
  Args args("convert",
            "Writes a model directory's weights as one model.safetensors, with its config.json\n"
            "(and tokenizer.json or rwkv_vocab_v20230424.txt, if there is one) beside it. For a\n"
            "checkpoint published as pytorch_model.bin: the archive is read by recur's restricted\n"
            "unpickler, which runs nothing, the model is loaded (every tensor checked against\n"
            "config.json), and the tensors it reads are written under the names it reads them by.");
  args.option("dtype", "", "stored dtype: f32, bf16 or f16 (default: the checkpoint's own, if it "
                           "has one for every tensor, else f32)")
      .flag("force", "replace a model already in OUT")
      .positionals(2, "DIR OUT");
  if (!args.parse(argc, argv, 2)) return 0;
  if (args.positional().size() != 2)
    throw ArgumentError("give the model directory and the directory to write: recur convert DIR OUT");
  namespace fs = std::filesystem;
  const std::string in = args.positional()[0], out = args.positional()[1];
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    throw ArgumentError("OUT is DIR itself: convert writes a new directory");
  // A directory's config.json is copied as it is; a bare .pth (no config.json) gets the
  // configuration its tensors give.
  const ModelFiles files = open_model_files(in);
  const std::string& config_text = files.config_text;
  const ModelConfig& config = files.config;
  if (!config.quantization.empty())
    throw ArgumentError(fmt::format("{} is quantized ({}): convert writes float tensors; convert "
                                    "the model it was quantized from", printable(in),
                                    config.quantization));
  const auto& weights = files.weights;
  // Loading checks every tensor against the configuration before anything is written.
  const auto model = Model::from_weights(config, *weights);
  std::vector<std::string> names = weights->names();
  std::vector<std::vector<float>> values;
  std::vector<TensorData> tensors;
  double total = 0;
  for (const auto& n : names) {
    double e = 1;
    for (auto d : weights->shape(n)) e *= double(d);
    total += e;
  }
  check_memory(4.0 * total, "the checkpoint's tensors as float32");
  DType dtype = weights->dtype(names.front());
  for (const auto& n : names)
    if (weights->dtype(n) != dtype) dtype = DType::kF32;
  if (args.given("dtype")) dtype = parse_dtype(args.str("dtype"));
  values.reserve(names.size());
  for (const auto& n : names) {
    values.push_back(weights->read(n));
    tensors.push_back({n, weights->shape(n), values.back().data()});
  }
  prepare_model_dir(out, args.flag_set("force"));
  fs::create_directories(out, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", printable(out), ec.message()));
  write_safetensors((fs::path(out) / "model.safetensors").string(), tensors, dtype,
                    {{"format", "pt"}, {"converted_from", weights->describe()}});
  detail::write_file_atomically((fs::path(out) / "config.json").string(), config_text, "recur convert");
  // The tokenizer beside the weights: tokenizer.json, or RWKV's world vocabulary.
  const fs::path in_dir = files.bare && fs::is_regular_file(in, ec) ? fs::path(in).parent_path()
                                                                    : fs::path(in);
  for (const char* name : {"tokenizer.json", "rwkv_vocab_v20230424.txt"})
    if (fs::is_regular_file(in_dir / name, ec))
      fs::copy_file(in_dir / name, fs::path(out) / name, fs::copy_options::overwrite_existing);
  fmt::print("wrote {}: {} tensors, {:.2f}M parameters as {}, from {}\n", printable(out),
             tensors.size(), double(model->parameters()) / 1e6, dtype_name(dtype),
             printable(weights->describe()));
  flush_stdout();
  return 0;
}



int run_quantize(int argc, char** argv) {
  Args args("quantize",
            "Writes a model with its matrices quantized in blocks of 32 (docs/quantization.md):\n"
            "q8 stores a byte per weight, q4 half a byte, each block with one half-precision\n"
            "scale. The projections, the MLP and the head (a tied embedding with it) are\n"
            "quantized; norms, biases, feature maps, convolutions, an untied embedding and\n"
            "matrices whose input width is not a multiple of 32 keep their precision. IN is any\n"
            "model directory recur reads (safetensors, or a pytorch_model.bin); the model is\n"
            "loaded and checked first, and OUT is loaded again once written.");
  args.option("type", "", "q8 or q4: the format of the projections and the MLP")
      .option("head", "", "q8 or q4: the head's format (the tied embedding's), default --type")
      .flag("builtin", "quantize the built-in model (then give OUT alone)")
      .flag("force", "replace a model already in OUT (its config.json, safetensors and index go "
                     "first; other files stay)")
      .positionals(2, "IN OUT")
      .footer("OUT gets config.json (with a quantization_config), model.safetensors and the\n"
              "tokenizer files of IN. A quantized tensor NAME is I8 (n_out, k_in) for q8 or U8\n"
              "(n_out, k_in / 2) for q4, its scales NAME_scale F16 (n_out, k_in / 32);\n"
              "tools/quant_reader.py reads them with numpy. A OUT that already holds a model is\n"
              "refused unless --force. Example:\n"
              "  recur quantize models/kjv kjv-q8 --type q8\n"
              "  recur score -m kjv-q8 -f models/kjv/heldout.txt");
  if (!args.parse(argc, argv, 2)) return 0;
  namespace fs = std::filesystem;
  const bool builtin = args.flag_set("builtin");
  const std::size_t want = builtin ? 1 : 2;
  if (args.positional().size() != want)
    throw ArgumentError(builtin ? "give the directory to write: recur quantize --builtin OUT"
                                : "give the model directory and the directory to write: recur "
                                  "quantize IN OUT --type q8|q4");
  if (!args.given("type")) throw ArgumentError("give the format: --type q8 or --type q4");
  QuantizeOptions options;
  options.format = args.str("type");
  options.head = args.given("head") ? args.str("head") : "";
  for (const char* o : {"type", "head"})
    if (args.given(o) && args.str(o) != "q8" && args.str(o) != "q4")
      throw ArgumentError(fmt::format("--{} is '{}', expected q8 or q4", o, printable(args.str(o))));
  const std::string in = builtin ? builtin_dir() : args.positional()[0];
  const std::string out = args.positional()[want - 1];
  std::error_code ec;
  if (!fs::is_directory(in, ec) && bare_checkpoint(in).empty())
    throw ArgumentError(fmt::format("{} is not a model directory nor a .pth checkpoint",
                                    printable(in)));
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    throw ArgumentError("OUT is IN itself: quantize writes a new directory");
  const ModelFiles files = open_model_files(in);
  const ModelConfig& config = files.config;
  if (!config.quantization.empty())
    throw ArgumentError(fmt::format("{} is already quantized ({}): quantize the model it was "
                                    "made from", printable(in), config.quantization));
  const auto& weights = files.weights;
  double elements = 0;
  for (const auto& n : weights->names()) {
    double e = 1;
    for (auto d : weights->shape(n)) e *= double(d);
    elements += e;
  }
  // The loaded model, the tensors as float32 while each is read, and what is written.
  check_memory(10.0 * elements, "the model and its tensors as float32");
  prepare_model_dir(out, args.flag_set("force"));
  fmt::print(stderr, "quantize: loading and checking {} ({:.2f}M weights)\n",
             printable(weights->describe()), elements / 1e6);
  const bool tty = isatty(STDERR_FILENO) != 0;
  const double t0 = now_seconds();
  const QuantizeReport r = write_quantized_model(
      out, config, *weights, options, [&](int done, int total, const std::string& name) {
        if (tty)
          fmt::print(stderr, "\rquantize: {}/{} tensors ({}){}", done, total, printable(name),
                     std::string(8, ' '));
      });
  if (tty) fmt::print(stderr, "\n");
  // Tokenizer files beside the weights, as Hugging Face's layouts name them.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                           "rwkv_vocab_v20230424.txt"}) {
    const fs::path from = fs::path(in) / name;
    if (fs::is_regular_file(from, ec))
      fs::copy_file(from, fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
  fmt::print("wrote {}: {} tensors, {} matrices quantized, {} kept in their precision (input "
             "width not a multiple of 32), weights {} ({}), from {} in {:.1f} s\n",
             printable(out), r.tensors, r.quantized, r.kept, r.weight_format,
             human_bytes(double(r.bytes)), printable(weights->describe()), now_seconds() - t0);
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
