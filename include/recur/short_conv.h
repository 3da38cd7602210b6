// A depthwise causal convolution over time with a short kernel (PyTorch's Conv1d with groups =
// channels, padding kernel_size - 1, the outputs past the input's length dropped): Based's
// BaseConv, flash-linear-attention's ShortConvolution, Mamba-2's conv1d, LFM2's conv blocks.
// Channel c of token t sees only channel c of tokens t - K + 1 .. t:
//
//   y_t[c] = (((w[c][0] x_{t-K+1}[c] + w[c][1] x_{t-K+2}[c]) + ...) + w[c][K-1] x_t[c]) + b[c]
//
// with zeros before the start of the sequence. Each output element is that one chain, with a
// separate rounding after every multiply and every add (no fused multiply-add), in step() and in
// prefill() alike, so that prefill in any split gives the bytes of step() token by token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "recur/types.h"

namespace recur {

namespace detail {
struct DeclaredBuffers;  // engine/util/state_buffers.h: a state's record, load, clone and reset
struct ShortConvChannels;  // engine/attention/short_conv_channels.h: channel ranges on threads
}  // namespace detail

class ShortConvolution;

/// The state of one convolution for one sequence: the last kernel_size - 1 inputs, oldest first,
/// zero before the sequence's start, and the count of tokens seen. Constant size. Copying is
/// explicit: clone().
class ShortConvState {
 public:
  ShortConvState(ShortConvState&&) noexcept = default;
  ShortConvState& operator=(ShortConvState&&) noexcept = default;
  ShortConvState(const ShortConvState&) = delete;
  ShortConvState& operator=(const ShortConvState&) = delete;

  /// A deep copy: the copy and this state evolve independently.
  ShortConvState clone() const;
  /// Back to the start of a sequence (no past inputs, no tokens seen).
  void reset();

  std::int64_t n_tokens() const { return n_tokens_; }
  int channels() const { return channels_; }
  int kernel_size() const { return kernel_size_; }
  /// Bytes this state holds, past inputs and step() workspace together. Constant.
  std::size_t bytes() const;

  /// The past inputs, (kernel_size - 1, channels), oldest first.
  RowMatrix history() const;

  /// The raw bytes of the past inputs and the token count, for exact comparison and saving.
  std::vector<unsigned char> raw_bytes() const;
  /// raw_bytes().size(), without the copy.
  std::size_t raw_size() const;
  /// Restores what raw_bytes() returned for a state of the same shape. Throws FormatError if the
  /// size differs, an input is not finite or the count is negative; the state is unchanged then.
  void load_raw_bytes(const unsigned char* data, std::size_t size);

 private:
  friend class ShortConvolution;
  ShortConvState(int channels, int kernel_size);
  // Declared as its buffers (engine/util/state_buffers.h): the record, load, clone and reset.
  friend struct detail::DeclaredBuffers;
  static constexpr const char* kName = "ShortConvState";
  static constexpr std::uint32_t kFormat = 0;  // no format word
  static constexpr bool kGrows = false;
  template <class Self, class F>
  static void buffers(Self& s, F&& f);
  ShortConvState blank(std::int64_t n_tokens) const;

  int channels_ = 0;
  int kernel_size_ = 0;
  std::int64_t n_tokens_ = 0;
  std::vector<float> history_;  // (kernel_size - 1, channels), oldest first
  std::vector<float> input_;    // (channels) step()'s copy of x, which may alias y
};

/// One short convolution. Immutable after construction: share it between threads, each thread
/// with its own ShortConvState.
class ShortConvolution {
 public:
  /// weights: (channels, kernel_size), PyTorch's Conv1d weight [channels, 1, kernel_size]
  /// without its middle axis: column kernel_size - 1 multiplies the current input, column 0 the
  /// input kernel_size - 1 tokens back. bias: (channels), or empty for none.
  explicit ShortConvolution(const ConstMatrixRef& weights,
                            const Eigen::VectorXf& bias = Eigen::VectorXf());

  int channels() const { return channels_; }
  int kernel_size() const { return kernel_size_; }
  bool has_bias() const { return !bias_.empty(); }

  /// A fresh state for one sequence.
  ShortConvState make_state() const;

  /// One token: x, y (channels); y may be x. Allocates nothing.
  void step(ShortConvState& state, ConstVectorRef x, VectorRef y) const;
  /// As above, returning y (this one allocates it).
  Eigen::VectorXf step(ShortConvState& state, ConstVectorRef x) const;

  /// T tokens: X, Y (T, channels). Y must not overlap X.
  void prefill(ShortConvState& state, const ConstMatrixRef& X, MatrixRef Y) const;
  /// As above, returning Y.
  RowMatrix prefill(ShortConvState& state, const ConstMatrixRef& X) const;

 private:
  friend struct detail::ShortConvChannels;
  void check_state(const ShortConvState& state, const char* call) const;
  // Channels [begin, end) of T tokens, rows ldx and ldy floats apart (for one token y may be
  // x): the outputs and the history of those channels alone, no checks, the count untouched.
  void convolve(ShortConvState& state, const float* x, std::int64_t ldx, float* y,
                std::int64_t ldy, std::int64_t T, int begin, int end) const;
  static void count_tokens(ShortConvState& state, std::int64_t T) { state.n_tokens_ += T; }

  int channels_ = 0;
  int kernel_size_ = 0;
  std::vector<float> taps_;  // (kernel_size, channels): taps_[k * channels + c] = weights(c, k)
  std::vector<float> bias_;  // (channels), or empty
};

}  // namespace recur
