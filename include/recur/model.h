// A decoder-only language model built on recurrent and linear-attention layers, and the decoder
// that runs one sequence through it.
//
// The layouts read are listed in docs/models.md, one family each under engine/models/ (the
// registry lists them: linear attention, Based, flash-linear-attention's GLA, RetNet and HGRN2,
// RWKV-7, Gated DeltaNet and Qwen3.5, LFM2, Mamba-2, Granite 4.0). A configuration names its
// layout by config.json's model_type string (ModelConfig::type); the families' own fields are
// theirs (ModelConfig::family).
//
// A Model is immutable once loaded: share it between threads and decoders. A Decoder holds one
// sequence's state (every layer's), fixed in size however long the sequence, except the KV
// caches of full softmax attention layers, which grow with it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recur/linear_attention.h"
#include "recur/safetensors.h"
#include "recur/types.h"

namespace recur {

namespace model {
struct ModelAccess;  // the engine's way to a Model's loaded form (engine/model/model_impl.h)
}

/// Deprecated: a layout is named by its model_type string (ModelConfig::type), which a new
/// family needs no enum value for. Kept while configurations built in code set
/// ModelConfig::architecture; nothing in recur branches on it any more.
enum class Architecture {
  kLinearAttn,           ///< model_type "linear_attn" (flash-linear-attention)
  kTransformersAreRnns,  ///< model_type "transformers_are_rnns" (the paper's post-norm model)
  kBased,                ///< HazyResearch's Based (model_type "gpt2" with alt_mixer fields)
  kGla,                  ///< model_type "gla" (flash-linear-attention's gated linear attention)
  kRetNet,               ///< model_type "retnet" (multi-scale retention)
  kHgrn2,                ///< model_type "hgrn2"
  kRwkv7,                ///< RWKV-7: model_type "rwkv7" (fla-hub) or BlinkDL's bare .pth
  kQwen35,               ///< Qwen3.5's text model: model_type "qwen3_5" (its text_config) or
                         ///< "qwen3_5_text"; Gated DeltaNet and gated full attention
  kGatedDeltaNet,        ///< model_type "gated_deltanet" or "delta_net" (flash-linear-attention)
};

/// What mixes tokens in one layer. Every kind keeps a state of fixed size per sequence.
enum class MixerKind {
  kLinearAttention,  ///< S and Z through a feature map (every layer of the first two layouts)
  kShortConv,        ///< a gated depthwise causal convolution (Based's BaseConv, LFM2's conv blocks)
  kWindowAttention,  ///< softmax attention over the last tokens, with rotary embeddings
  kDecayedRecurrence,  ///< a recurrence whose state decays (GLA, RetNet, HGRN2, Mamba-2's SSD),
                       ///< with its short convolutions
  kAttention,        ///< a hybrid's softmax attention layer (fla's `attn`, Qwen3.5's, LFM2's,
                     ///< Granite's, Nemotron-H's, Falcon-H1's): full (a KV cache that grows with
                     ///< the sequence) or windowed (constant)
  kDeltaRule,        ///< a delta-rule recurrence: RWKV-7's time mix with its token shifts,
                     ///< Gated DeltaNet with its short convolutions
  /// Deprecated: kDecayedRecurrence's old name ("gated" also named GLA's recurrence, Qwen's output
  /// gate, the fla family and Gated DeltaNet).
  kGated [[deprecated("use MixerKind::kDecayedRecurrence")]] = kDecayedRecurrence,
};

/// What a family's configuration adds to ModelConfig's common fields, for families whose
/// fields live with their module (engine/models/<family>/). Immutable once resolved; shared
/// between the copies of a ModelConfig.
struct FamilyConfig {
  virtual ~FamilyConfig() = default;
};

/// A model's configuration, as read from config.json, with every derived size resolved.
struct ModelConfig {
  /// The layout, as config.json's model_type names it ("linear_attn", "gla", "rwkv7",
  /// "qwen3_5", ...; "based" for Based, whose checkpoints say gpt2): it names the family that
  /// reads, checks and runs this configuration. Empty: the deprecated `architecture` names it
  /// (from_json fills `architecture` for the layouts that have a value there, and `type` for
  /// the others).
  std::string type;
  /// Deprecated: read only when `type` is empty.
  Architecture architecture = Architecture::kLinearAttn;
  int vocab_size = 32000;
  int hidden_size = 2048;
  int num_hidden_layers = 24;
  /// The attention heads of the layouts whose layers are all one kind of attention with one
  /// head count (linear_attn, transformers_are_rnns, GLA, RetNet; HGRN2's, hidden_size /
  /// expand_ratio); the other families keep their heads in their own fields (Based's per mixer,
  /// RWKV-7's from head_dim, Gated DeltaNet's key and value heads, the Mamba-2 families' SSD and
  /// attention heads) and leave these at their defaults: no code outside a family reads them
  /// for a family that keeps its own.
  int num_heads = 4;
  int num_kv_heads = 0;        ///< 0 in a config means num_heads; resolved here
  int intermediate_size = 0;   ///< the MLP's width; 0: the family's rule (its hidden_ratio)
  double norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  /// End-of-sequence ids (eos_token_id, a number or a list); generation stops at one.
  std::vector<int> eos_token_ids;
  /// Quantized weights (config.json's quantization_config, as `recur quantize` writes it;
  /// docs/quantization.md): "" for none, else "q8" or "q4", the format of the projections and
  /// the MLP. quantization_head is the head's (the tied embedding's): the same unless chosen
  /// apart.
  std::string quantization;
  std::string quantization_head;
  /// The family's own fields (engine/models/<family>/: the feature maps and widths of
  /// linear_attn and the paper's model, Based's mixer schedule, GLA / RetNet / HGRN2's gates and
  /// hybrid layers, RWKV-7's ranks): opaque here; config.json is the public way to set them
  /// (from_json). Null before resolve() means the family's defaults (RWKV-7 has none).
  std::shared_ptr<const FamilyConfig> family;

  /// What mixes tokens in each layer; resolve() fills it from the family's fields.
  std::vector<MixerKind> mixers;

  /// Parses a config.json text; `source` names it in messages. Unknown fields, unsupported
  /// values and contradictions throw FormatError naming the field.
  static ModelConfig from_json(const std::string& text, const std::string& source);
  static ModelConfig from_file(const std::string& path);
  /// The config.json text for this configuration (the fields a reader needs, and model_type).
  std::string to_json() const;
  /// Checks the values and fills the derived sizes; throws FormatError naming `source`.
  void resolve(const std::string& source);

  /// The layout, as config.json's model_type names it ("linear_attn", "gla", ...; "based" for
  /// Based, whose checkpoints say gpt2).
  std::string model_type() const;
};

/// Where a model's tensors come from: files, or values generated in memory.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  /// The tensor's shape (throws if missing).
  virtual std::vector<std::int64_t> shape(const std::string& name) const = 0;
  virtual std::vector<float> read(const std::string& name) const = 0;
  /// How the tensor is stored. The model keeps its matrices in this dtype (its values are exact
  /// in it), so that decode reads 16-bit weights as 16 bits.
  virtual DType dtype(const std::string& name) const {
    (void)name;
    return DType::kF32;
  }
  /// Every tensor name, so that the model can reject those it does not use.
  virtual std::vector<std::string> names() const = 0;
  virtual std::string describe() const = 0;
  /// The tensor's bytes as stored, little-endian: how the I8 / U8 codes and the F16 scales of a
  /// quantized weight are read. A source of float values alone throws FormatError.
  virtual std::vector<std::uint8_t> read_bytes(const std::string& name) const;
};

/// The weights of a model directory: model.safetensors (or its shards with an index), else a
/// pytorch_model.bin read without running its pickle. Throws FormatError naming the file.
std::unique_ptr<WeightSource> open_weights(const std::string& dir);

/// The .pth file a model path names without config.json (BlinkDL's bare state dicts): `path`
/// itself if it is a file ending in .pth, or the one .pth file of a directory that has no
/// config.json; "" otherwise. FormatError for a directory with no config.json and several .pth.
std::string bare_checkpoint(const std::string& path);

/// A model's configuration and weights: config.json and model.safetensors / pytorch_model.bin of
/// a directory, or a bare .pth (bare_checkpoint) whose configuration its tensors give
/// (Family::config_from_weights). config_text is config.json's text, or the configuration
/// written out for a bare checkpoint. `weights` holds the tensors under the names the family's
/// table gives them: as stored, or without a training wrapper's "model." prefix when only those
/// names match (docs/models.md, "Tensor names").
struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::string config_text;
  bool bare = false;  ///< a .pth without config.json
};
ModelFiles open_model_files(const std::string& path);

/// Every tensor a configuration needs, with its shape, in a fixed order.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> model_tensor_shapes(
    const ModelConfig& config);

class Model {
 public:
  /// Loads config.json and the safetensors weights of a model directory, or a bare .pth
  /// checkpoint (a file, or a directory holding one and no config.json; bare_checkpoint()).
  static std::shared_ptr<const Model> load(const std::string& dir);
  /// A model from a configuration and a source of weights, whose names are matched against the
  /// family's table as stored, or without a training wrapper's "model." prefix when only those
  /// match (docs/models.md, "Tensor names").
  static std::shared_ptr<const Model> from_weights(const ModelConfig& config,
                                                   const WeightSource& weights);
  /// The random-weight test model: a small linear_attn configuration (byte vocabulary) with
  /// weights generated from `seed`, the same on every machine. Its text is noise; the trained
  /// model that `recur generate` runs by default is a directory (models/kjv) read by load().
  static std::shared_ptr<const Model> builtin(std::uint64_t seed = 1);
  /// The configuration of the random-weight test model.
  static ModelConfig builtin_config();

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  /// Where the weights came from.
  const std::string& source() const { return source_; }
  /// Parameters, counting tied tensors once.
  std::int64_t parameters() const { return parameters_; }
  /// Bytes of weights one decode step reads (every packed matrix and one embedding row).
  std::size_t weight_bytes_per_token() const;
  /// How the weight matrices are stored, for messages: "f32", "bf16", "q8", "q4 (head q8)",
  /// "q4, 2 of 15 matrices f16" (docs/quantization.md).
  const std::string& weight_format() const { return weight_format_; }
  /// A 64-bit fingerprint of the configuration and every weight's value. Saved states carry it.
  std::uint64_t fingerprint() const { return fingerprint_; }
  /// Lines for logs, each ending in a newline: the model (its layout, layers, sizes and
  /// parameters, under `label`), and for mixed layouts a sequence's state (its size by mixer,
  /// and whether it grows).
  std::string describe(const std::string& label) const;
  /// Why this model, loaded from `dir` without a tokenizer, cannot take text as bytes (Based's
  /// checkpoints were trained on GPT-2's ids); "" when bytes are fine, as they always are for a
  /// byte-level model (a vocabulary of 256 ids or fewer).
  std::string missing_tokenizer(const std::string& dir) const;

  /// The loaded form: opaque here, defined and reached in the engine (engine/model/model_impl.h).
  struct Impl;

 private:
  friend struct model::ModelAccess;
  Model();
  ModelConfig config_;
  std::string source_;
  std::int64_t parameters_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::string weight_format_;
  std::unique_ptr<Impl> impl_;
};

/// How a decoder splits its work. Neither field changes any result.
struct DecoderOptions {
  /// Tokens run through the model together in prefill (>= 1).
  int chunk = 64;
  /// Worker threads for the matrix products and the attention (0: every core).
  int threads = 0;
};

/// What a front end keeps beside the model's state so that a continuation after save() and
/// load() is exactly the run that was never interrupted: the tokens so far (the context of a
/// repetition penalty) and the sampler's random state. Saved with the state and covered by its
/// checksum; the model itself never reads it.
struct SessionData {
  std::vector<int> tokens;
  bool has_sampler_state = false;
  std::uint64_t sampler_state = 0;
};

/// One sequence through a model: every layer's linear-attention state and the logits of the
/// last token. The state's size is fixed at creation. Copying is explicit: clone().
///
/// prefill() in any chunking, any split into calls and on any number of threads, followed by
/// step(), gives logits bit-identical to step() on every token.
///
/// Bad tokens and options are rejected before anything changes. If the model's own arithmetic
/// overflows midway (weights that drive activations to Inf), the call throws NumericError and
/// the decoder refuses further work until reset() or load().
class Decoder {
 public:
  explicit Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options = {});
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  /// A deep copy: a branch of the conversation that evolves independently.
  Decoder clone() const;
  /// Back to an empty sequence.
  void reset();

  const Model& model() const { return *model_; }
  const DecoderOptions& options() const { return options_; }
  /// Changes chunk and threads (results do not change).
  void set_options(const DecoderOptions& options);

  /// Called after each chunk with (tokens done, tokens in this call).
  using Progress = std::function<void(std::int64_t, std::int64_t)>;
  /// Called with each token's position in this call and its logits (vocab_size floats).
  using LogitsSink = std::function<void(std::int64_t, const float*)>;

  /// Runs `tokens` through the model in chunks; returns the logits after the last one.
  /// With `each`, the logits of every token are computed and passed to it in order.
  ConstVectorRef prefill(const std::vector<int>& tokens, const Progress& progress = {},
                         const LogitsSink& each = {});
  /// One token; returns its logits (valid until the next call). Allocates nothing.
  ConstVectorRef step(int token);
  /// The logits after the last token (throws before the first token).
  ConstVectorRef logits() const;

  std::int64_t n_tokens() const;
  /// Why the decoder refuses work ("" when it is usable): an overflow inside the model during
  /// an earlier call. reset() and load() clear it.
  const std::string& failure() const;
  /// Bytes this decoder holds (states, logits and workspace). Constant in the sequence length;
  /// the first prefill with a LogitsSink adds a buffer of chunk x vocab_size floats.
  std::size_t bytes() const;
  /// Bytes of the attention states alone (what save() writes, roughly).
  std::size_t state_bytes() const;
  /// The same for the layers of one mixer kind alone.
  std::size_t state_bytes(MixerKind kind) const;
  /// Whether the state grows with the sequence (a full softmax layer's KV cache); every other
  /// layer's is the same size at any length.
  bool state_grows() const;

  /// Writes the state to `path`: versioned, checksummed, tagged with the model's fingerprint,
  /// with the session if one is given. The file is written beside `path` and renamed over it,
  /// so a failed save leaves `path` as it was; only a regular file (or nothing) is replaced, and
  /// a symbolic link is followed.
  void save(const std::string& path, const SessionData* session = nullptr) const;
  /// Reads a state written by save() for this model, and its session into `session` if given
  /// (empty when the file holds none). On any error (another model, a corrupt or truncated
  /// file) throws FormatError and leaves this decoder and `session` unchanged.
  void load(const std::string& path, SessionData* session = nullptr);
  /// save() and load() without a file: the same bytes, for stores that are not files.
  std::string save_bytes(const SessionData* session = nullptr) const;
  /// `source` names the bytes in error messages.
  void load_bytes(std::string_view bytes, const std::string& source,
                  SessionData* session = nullptr);

  struct Impl;

 private:
  friend class BatchDecoder;
  Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options,
          std::unique_ptr<Impl> impl);
  static constexpr int kHeadNone = 0, kHeadLast = 1, kHeadAll = 2;  // which rows get logits
  void forward(const int* tokens, int n, int head);
  void run_layers(const int* tokens, int n, int head);
  void check_usable(const char* call) const;
  std::shared_ptr<const Model> model_;
  DecoderOptions options_;
  std::unique_ptr<Impl> impl_;
};

/// Decodes many sequences together: one call runs their tokens through every weight matrix at
/// once, so the weights are read once per call for the whole batch, and each sequence's
/// attention updates its own state. The sequences are Decoders: a sequence joins the batch by
/// being passed to a call and leaves by not being passed; between calls each one can also
/// prefill, save or load on its own. A call may mix sequences that decode one token with
/// sequences that prefill a chunk of their prompt (continuous batching).
///
/// Each decoder's logits after a call are byte-identical to those it would have after
/// prefill() or step() of the same tokens alone, whatever the other sequences, their positions,
/// the batch's size or order, and the threads.
class BatchDecoder {
 public:
  /// `threads`: worker threads for the matrix products and the attention (0: every core).
  explicit BatchDecoder(std::shared_ptr<const Model> model, int threads = 0);
  ~BatchDecoder();
  BatchDecoder(BatchDecoder&&) noexcept;
  BatchDecoder& operator=(BatchDecoder&&) noexcept;

  const Model& model() const { return *model_; }
  int threads() const { return threads_; }
  /// Changes the worker threads (results do not change).
  void set_threads(int threads);

  /// One sequence's part of a call: `count` (>= 1) tokens for `decoder`.
  struct Item {
    Decoder* decoder = nullptr;
    const int* tokens = nullptr;
    int count = 0;
  };

  /// Runs every item's tokens through its decoder; afterwards each decoder's logits() are those
  /// after its last token. The decoders must be distinct, of this model and usable; bad
  /// arguments throw ArgumentError before anything changes. If the model's arithmetic overflows
  /// for one sequence, that decoder alone fails (failure() says why, as after Decoder::step);
  /// the others advance normally, and the call returns how many failed.
  int run(const std::vector<Item>& items);
  /// run() with one token for each decoder. Allocates nothing once it has seen a batch of this
  /// size.
  int step(const std::vector<Decoder*>& decoders, const std::vector<int>& tokens);

  /// Bytes of workspace held (it grows to the largest batch seen).
  std::size_t bytes() const;

  struct Impl;

 private:
  std::shared_ptr<const Model> model_;
  int threads_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace recur
