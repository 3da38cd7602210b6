// Decayed linear attention as a recurrence: the layer (immutable), the per-sequence state, and
// the elementwise gates that flash-linear-attention's models compute their decays with.
//
//   S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,   o_t = S_t^T (scale * q_t)
//
// per head, S a (d_key, d_value) matrix, zero at the start of a sequence. There is no
// normalizer: GLA, RetNet and HGRN2 normalize each head's (or the whole) output afterwards, in
// the model. The decay is
//   * kPerChannel: alpha_t (n_heads * d_key) comes with every token (GLA: exp(logsigmoid(x) / 16);
//     HGRN2: a forget gate with a lower bound), each in [0, 1];
//   * kPerHead: a fixed gamma_h per head (RetNet: 1 - 2^(-5-h)), given in the config;
//   * kPerHeadToken: alpha_t (n_heads) per token, one decay for every row of a head's S
//     (Mamba-2's exp(dt A)): the bytes of kPerChannel with that decay repeated over the rows.
//
// prefill() over any number of tokens, in any chunking and on any number of threads, leaves
// the state and produces outputs bit-identical to calling step() on each token in turn, under
// every instruction set (docs/gated-layers.md: the order, and why the state has one level).
//
// Grouped kv heads are the model's business: flash-linear-attention repeats k, v (and GLA's
// gate) for the query heads of a group, so this layer takes n_heads full copies. In GLA the
// copies of a group carry the same S (same k, v, alpha); in RetNet they do not (gamma follows
// the query head). Shared q and k are the layer's (qk_heads: Mamba-2's B and C, one per group
// of heads, each head with its own v and S): the bytes of the layer given n_heads copies.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "recur/linear_attention.h"  // PrefillOptions
#include "recur/types.h"

namespace recur {

/// How a gated layer decays its state.
enum class DecayKind {
  kPerChannel,  ///< alpha per token, head and key channel (GLA, HGRN2)
  kPerHead,     ///< a fixed gamma per head (RetNet)
  kPerHeadToken,  ///< alpha per token and head, one for all of a head's rows (Mamba-2)
};

/// Shape and decay of one gated linear-attention layer.
struct GlaRecurrenceConfig {
  int n_heads = 4;
  int d_key = 64;    ///< per head
  int d_value = 64;  ///< per head
  DecayKind decay = DecayKind::kPerChannel;
  /// gamma_h for kPerHead: n_heads values in [0, 1]. Must be empty for kPerChannel.
  std::vector<float> head_decay;
  /// Multiplies q. 0 picks the default d_key^-1/2 (flash-linear-attention's default scale).
  float scale = 0.0f;
  /// Heads of q and k, each shared by n_heads / qk_heads consecutive heads (head h reads q and
  /// k head h / (n_heads / qk_heads)); a divisor of n_heads. 0 means n_heads: one each.
  int qk_heads = 0;
};

class GlaRecurrence;

/// The state of one gated layer for one sequence: per head S (d_key x d_value) in float32, and
/// the count of tokens seen. Its size is fixed at creation, whatever the sequence length.
///
/// One level, float32: the decay bounds the sums, and at the published models' decays a plain
/// float32 state stays within 1.5e-6 of float64 over a million tokens (docs/gated-layers.md).
/// Copying is explicit: clone().
class GlaState {
 public:
  GlaState(GlaState&&) noexcept = default;
  GlaState& operator=(GlaState&&) noexcept = default;
  GlaState(const GlaState&) = delete;
  GlaState& operator=(const GlaState&) = delete;

  /// A deep copy: the copy and this state evolve independently.
  GlaState clone() const;
  /// Back to the start of a sequence (S zero, no tokens seen).
  void reset();

  std::int64_t n_tokens() const { return n_tokens_; }
  int n_heads() const { return n_heads_; }
  int d_key() const { return d_key_; }
  int d_value() const { return d_value_; }

  /// Bytes this state holds, S and per-token workspace together. Constant.
  std::size_t bytes() const;

  /// S of one head as float64, (d_key, d_value).
  Eigen::MatrixXd S(int head) const;

  /// The format of raw_bytes(); load_raw_bytes() refuses any other. Version 1: u32 format, then
  /// per head d_key * d_value float32 (S row-major, no padding), then the token count as i64,
  /// in the machine's byte order.
  static constexpr std::uint32_t kFormat = 1;
  /// The state's value as bytes, for exact comparison, hashing and saving.
  std::vector<unsigned char> raw_bytes() const;
  /// raw_bytes().size(), without the copy.
  std::size_t raw_size() const;
  /// Restores what raw_bytes() returned for a state of the same shape. Throws FormatError if the
  /// size or the format differs, an entry is not finite or the count is negative; the state is
  /// unchanged then.
  void load_raw_bytes(const unsigned char* data, std::size_t size);

 private:
  friend class GlaRecurrence;
  GlaState(int n_heads, int d_key, int d_value);
  // Declared as its buffers (engine/util/state_buffers.h): the record, load, clone and reset.
  friend struct detail::DeclaredBuffers;
  static constexpr const char* kName = "GlaState";
  static constexpr bool kGrows = false;
  template <class Self, class F>
  static void buffers(Self& s, F&& f);
  GlaState blank(std::int64_t n_tokens) const;

  struct Buffer {  // 64-byte aligned storage that owns its memory
    std::unique_ptr<unsigned char[]> storage;
    float* data = nullptr;
    std::size_t floats = 0;
  };
  static Buffer allocate(std::size_t floats);
  float* head(int h) const { return S_.data + static_cast<std::size_t>(h) * head_floats_; }

  int n_heads_ = 0;
  int d_key_ = 0;
  int d_value_ = 0;
  int d_key_padded_ = 0;    // multiple of 8; padding rows stay zero
  int d_value_padded_ = 0;  // multiple of 16; padding columns stay zero
  std::int64_t n_tokens_ = 0;
  // Per head, contiguous: S (Dp, dvp) float32.
  Buffer S_;
  std::size_t head_floats_ = 0;
  // step() workspace: q', k', alpha (n_heads, Dp), v and o (n_heads, dvp). Not part of the
  // state's value; it exists so that step() never allocates.
  Buffer workspace_;
};

/// One gated linear-attention layer. Immutable after construction: share it between threads
/// freely, each thread with its own GlaState.
class GlaRecurrence {
 public:
  explicit GlaRecurrence(const GlaRecurrenceConfig& config);

  const GlaRecurrenceConfig& config() const { return config_; }
  /// The factor applied to q, after resolving the default.
  float scale() const { return scale_; }

  /// A fresh state for one sequence.
  GlaState make_state() const;

  /// One token. q, k: (qk_heads * d_key); v, out: (n_heads * d_value), heads side by side;
  /// alpha, each in [0, 1]: (n_heads * d_key) for kPerChannel, (n_heads) for kPerHeadToken,
  /// empty for kPerHead.
  /// O(n_heads * d_key * d_value), allocates nothing.
  void step(GlaState& state, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
            ConstVectorRef alpha, VectorRef out) const;
  /// As above, returning the output (this one allocates it).
  Eigen::VectorXf step(GlaState& state, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
                       ConstVectorRef alpha) const;

  /// T tokens: Q, K (T, qk_heads * d_key); V, O (T, n_heads * d_value); A the decays, (T,
  /// n_heads * d_key) for kPerChannel, (T, n_heads) for kPerHeadToken, empty (no elements) for
  /// kPerHead.
  void prefill(GlaState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
               const ConstMatrixRef& V, const ConstMatrixRef& A, MatrixRef O,
               const PrefillOptions& options = {}) const;
  /// As above, returning O.
  RowMatrix prefill(GlaState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V, const ConstMatrixRef& A,
                    const PrefillOptions& options = {}) const;

 private:
  void check_state(const GlaState& state, const char* call) const;

  GlaRecurrenceConfig config_;
  float scale_ = 1.0f;
  int qk_heads_ = 1;  // config_.qk_heads resolved
};

/// The gates of flash-linear-attention's models, elementwise over n floats, written once for
/// every instruction set (our own exp and log1p, the same bytes everywhere). Inputs and outputs
/// may be the same array. n must be >= 0.
namespace gates {

/// GLA's decay: alpha = exp(max(logsigmoid(x) / normalizer, clamp_min)), in [0, 1].
/// flash-linear-attention fixes normalizer = 16 in the layer (gate_logit_normalizer); clamp_min
/// is the config's (none: -infinity).
void gla_decay(const float* x, float* alpha, std::int64_t n, float normalizer = 16.0f,
               float clamp_min = -std::numeric_limits<float>::infinity());

/// HGRN2's forget gate with a lower bound lb (per element; null means 0, as in the first layer):
/// alpha = lb + (1 - lb) sigmoid(x) and k = 1 - alpha, computed as (1 - lb) sigmoid(-x) so that
/// it keeps its digits when alpha is near 1. alpha in [0, 1].
void hgrn2_gates(const float* x, const float* lower_bound, float* alpha, float* k,
                 std::int64_t n);

/// 1 / (1 + exp(-x)).
void sigmoid(const float* x, float* y, std::int64_t n);

/// x * sigmoid(x) (swish; HGRN2 applies it to q).
void silu(const float* x, float* y, std::int64_t n);

/// RetNet's fixed decay of head h: 1 - 2^(-5-h), exact in float32 up to h = 19.
float retnet_decay(int head);
/// retnet_decay(h) for h = 0 .. n_heads - 1.
std::vector<float> retnet_decays(int n_heads);

}  // namespace gates

}  // namespace recur
