// What Decoder and BatchDecoder share: the workspace rows run through, the layer stack with the
// attention left to the caller, and the LM head. Every stage is a function of one row, so a row's
// bytes do not depend on which rows share the call: a chunk of one sequence's tokens (prefill)
// and one token from each of many sequences (batched decode) go through the same code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/model_impl.h"

namespace recur::model {

/// Buffers for up to `cap` rows; never part of a decoder's value.
struct Workspace {
  int cap = 0;
  std::vector<float> x, h, q, k, v, fq, fk, fk_full, v_full, o, a, g, u, map_scratch, logits;
  std::vector<float> gk, alpha, mixer_scratch;  // fla: GLA's low-rank gate; run_mixer's scratch

  /// Sizes every buffer for `rows` rows (logits stays empty until run_head() needs it).
  void allocate(const ModelConfig& c, const Model::Impl& m, int rows);
  std::size_t bytes() const;
};

/// A non-owning reference to a callable, so that the per-token path allocates nothing.
template <class Signature>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as a function argument
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(object_, a...); }

 private:
  void* object_;
  R (*call_)(void*, A...);
};

/// The rows a layer's sequence-dependent part reads (a, b, c, d; null when unused), may use as
/// scratch, and writes (out). Row r of each starts at r times its width in mixer_io().
struct MixerRows {
  const float* a = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  const float* d = nullptr;
  float* scratch = nullptr;
  float* out = nullptr;
};

/// The sequence-dependent part of layer `layer` over the workspace's n rows (mixer_io() gives the
/// rows' widths): for linear attention fq and fk (n, H * d_feature) after the feature maps (or
/// before, for a layer whose LinearAttention applies its own map), v (n, H * head_v_dim) with kv
/// heads already repeated, writing o; for a short convolution u1, writing conv(u1); for window
/// attention q, k and v before rotary, writing o; for fla's layers see fla::mixer_io. May throw
/// (the stack then stops and rethrows).
using Attend = FunctionRef<void(std::size_t layer, const MixerRows& rows, int n, int threads)>;

/// One layer's state for one sequence: the one its mixer keeps (S and Z, the convolution's past
/// inputs, or the window's ring). Fixed in size.
struct LayerState {
  std::optional<LinearState> linear;
  std::optional<ShortConvState> conv;
  std::optional<WindowState> window;
  std::optional<GatedState> gated;
  std::vector<ShortConvState> convs;  // fla's short convolutions on q, k, v (beside `gated`)
  std::optional<CausalState> causal;

  static LayerState make(const Model::Impl::Layer& layer);
  LayerState clone() const;
  void reset();
  std::int64_t n_tokens() const;
  std::size_t bytes() const;
  std::size_t raw_size() const;
  /// raw_size() after `n_tokens` tokens (differs from raw_size() only for a growing KV cache).
  std::size_t raw_size_at(std::int64_t n_tokens) const;
  /// True when the state grows with the sequence (a full softmax layer's KV cache).
  bool grows() const { return causal && causal->grows(); }
  std::vector<unsigned char> raw_bytes() const;
  /// Throws FormatError (the state unchanged) when the bytes are not a state of this shape.
  void load_raw_bytes(const unsigned char* data, std::size_t size);
};

/// Widths of the rows a layer's sequence-dependent part reads (a, b, c) and writes (out):
/// linear attention q, k, v -> o; the short convolution u1 -> conv(u1); the window q, k, v -> o.
struct MixerIo {
  int a = 0, b = 0, c = 0, d = 0, scratch = 0, out = 0;
};
MixerIo mixer_io(const ModelConfig& config, const Model::Impl::Layer& layer);

/// That part for `rows` rows of one sequence (step for one, prefill for more: the same bytes).
void run_mixer(const ModelConfig& config, const Model::Impl::Layer& layer, LayerState& state,
               const MixerRows& io, int rows, int threads);

/// Runs n rows (n <= w.cap), the embeddings of `tokens`, through every layer; leaves the last
/// layer's output in w.x.
void run_stack(const Model& model, Workspace& w, const int* tokens, int n, int threads,
               Attend attend);

/// The LM head over rows [first, n) of w.x: (n - first) x vocab_size logits into `out`, checked
/// finite unless `call` is null (NumericError names `call`).
void run_head(const Model& model, Workspace& w, int first, int n, float* out, int threads,
              const char* call);

}  // namespace recur::model

namespace recur {

struct Decoder::Impl {
  std::vector<model::LayerState> states;
  std::int64_t n_tokens = 0;
  bool has_logits = false;
  // Set when a forward pass failed after some layers had advanced (an overflow inside the
  // model): the states no longer describe one sequence, so nothing runs until reset() or load().
  std::string broken;
  Eigen::VectorXf logits;  // after the last token
  model::Workspace work;   // for up to options.chunk rows

  // Bytes of a saved state of this model after n_tokens tokens with an empty session: the
  // header, each layer's size and sums, the logits, the session's header and the checksum (see
  // save_bytes()).
  std::size_t saved_size(int vocab, std::int64_t n_tokens) const;
  static constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4;
  static constexpr std::size_t kSessionHeaderBytes = 4 + 8 + 8;
};

}  // namespace recur
