// A model family: one module under engine/models/<family>/ that knows its config.json fields,
// its tensors, and how its blocks are wired; registered once, in engine/models/registry.cpp.
// Everything generic (config.json's common fields, loading, random weights, quantize, convert,
// the decoder, the batch decoder, saved states, serve) goes through this interface and never
// branches on the family. docs/adding-a-model.md says what a new family writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/config_fields.h"
#include "recur/model.h"

namespace recur {
class WeightSource;
}

namespace recur::model {

class Loader;

/// One tensor of a family's table: its name as checkpoints store it, its shape, and how
/// make-model's random weights fill it (RandomWeights: seeded, the same on every machine).
struct TensorSpec {
  enum class Init {
    kMatrix,     // normal, std 1/sqrt(shape[1]) (fan in)
    kEmbedding,  // normal, std 1
    kNorm,       // 1 + normal * 0.1 (a norm's weight)
    kBias,       // normal * 0.1
    kConv,       // normal, std 1/sqrt(shape[2]) (a (channels, 1, kernel) convolution's taps)
    kUnit,       // normal, std 1 (logits of a softmax, such as HGRN2's lower bounds)
    kIdentity,   // the identity + normal * 0.3/sqrt(shape[1]) (a map initialised to identity)
  };
  std::string name;
  std::vector<std::int64_t> shape;
  Init init = Init::kMatrix;
};
using Init = TensorSpec::Init;

/// One option of `recur make-model` that a family reads: --NAME, with a default value (a flag
/// when `flag`), and its help line.
struct MakeOption {
  const char* name;
  const char* fallback;
  const char* help;
  bool flag = false;
  /// The --arch values it applies to (empty: every one of the family's).
  std::vector<std::string> archs = {};
};

/// make-model's options as the family sees them (the tool parses and range-checks them).
class MakeOptions {
 public:
  virtual ~MakeOptions() = default;
  virtual bool given(const char* name) const = 0;
  virtual bool flag(const char* name) const = 0;
  virtual std::int64_t integer(const char* name, std::int64_t min, std::int64_t max) const = 0;
  virtual double real(const char* name, double min, double max) const = 0;
  virtual std::string str(const char* name) const = 0;
};

class Family {
 public:
  virtual ~Family() = default;
  /// For messages: "linear attention", "Based", "fla gated".
  virtual const char* name() const = 0;
  /// The model_type values that name this family's layouts, as config.json and
  /// ModelConfig::type give them ("linear_attn", "transformers_are_rnns"; "based" for Based,
  /// whose checkpoints say gpt2). They are the family's identity: the registry finds a
  /// configuration's family by them, and messages list them.
  virtual std::vector<std::string> model_types() const = 0;
  /// Other config.json files it reads, for messages ("" when none): Based's "gpt2 with Based's
  /// mixer fields".
  virtual const char* also_reads() const { return ""; }
  /// The layout's name as config.json's model_type gives it: one of model_types().
  virtual const char* model_type(const ModelConfig& c) const = 0;
  /// Whether config.json, of model_type `type`, is this family's (default: `type` is one of
  /// model_types()).
  virtual bool reads(const std::string& type, const json::Value& root) const;
  /// Reads this family's fields of config.json into `c` (the common ones, eos_token_id and
  /// quantization_config, are read by ModelConfig::from_json). Every field looked at goes
  /// through `f`, which refuses the others.
  virtual void read_config(const std::string& type, const json::Value& root, Fields& f,
                           ModelConfig& c) const = 0;
  /// The configuration of a bare checkpoint (a .pth state dict without config.json) whose
  /// tensors are this family's, every size inferred from their shapes; nullopt when they are
  /// not. FormatError naming `source` and the tensor when they are this family's but malformed.
  virtual std::optional<ModelConfig> config_from_weights(const WeightSource& weights,
                                                         const std::string& source) const {
    (void)weights;
    (void)source;
    return std::nullopt;
  }
  /// Sizes the family's layers take from the tensors rather than from config.json (where a
  /// field may be stale); called before the tensors are read. Default: none.
  virtual void fit_to_weights(ModelConfig& c, const WeightSource& weights) const {
    (void)c;
    (void)weights;
  }
  /// Checks the values and fills the derived sizes (ModelConfig::resolve has checked the common
  /// ones); FormatError naming `source`.
  virtual void resolve(ModelConfig& c, const std::string& source) const = 0;
  /// config.json's fields for `c`, each line "  \"key\": value,\n", model_type first.
  virtual std::string config_fields(const ModelConfig& c) const = 0;
  /// The same fields as the model's fingerprint hashes them: without those written only for
  /// other tools (Schema::for_other_tools). Default: config_fields.
  virtual std::string fingerprint_fields(const ModelConfig& c) const { return config_fields(c); }
  /// The name under which the table lists a tensor stored as `name` (the same, unless one
  /// tensor of the table may be stored under another name too).
  virtual std::string table_name(const ModelConfig& c, const std::string& name) const {
    (void)c;
    return name;
  }
  /// Reads every tensor through `L` into `impl`: the embeddings, the final norm, the head and
  /// the layer stack (impl.network). Each tensor is named here alone: run against a recording
  /// Loader, load() gives the family's table (tensor_table()), so it must take the same tensors
  /// whatever `weights` hold (ask L.has() only to choose between two names of one tensor).
  virtual void load(const ModelConfig& c, const WeightSource& weights, Loader& L,
                    Model::Impl& impl) const = 0;
  /// The --arch names `recur make-model` takes for this family (none: make-model does not
  /// write it).
  virtual std::vector<std::string> make_model_archs() const { return {}; }
  /// The make-model options it reads beyond the common ones (vocab, hidden, layers, heads,
  /// intermediate, tie-embeddings); families may share an option by name.
  virtual std::vector<MakeOption> make_model_options() const { return {}; }
  /// config.json for --arch `arch` from the options; ArgumentError names a bad value.
  virtual std::string make_model_config(const std::string& arch, const MakeOptions& o) const {
    (void)o;
    throw ArgumentError("make-model does not write --arch " + arch);
  }
  /// Lines for logs, each ending in a newline: "model: LABEL: ..." (the layout, its layers and
  /// sizes), and "state: ..." (a sequence's state, and whether it grows) where that says more
  /// than the size alone.
  virtual std::string describe(const Model& m, const std::string& label) const = 0;
  /// Why a checkpoint of this family without a tokenizer cannot take text as bytes, naming
  /// `dir`; "" when bytes are fine.
  virtual std::string missing_tokenizer(const std::string& dir) const {
    (void)dir;
    return "";
  }
};

/// describe()'s lines as most families print them: "model: LABEL: WHAT, hidden H SIZES, vocab V,
/// P.PPM parameters" and "state: S MiB NOTE" (a new sequence's state; NOTE says whether and how
/// it grows, as state_growth_note() in layers/attention.h). SIZES follows the width
/// (", MLP 128"), or is empty.
std::string describe_lines(const Model& m, const std::string& label, const std::string& what,
                           const std::string& sizes, const std::string& state_note);

/// missing_tokenizer()'s text for a family whose ids are its own tokenizer.json's (a byte-level
/// BPE): bytes as ids would be another model's input.
std::string tokenizer_json_needed(const std::string& dir);

/// A family's fields of `c` to change: a copy of those `c` holds (F's defaults when it holds no
/// F), which `c` then holds alone, so that no other copy of the configuration changes with it.
template <class F>
F& edit_family(ModelConfig& c) {
  const auto* held = dynamic_cast<const F*>(c.family.get());
  auto fresh = std::make_shared<F>(held ? *held : F{});
  F& fields = *fresh;
  c.family = std::move(fresh);
  return fields;
}

/// Every tensor the configuration has, in load()'s order (tensors it declares ahead are listed
/// where it declares them): what loading, make-model's random weights and the files it writes go
/// by. load() run against a shape-only recording Loader.
std::vector<TensorSpec> tensor_table(const Family& family, const ModelConfig& c);

/// The configuration's text the model's fingerprint hashes (and saved states carry): to_json()
/// without eos_token_id (where generation stops shapes no number) and without the fields
/// written only for other tools.
std::string fingerprint_text(const ModelConfig& c);

/// The model_type naming a configuration's layout: ModelConfig::type, or when that is empty the
/// one the deprecated `architecture` stands for.
std::string type_of(const ModelConfig& c);
/// The family whose model_types() hold `type`, or null.
const Family* family_named(const std::string& type);
/// The family of a configuration (family_named(type_of(c))); ArgumentError naming the type when
/// no family has it.
const Family& family_of(const ModelConfig& c);
/// The family whose config.json this is, or null.
const Family* family_reading(const std::string& type, const json::Value& root);
/// The configuration of a bare checkpoint, from the first family that recognises its tensors;
/// FormatError naming `source` when none does.
ModelConfig config_from_weights(const WeightSource& weights, const std::string& source);
/// The weights under the names the family's table gives them (docs/models.md, "Tensor names"):
/// the names as stored when they match the table; with PyTorch Lightning's wrapper prefix
/// "model." taken off when they do not and those do. FormatError naming both attempts when both
/// match, or neither. Names holding "metrics" that the table lacks (a trainer's buffers, as
/// Lightning saves Based's) are left out. Every reader of a model's weights goes through it,
/// whatever the file.
std::unique_ptr<WeightSource> as_named_by_table(const ModelConfig& config,
                                                std::unique_ptr<WeightSource> weights);
/// The same for weights the caller keeps: `weights` itself, or a view of it that `view` holds.
const WeightSource& as_named_by_table(const ModelConfig& config, const WeightSource& weights,
                                      std::unique_ptr<WeightSource>& view);
/// The model types every family reads, for messages: "linear_attn, ..., delta_net, and gpt2
/// with Based's mixer fields", from the registry.
std::string known_model_types();
/// Every family, in the registry's order.
std::vector<const Family*> families();
/// Adds a family beside the built-in ones (engine/models/registry.cpp), for a family kept outside
/// engine/models/: the toy family of tests/conformance/toy_family.cpp, which
/// docs/adding-a-model.md walks through. Call it before any model is read (it is not
/// synchronised with readers); std::logic_error when one of its model_types() is taken.
void register_family(const Family& family);
/// The family whose make-model --arch is `arch`, or null.
const Family* family_for_arch(const std::string& arch);

}  // namespace recur::model
