#include "recur/short_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/finite.h"
#include "util/check.h"
#include "util/state_buffers.h"

namespace recur {
namespace {

// The one chain of every output element, shared by step() and prefill() (C channels from
// `taps`, whose rows are tap_stride apart):
//   y[c] = (((taps[0][c] * in[0][c] + taps[1][c] * in[1][c]) + ...) + taps[K-1][c] * in[K-1][c])
//          + bias[c]
// in[k] is the input K-1-k tokens back. The tree is compiled with -ffp-contract=off, so every
// multiply and add rounds on its own whatever the compiler vectorizes: the bytes depend only on
// the numbers, never on the loop's shape or the instruction set.
void conv_token(const float* taps, std::size_t tap_stride, const float* bias,
                const float* const* in, int K, int C, float* y) {
  for (int c = 0; c < C; ++c) y[c] = taps[c] * in[0][c];
  for (int k = 1; k < K; ++k) {
    const float* t = taps + static_cast<std::size_t>(k) * tap_stride;
    const float* x = in[k];
    for (int c = 0; c < C; ++c) y[c] = y[c] + t[c] * x[c];
  }
  if (bias != nullptr)
    for (int c = 0; c < C; ++c) y[c] = y[c] + bias[c];
}

// Whether [a, a + na) and [b, b + nb) share a byte.
bool overlaps(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return na != 0 && nb != 0 && pa < pb + nb * sizeof(float) && pb < pa + na * sizeof(float);
}

// Largest kernel accepted: the chain keeps K input pointers on the stack.
constexpr int kMaxKernel = 64;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ShortConvState

ShortConvState::ShortConvState(int channels, int kernel_size)
    : channels_(channels),
      kernel_size_(kernel_size),
      history_(static_cast<std::size_t>(kernel_size - 1) * static_cast<std::size_t>(channels), 0.0f),
      input_(static_cast<std::size_t>(channels), 0.0f) {}

// The record holds the past inputs, (kernel_size - 1, channels), oldest first.
template <class Self, class F>
void ShortConvState::buffers(Self& s, F&& f) {
  const auto C = static_cast<std::size_t>(s.channels_);
  f(detail::block("history", s.history_.data(), s.history_.size() / C, C, C));
}

ShortConvState ShortConvState::blank(std::int64_t n_tokens) const {
  ShortConvState s(channels_, kernel_size_);
  s.n_tokens_ = n_tokens;
  return s;
}

ShortConvState ShortConvState::clone() const { return detail::DeclaredBuffers::clone(*this); }
void ShortConvState::reset() { detail::DeclaredBuffers::reset(*this); }
std::size_t ShortConvState::raw_size() const { return detail::DeclaredBuffers::raw_size(*this); }
std::vector<unsigned char> ShortConvState::raw_bytes() const {
  return detail::DeclaredBuffers::raw_bytes(*this);
}
void ShortConvState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  detail::DeclaredBuffers::load(*this, data, size);
}

std::size_t ShortConvState::bytes() const {
  return sizeof(*this) + (history_.size() + input_.size()) * sizeof(float);
}

RowMatrix ShortConvState::history() const {
  RowMatrix h(kernel_size_ - 1, channels_);
  if (!history_.empty()) std::memcpy(h.data(), history_.data(), history_.size() * sizeof(float));
  return h;
}


// ---------------------------------------------------------------------------------------------
// ShortConvolution

ShortConvolution::ShortConvolution(const ConstMatrixRef& weights, const Eigen::VectorXf& bias) {
  constexpr const char* call = "ShortConvolution";
  constexpr Eigen::Index kMaxChannels = 1 << 20;
  if (weights.rows() < 1 || weights.rows() > kMaxChannels)
    detail::throw_shape(call, "weights have shape ({}, {}): channels (rows) must be 1 to {}",
                        weights.rows(), weights.cols(), kMaxChannels);
  if (weights.cols() < 1 || weights.cols() > kMaxKernel)
    detail::throw_shape(call, "weights have shape ({}, {}): kernel_size (columns) must be 1 to {}",
                        weights.rows(), weights.cols(), kMaxKernel);
  if (bias.size() != 0 && bias.size() != weights.rows())
    detail::throw_shape(call, "bias has {} elements, expected 0 (none) or channels = {}",
                        bias.size(), weights.rows());
  detail::check_finite(call, "weights", weights.data(), weights.rows(), weights.cols(),
                       weights.outerStride());
  detail::check_finite(call, "bias", bias.data(), 1, bias.size(), bias.size());
  channels_ = static_cast<int>(weights.rows());
  kernel_size_ = static_cast<int>(weights.cols());
  const auto C = static_cast<std::size_t>(channels_);
  taps_.resize(static_cast<std::size_t>(kernel_size_) * C);
  for (int k = 0; k < kernel_size_; ++k)
    for (int c = 0; c < channels_; ++c) taps_[static_cast<std::size_t>(k) * C + static_cast<std::size_t>(c)] = weights(c, k);
  bias_.assign(bias.data(), bias.data() + bias.size());
}

ShortConvState ShortConvolution::make_state() const {
  return ShortConvState(channels_, kernel_size_);
}

void ShortConvolution::check_state(const ShortConvState& s, const char* call) const {
  if (s.channels_ != channels_ || s.kernel_size_ != kernel_size_)
    detail::throw_argument(call,
                           "state was made for another convolution: state has {} channels and "
                           "kernel size {}; the convolution has {} and {}",
                           s.channels_, s.kernel_size_, channels_, kernel_size_);
}

void ShortConvolution::step(ShortConvState& state, ConstVectorRef x, VectorRef y) const {
  constexpr const char* call = "ShortConvolution::step";
  check_state(state, call);
  if (x.size() != channels_)
    detail::throw_shape(call, "x has {} elements, expected channels = {}", x.size(), channels_);
  if (y.size() != channels_)
    detail::throw_shape(call, "y has {} elements, expected channels = {}", y.size(), channels_);
  detail::check_finite(call, "x", x.data(), 1, x.size(), x.size());

  convolve(state, x.data(), channels_, y.data(), channels_, 1, 0, channels_);
  ++state.n_tokens_;
}

Eigen::VectorXf ShortConvolution::step(ShortConvState& state, ConstVectorRef x) const {
  Eigen::VectorXf y(channels_);
  step(state, x, y);
  return y;
}

void ShortConvolution::prefill(ShortConvState& state, const ConstMatrixRef& X, MatrixRef Y) const {
  constexpr const char* call = "ShortConvolution::prefill";
  check_state(state, call);
  const Eigen::Index T = X.rows();
  if (X.cols() != channels_)
    detail::throw_shape(call, "X has shape ({}, {}), expected (T, channels) = ({}, {})", X.rows(),
                        X.cols(), T, channels_);
  if (Y.rows() != T || Y.cols() != channels_)
    detail::throw_shape(call, "Y has shape ({}, {}), expected (T, channels) = ({}, {})", Y.rows(),
                        Y.cols(), T, channels_);
  if (T == 0) return;
  const auto span = [](Eigen::Index rows, Eigen::Index cols, Eigen::Index stride) {
    return static_cast<std::size_t>((rows - 1) * stride + cols);
  };
  if (overlaps(X.data(), span(T, X.cols(), X.outerStride()), Y.data(),
               span(T, Y.cols(), Y.outerStride())))
    detail::throw_argument(call, "Y overlaps X: later tokens read inputs that earlier outputs "
                                 "would overwrite");
  detail::check_finite(call, "X", X.data(), T, X.cols(), X.outerStride());

  convolve(state, X.data(), X.outerStride(), Y.data(), Y.outerStride(), T, 0, channels_);
  state.n_tokens_ += T;
}

RowMatrix ShortConvolution::prefill(ShortConvState& state, const ConstMatrixRef& X) const {
  RowMatrix Y(X.rows(), channels_);
  prefill(state, X, Y);
  return Y;
}

// One routine for step() and prefill(), over channels [begin, end) alone, so that threads can
// take disjoint ranges of one sequence (engine/attention/short_conv_channels.h).
void ShortConvolution::convolve(ShortConvState& state, const float* x, std::int64_t ldx, float* y,
                                std::int64_t ldy, std::int64_t T, int begin, int end) const {
  const int K = kernel_size_, width = end - begin;
  const auto Cs = static_cast<std::size_t>(channels_), at = static_cast<std::size_t>(begin);
  const auto bytes = static_cast<std::size_t>(width) * sizeof(float);
  const float* taps = taps_.data() + at;
  const float* bias = bias_.empty() ? nullptr : bias_.data() + at;
  float* history = state.history_.data() + at;
  // One token's x is read after y is written when the two are one array: work from a copy.
  if (T == 1) {
    std::memcpy(state.input_.data() + at, x + at, bytes);
    x = state.input_.data();
    ldx = channels_;
  }
  // Input r tokens after the call's first (r < 0: from the state's history), at channel begin.
  const auto input = [&](std::int64_t r) -> const float* {
    if (r >= 0) return x + r * ldx + at;
    return history + static_cast<std::size_t>(r + K - 1) * Cs;
  };
  const float* in[kMaxKernel];
  for (std::int64_t t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) in[k] = input(t - (K - 1) + k);
    conv_token(taps, Cs, bias, in, K, width, y + t * ldy + at);
  }
  // The new history: the last K-1 inputs of (history, x). Row j takes the input T - (K-1) + j;
  // where that is still in the old history it lies at a higher row, so ascending j reads before
  // it writes.
  for (int j = 0; j + 1 < K; ++j) {
    float* dst = history + static_cast<std::size_t>(j) * Cs;
    const float* src = input(T - (K - 1) + j);
    if (src != dst) std::memcpy(dst, src, bytes);
  }
}

}  // namespace recur
