// Causal linear attention as a recurrence ("Transformers are RNNs"): the layer (immutable) and
// the per-sequence state it reads and writes.
//
//   S_t = S_{t-1} + phi(k_t) v_t^T,  Z_t = Z_{t-1} + phi(k_t)
//   normalized:   o_t = S_t^T q'_t / (Z_t^T q'_t + eps),   q'_t = scale * phi(q_t)
//   unnormalized: o_t = S_t^T q'_t
//
// prefill() over any number of tokens, in any chunking and on any number of threads, leaves
// the state and produces outputs bit-identical to calling step() on each token in turn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "recur/feature_map.h"
#include "recur/types.h"

namespace recur {

namespace detail {
struct DeclaredBuffers;  // engine/util/state_buffers.h: a state's record, load, clone and reset
}  // namespace detail

/// Shape and form of one linear-attention layer.
struct LinearAttentionConfig {
  int n_heads = 8;
  int d_key = 64;    ///< per head, before the feature map
  int d_value = 64;  ///< per head
  FeatureMapKind feature_map = FeatureMapKind::kEluPlusOne;
  bool normalized = true;  ///< keep Z and divide by Z^T q' + eps
  /// Multiplies phi(q). 0 picks the default: 1 when normalized, d_feature^-1/2 otherwise.
  float scale = 0.0f;
  float eps = 1e-6f;  ///< added to the denominator (normalized form only)
};

/// How prefill() splits its work. Neither field changes any result.
struct PrefillOptions {
  /// Tokens gathered and walked per pass (>= 1).
  int chunk = 64;
  /// Worker threads, split over heads. 0 uses every core OpenMP reports.
  int threads = 0;
};

class LinearAttention;

/// The state of one layer for one sequence: per head S (d_feature x d_value), Z (d_feature) and
/// the count of tokens seen. Its size is fixed at creation, whatever the sequence length.
///
/// S and Z are held in two levels (docs/contracts.md, "What the state holds, and why"): a float32 partial sum
/// of the tokens since the last multiple of 256, and a float64 long sum with a float32 copy.
/// Copying is explicit: clone().
class LinearState {
 public:
  LinearState(LinearState&&) noexcept = default;
  LinearState& operator=(LinearState&&) noexcept = default;
  LinearState(const LinearState&) = delete;
  LinearState& operator=(const LinearState&) = delete;

  /// A deep copy: the copy and this state evolve independently.
  LinearState clone() const;
  /// Back to the start of a sequence (all sums zero, no tokens seen).
  void reset();

  std::int64_t n_tokens() const { return n_tokens_; }
  int n_heads() const { return n_heads_; }
  int d_feature() const { return d_feature_; }
  int d_value() const { return d_value_; }
  bool normalized() const { return normalized_; }

  /// Bytes this state holds, sums and per-token workspace together. Constant.
  std::size_t bytes() const;

  /// S of one head as float64 (the long sum plus the partial), (d_feature, d_value).
  Eigen::MatrixXd S(int head) const;
  /// Z of one head as float64, (d_feature). Zero in the unnormalized form.
  Eigen::VectorXd Z(int head) const;

  /// The raw bytes of the sums and the token count, for exact comparison, hashing and saving.
  std::vector<unsigned char> raw_bytes() const;
  /// raw_bytes().size(), without the copy.
  std::size_t raw_size() const;
  /// Restores what raw_bytes() returned for a state of the same shape. Throws FormatError if the
  /// size differs, a sum is not finite or the count is negative; the state is unchanged then.
  void load_raw_bytes(const unsigned char* data, std::size_t size);

 private:
  friend class LinearAttention;
  LinearState(int n_heads, int d_feature, int d_value, bool normalized);
  // Declared as its buffers (engine/util/state_buffers.h): the record, load, clone and reset.
  friend struct detail::DeclaredBuffers;
  static constexpr const char* kName = "LinearState";
  static constexpr std::uint32_t kFormat = 0;  // no format word
  static constexpr bool kGrows = false;
  template <class Self, class F>
  static void buffers(Self& s, F&& f);
  LinearState blank(std::int64_t n_tokens) const;

  struct Buffer {  // 64-byte aligned storage that owns its memory
    std::unique_ptr<unsigned char[]> storage;
    unsigned char* data = nullptr;
    std::size_t size = 0;
  };
  static Buffer allocate(std::size_t bytes);

  int n_heads_ = 0;
  int d_feature_ = 0;
  int d_value_ = 0;
  bool normalized_ = true;
  int d_feature_padded_ = 0;  // multiple of 8
  int d_value_padded_ = 0;    // multiple of 16
  std::int64_t n_tokens_ = 0;
  // Per head, contiguous: P, L32 (float, Dp x dvp), L64 (double, Dp x dvp), and when normalized
  // Zp, Z32 (float, Dp), Z64 (double, Dp).
  Buffer sums_;
  std::size_t head_bytes_ = 0;
  // step() workspace: q', k' (n_heads, Dp), v and o (n_heads, dvp). Not part of the state's
  // value; it exists so that step() never allocates.
  Buffer workspace_;
};

/// One linear-attention layer. Immutable after construction: share it between threads freely,
/// each thread with its own LinearState.
class LinearAttention {
 public:
  explicit LinearAttention(const LinearAttentionConfig& config);
  /// With a feature map of the caller's (learned maps, random features).
  LinearAttention(const LinearAttentionConfig& config, std::shared_ptr<const FeatureMap> phi);

  const LinearAttentionConfig& config() const { return config_; }
  const FeatureMap& feature_map() const { return *phi_; }
  int d_feature() const { return d_feature_; }
  /// The factor applied to phi(q), after resolving the default.
  float scale() const { return scale_; }

  /// A fresh state for one sequence.
  LinearState make_state() const;

  /// One token. q, k: (n_heads * d_key); v, out: (n_heads * d_value), heads side by side.
  /// O(n_heads * d_feature * d_value), allocates nothing.
  void step(LinearState& state, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
            VectorRef out) const;
  /// As above, returning the output (this one allocates it).
  Eigen::VectorXf step(LinearState& state, ConstVectorRef q, ConstVectorRef k,
                       ConstVectorRef v) const;

  /// T tokens: Q, K (T, n_heads * d_key); V, O (T, n_heads * d_value). A non-finite input
  /// throws NumericError and leaves the state as it was; O's rows are then unspecified.
  void prefill(LinearState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
               const ConstMatrixRef& V, MatrixRef O, const PrefillOptions& options = {}) const;
  /// As above, returning O.
  RowMatrix prefill(LinearState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V, const PrefillOptions& options = {}) const;

 private:
  void check_state(const LinearState& state, const char* call) const;

  LinearAttentionConfig config_;
  std::shared_ptr<const FeatureMap> phi_;
  int d_feature_ = 0;
  float scale_ = 1.0f;
};

}  // namespace recur
