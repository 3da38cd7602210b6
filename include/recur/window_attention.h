// Sliding-window softmax attention with rotary position embeddings (Based's SlidingAttention):
// token t attends to itself and the `window` tokens before it, with keys and queries rotated by
// their absolute positions. The state is a ring of the last window + 1 keys (after rotary) and
// values per head: constant in the sequence length.
//
// The output for a query depends only on its q and on the keys and values it sees, in one fixed
// order (oldest first, by absolute position): prefill() in any split, chunking or thread count
// gives the bytes of step() token by token, on every instruction set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "recur/linear_attention.h"  // PrefillOptions
#include "recur/types.h"

namespace recur {

/// Shape of one sliding-window attention layer.
struct WindowAttentionConfig {
  int n_heads = 16;
  int d_head = 64;  ///< even: rotary turns pairs (i, i + d_head / 2)
  /// Previous tokens a token sees: it attends to at most window + 1 keys, itself included.
  /// (Based's layer passes its config's window_size / 2.)
  int window = 128;
  /// Rotary base: pair i turns by pos * rope_theta^(-2i / d_head). Rotary covers all of d_head,
  /// in GPT-NeoX's half layout (not interleaved).
  float rope_theta = 10000.0f;
  float scale = 0.0f;  ///< multiplies q . k; 0 picks d_head^-1/2
};

class WindowAttention;

/// The state of one window layer for one sequence: per head, the last window + 1 keys (rotated)
/// and values in a ring, and the count of tokens seen (the next token's absolute position).
/// Copying is explicit: clone().
class WindowState {
 public:
  WindowState(WindowState&&) noexcept = default;
  WindowState& operator=(WindowState&&) noexcept = default;
  WindowState(const WindowState&) = delete;
  WindowState& operator=(const WindowState&) = delete;

  /// A deep copy: the copy and this state evolve independently.
  WindowState clone() const;
  /// Back to the start of a sequence.
  void reset();

  std::int64_t n_tokens() const { return n_tokens_; }
  int n_heads() const { return n_heads_; }
  int d_head() const { return d_head_; }
  int window() const { return window_; }
  /// Bytes this state holds, ring and step() workspace together. Constant.
  std::size_t bytes() const;

  /// The raw bytes of the ring and the token count, for exact comparison, hashing and saving.
  std::vector<unsigned char> raw_bytes() const;
  /// raw_bytes().size(), without the copy.
  std::size_t raw_size() const;
  /// Restores what raw_bytes() returned for a state of the same shape. Throws FormatError if the
  /// size differs, an entry is not finite or the count is negative; the state is unchanged then.
  void load_raw_bytes(const unsigned char* data, std::size_t size);

 private:
  friend class WindowAttention;
  WindowState(int n_heads, int d_head, int window);
  // Declared as its buffers (engine/util/state_buffers.h): the record, load, clone and reset.
  friend struct detail::DeclaredBuffers;
  static constexpr const char* kName = "WindowState";
  static constexpr std::uint32_t kFormat = 0;  // no format word
  static constexpr bool kGrows = false;
  template <class Self, class F>
  static void buffers(Self& s, F&& f);
  WindowState blank(std::int64_t n_tokens) const;

  int n_heads_ = 0;
  int d_head_ = 0;
  int window_ = 0;
  int slots_ = 0;         // window + 1: token p sits in slot p % slots_
  int slots_padded_ = 0;  // slots_ rounded up to 16: the key rows' stride
  int d_padded_ = 0;      // d_head rounded up to 16: the value rows' stride
  std::int64_t n_tokens_ = 0;
  std::vector<float> keys_;    // (n_heads, d_head, slots_padded_): rotated keys, one column a slot
  std::vector<float> values_;  // (n_heads, slots_, d_padded_): one row a slot
  // step() workspace, not part of the state's value: cos and sin (d_head / 2 each), the rotated
  // and scaled q (d_head), the rotated k (d_head), scores (slots_padded_), weights (slots_),
  // acc (d_padded_).
  std::vector<float> workspace_;
};

/// One sliding-window attention layer. Immutable: share it between threads, each thread with
/// its own WindowState.
class WindowAttention {
 public:
  explicit WindowAttention(const WindowAttentionConfig& config);

  const WindowAttentionConfig& config() const { return config_; }
  /// The factor applied to q . k, after resolving the default.
  float scale() const { return scale_; }

  /// A fresh state for one sequence.
  WindowState make_state() const;

  /// One token at position state.n_tokens(). q, k, v, out: (n_heads * d_head), before rotary,
  /// heads side by side. O(n_heads * (window + 1) * d_head), allocates nothing.
  void step(WindowState& state, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
            VectorRef out) const;
  /// As above, returning the output (this one allocates it).
  Eigen::VectorXf step(WindowState& state, ConstVectorRef q, ConstVectorRef k,
                       ConstVectorRef v) const;

  /// T tokens: Q, K, V, O (T, n_heads * d_head). options.chunk bounds the rotary table
  /// (chunk * d_head floats); options.threads splits the heads. Neither changes any result.
  void prefill(WindowState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
               const ConstMatrixRef& V, MatrixRef O, const PrefillOptions& options = {}) const;
  /// As above, returning O.
  RowMatrix prefill(WindowState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V, const PrefillOptions& options = {}) const;

  /// cos and sin of pair i's angle at absolute position pos, as step() and prefill() use them:
  /// the angle pos * inv_freq[i] in double (exact below pos 2^29), its cos and sin by recur's own
  /// double routine, rounded to float. cos_out, sin_out: (d_head / 2).
  void rotary(std::int64_t pos, float* cos_out, float* sin_out) const;
  /// inv_freq[i] = float(rope_theta^(-2i / d_head)), (d_head / 2).
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  void check_state(const WindowState& state, const char* call) const;

  WindowAttentionConfig config_;
  float scale_ = 1.0f;
  std::vector<float> inv_freq_;  // (d_head / 2)
};

}  // namespace recur
