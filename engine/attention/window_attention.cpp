#include "recur/window_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention/rotary.h"
#include "kernels/dispatch.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"
#include "util/state_buffers.h"

namespace recur {

namespace {

// One head's ring and the layout it is read with.
struct Ring {
  float* keys;    // (d, slots_padded): column = slot
  float* values;  // (slots, dp): row = slot
  int d, dp, slots, slots_padded;
};

// Head `head`'s ring in a state's keys (n_heads, d, slots_padded) and values (n_heads, slots, dp).
Ring ring_at(std::vector<float>& keys, std::vector<float>& values, int d, int dp, int slots,
             int slots_padded, int head) {
  const auto h = static_cast<std::size_t>(head);
  const std::size_t key_floats =
      static_cast<std::size_t>(d) * static_cast<std::size_t>(slots_padded);
  const std::size_t value_floats = static_cast<std::size_t>(slots) * static_cast<std::size_t>(dp);
  return Ring{keys.data() + h * key_floats, values.data() + h * value_floats, d, dp, slots,
              slots_padded};
}

// Key columns and value rows are padded to whole vectors of the widest target (16 lanes).
constexpr int kPad = 16;
int padded(int n) { return (n + kPad - 1) / kPad * kPad; }

// The rotation of one head's row by the position's cos and sin (GPT-NeoX halves):
//   out[i] = x1 * c - x2 * s,  out[i + half] = x2 * c + x1 * s,  x1 = x[i], x2 = x[i + half]
// then times `scale` (1 for keys: x * 1 == x exactly, so keys are not scaled in effect). Two
// multiplies and an add or subtract, each rounded (-ffp-contract=off): plain code, so step and
// prefill, and every instruction set, round alike.
void rotate(const float* x, const float* cos_t, const float* sin_t, int half, float scale,
            float* out) {
  for (int i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half], c = cos_t[i], s = sin_t[i];
    out[i] = (x1 * c - x2 * s) * scale;
    out[i + half] = (x2 * c + x1 * s) * scale;
  }
}

// Scratch of one query.
struct QueryScratch {
  float* scores;   // (slots_padded)
  float* weights;  // (slots)
  float* acc;      // (dp)
};

// Puts the token at absolute position pos (its rotated key, its value) in its slot, then attends
// the rotated, scaled query qs over the ring's keys from pos - window to pos. The one routine of
// step() and prefill(); the order of every sum is fixed by the positions alone:
//   * score of each slot: one FMA chain over the head's d elements (kernels' column_dots);
//   * m = the largest score, visiting keys oldest first; w = exp(score - m) by recur's own exp;
//   * l = w_oldest + ... + w_newest, left to right;
//   * acc_j = one FMA chain over the keys oldest first (weighted_rows, called once per
//     contiguous run of slots, the chain carried through acc);
//   * out_j = acc_j * (1 / l).
void attend(const kernels::Kernels& kern, const Ring& r, const float* qs, const float* k_rot,
            const float* v, std::int64_t pos, const QueryScratch& s, float* out) {
  const int slot = static_cast<int>(pos % r.slots);
  for (int i = 0; i < r.d; ++i) r.keys[static_cast<std::size_t>(i) * static_cast<std::size_t>(r.slots_padded) + static_cast<std::size_t>(slot)] = k_rot[i];
  std::memcpy(r.values + static_cast<std::size_t>(slot) * static_cast<std::size_t>(r.dp), v,
              sizeof(float) * static_cast<std::size_t>(r.d));

  const int n = static_cast<int>(std::min<std::int64_t>(pos + 1, r.slots));
  // Before the ring has wrapped, the keys are slots 0 .. pos: only those columns are needed.
  const int columns = n < r.slots ? padded(n) : r.slots_padded;
  kern.column_dots(qs, r.keys, r.d, r.slots_padded, columns, s.scores);
  const int first = static_cast<int>((pos + 1 - n) % r.slots);  // the oldest key's slot
  const int run = std::min(n, r.slots - first);                 // slots first .. end
  std::memcpy(s.weights, s.scores + first, sizeof(float) * static_cast<std::size_t>(run));
  std::memcpy(s.weights + run, s.scores, sizeof(float) * static_cast<std::size_t>(n - run));
  float m = s.weights[0];
  for (int j = 1; j < n; ++j) m = s.weights[j] > m ? s.weights[j] : m;
  kern.exp_minus(s.weights, s.weights, n, m);
  float l = 0.0f;
  for (int j = 0; j < n; ++j) l += s.weights[j];
  std::fill(s.acc, s.acc + r.dp, 0.0f);
  kern.weighted_rows(s.acc, r.values + static_cast<std::size_t>(first) * static_cast<std::size_t>(r.dp), s.weights, run, r.dp);
  if (n > run) kern.weighted_rows(s.acc, r.values, s.weights + run, n - run, r.dp);
  const float inv = 1.0f / l;
  for (int j = 0; j < r.d; ++j) out[j] = s.acc[j] * inv;
}

}  // namespace


// ---------------------------------------------------------------------------------------------
// WindowState

WindowState::WindowState(int n_heads, int d_head, int window)
    : n_heads_(n_heads),
      d_head_(d_head),
      window_(window),
      slots_(window + 1),
      slots_padded_(padded(window + 1)),
      d_padded_(padded(d_head)),
      keys_(static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(d_head) *
                static_cast<std::size_t>(slots_padded_),
            0.0f),
      values_(static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(slots_) *
                  static_cast<std::size_t>(d_padded_),
              0.0f),
      workspace_(static_cast<std::size_t>(3 * d_head + slots_padded_ + slots_ + d_padded_), 0.0f) {}

// The record holds the rings as they lie in memory, padding included: every head's keys, then
// every head's values.
template <class Self, class F>
void WindowState::buffers(Self& s, F&& f) {
  f(detail::contiguous("keys", s.keys_.data(), s.keys_.size()));
  f(detail::contiguous("values", s.values_.data(), s.values_.size()));
}

WindowState WindowState::blank(std::int64_t n_tokens) const {
  WindowState s(n_heads_, d_head_, window_);
  s.n_tokens_ = n_tokens;
  return s;
}

WindowState WindowState::clone() const { return detail::DeclaredBuffers::clone(*this); }
void WindowState::reset() { detail::DeclaredBuffers::reset(*this); }
std::vector<unsigned char> WindowState::raw_bytes() const {
  return detail::DeclaredBuffers::raw_bytes(*this);
}
void WindowState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  detail::DeclaredBuffers::load(*this, data, size);
}
std::size_t WindowState::raw_size() const { return detail::DeclaredBuffers::raw_size(*this); }

std::size_t WindowState::bytes() const {
  return sizeof(*this) + (keys_.size() + values_.size() + workspace_.size()) * sizeof(float);
}


// ---------------------------------------------------------------------------------------------
// WindowAttention

WindowAttention::WindowAttention(const WindowAttentionConfig& config) : config_(config) {
  constexpr const char* call = "WindowAttention";
  constexpr int kMaxDim = 1 << 16;
  if (config.n_heads < 1 || config.n_heads > kMaxDim)
    detail::throw_argument(call, "n_heads is {}, expected 1 to {}", config.n_heads, kMaxDim);
  if (config.d_head < 2 || config.d_head > kMaxDim || config.d_head % 2 != 0)
    detail::throw_argument(call, "d_head is {}, expected an even number from 2 to {}",
                           config.d_head, kMaxDim);
  if (config.window < 0 || config.window > kMaxDim)
    detail::throw_argument(call, "window is {}, expected 0 to {}", config.window, kMaxDim);
  if (!std::isfinite(config.rope_theta) || config.rope_theta <= 1.0f)
    detail::throw_argument(call, "rope_theta is {}, expected a finite number > 1",
                           config.rope_theta);
  if (!std::isfinite(config.scale) || config.scale < 0.0f)
    detail::throw_argument(call, "scale is {}, expected a finite number >= 0 (0: default)",
                           config.scale);
  scale_ = config.scale != 0.0f ? config.scale
                                : static_cast<float>(1.0 / std::sqrt(double(config.d_head)));
  // In float, as Based's (flash-attn's) RotaryEmbedding keeps it. std::pow runs once per layer:
  // a libm that differed in the last bit of a double would change the float only where the
  // double lies within an ulp of a float rounding boundary.
  const int half = config.d_head / 2;
  inv_freq_.resize(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    inv_freq_[static_cast<std::size_t>(i)] = static_cast<float>(
        1.0 / std::pow(double(config.rope_theta), 2.0 * double(i) / double(config.d_head)));
}

WindowState WindowAttention::make_state() const {
  return WindowState(config_.n_heads, config_.d_head, config_.window);
}

void WindowAttention::check_state(const WindowState& s, const char* call) const {
  if (s.n_heads_ != config_.n_heads || s.d_head_ != config_.d_head || s.window_ != config_.window)
    detail::throw_argument(call,
                           "state was made for another layer: state has n_heads {}, d_head {}, "
                           "window {}; layer has n_heads {}, d_head {}, window {}",
                           s.n_heads_, s.d_head_, s.window_, config_.n_heads, config_.d_head,
                           config_.window);
}

void WindowAttention::rotary(std::int64_t pos, float* cos_out, float* sin_out) const {
  for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
    // pos < 2^29 and a 24-bit inv_freq: the product fits double's 53 bits exactly.
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq_[i]);
    double s = 0.0, c = 0.0;
    sincos_fixed(angle, &s, &c);
    cos_out[i] = static_cast<float>(c);
    sin_out[i] = static_cast<float>(s);
  }
}

void WindowAttention::step(WindowState& state, ConstVectorRef q, ConstVectorRef k,
                           ConstVectorRef v, VectorRef out) const {
  constexpr const char* call = "WindowAttention::step";
  check_state(state, call);
  const int H = config_.n_heads, d = config_.d_head;
  for (const auto& [name, x] : {std::pair<const char*, Eigen::Index>{"q", q.size()},
                                {"k", k.size()}, {"v", v.size()}, {"out", out.size()}}) {
    if (x != Eigen::Index(H) * d)
      detail::throw_shape(call, "{} has {} elements, expected n_heads * d_head = {} * {} = {}",
                          name, x, H, d, Eigen::Index(H) * d);
  }
  detail::check_finite(call, "q", q.data(), 1, q.size(), q.size());
  detail::check_finite(call, "k", k.data(), 1, k.size(), k.size());
  detail::check_finite(call, "v", v.data(), 1, v.size(), v.size());

  const int half = d / 2;
  float* cos_t = state.workspace_.data();  // (half)
  float* sin_t = cos_t + half;             // (half)
  float* qs = sin_t + half;                // (d)
  float* kr = qs + d;                      // (d)
  const QueryScratch scratch{kr + d, kr + d + state.slots_padded_,
                             kr + d + state.slots_padded_ + state.slots_};
  const std::int64_t pos = state.n_tokens_;
  rotary(pos, cos_t, sin_t);
  const kernels::Kernels& kern = kernels::active();
  for (int h = 0; h < H; ++h) {
    rotate(k.data() + h * d, cos_t, sin_t, half, 1.0f, kr);
    rotate(q.data() + h * d, cos_t, sin_t, half, scale_, qs);
    attend(kern,
           ring_at(state.keys_, state.values_, state.d_head_, state.d_padded_, state.slots_,
                   state.slots_padded_, h),
           qs, kr, v.data() + h * d, pos, scratch, out.data() + h * d);
  }
  ++state.n_tokens_;
}

Eigen::VectorXf WindowAttention::step(WindowState& state, ConstVectorRef q, ConstVectorRef k,
                                      ConstVectorRef v) const {
  Eigen::VectorXf out(Eigen::Index(config_.n_heads) * config_.d_head);
  step(state, q, k, v, out);
  return out;
}

void WindowAttention::prefill(WindowState& state, const ConstMatrixRef& Q,
                              const ConstMatrixRef& K, const ConstMatrixRef& V, MatrixRef O,
                              const PrefillOptions& options) const {
  constexpr const char* call = "WindowAttention::prefill";
  check_state(state, call);
  const int H = config_.n_heads, d = config_.d_head;
  const Eigen::Index T = Q.rows();
  detail::check_heads_shape(call, "Q", Q, T, H, d, "d_head");
  detail::check_heads_shape(call, "K", K, T, H, d, "d_head");
  detail::check_heads_shape(call, "V", V, T, H, d, "d_head");
  detail::check_heads_shape(call, "O", O, T, H, d, "d_head");
  detail::check_prefill_options(call, options.chunk, options.threads);
  detail::check_finite(call, "Q", Q.data(), T, Q.cols(), Q.outerStride());
  detail::check_finite(call, "K", K.data(), T, K.cols(), K.outerStride());
  detail::check_finite(call, "V", V.data(), T, V.cols(), V.outerStride());
  if (T == 0) return;

  const int half = d / 2;
  const int chunk = static_cast<int>(std::min<Eigen::Index>(options.chunk, T));
  const int threads = std::min(detail::resolve_threads(options.threads), H);
  // Allocated before the state changes, per worker: the chunk's cos and sin (chunk, half) each,
  // then what step() keeps in the state's workspace. One parallel region for the whole call
  // (a region per chunk costs more than a chunk's work when the cores are shared); each worker
  // computes the rotary table itself, which is cheap beside its heads' attention.
  const std::size_t table = static_cast<std::size_t>(chunk) * static_cast<std::size_t>(half);
  const std::size_t per_worker =
      2 * table + static_cast<std::size_t>(2 * d + state.slots_padded_ + state.slots_ + state.d_padded_);
  std::vector<float> scratch(per_worker * static_cast<std::size_t>(threads), 0.0f);
  const std::int64_t pos0 = state.n_tokens_;
  const kernels::Kernels& kern = kernels::active();

  // Each head's ring is its own: a worker walks its heads' tokens in order, exactly as step().
  detail::parallel_ranges(H, threads, [&](int h0, int h1, int worker) {
    float* cos_t = scratch.data() + per_worker * static_cast<std::size_t>(worker);  // (chunk, half)
    float* sin_t = cos_t + table;                                                     // (chunk, half)
    float* qs = sin_t + table;                                                        // (d)
    float* kr = qs + d;                                                               // (d)
    const QueryScratch qscratch{kr + d, kr + d + state.slots_padded_,
                                kr + d + state.slots_padded_ + state.slots_};
    for (Eigen::Index b0 = 0; b0 < T; b0 += chunk) {
      const int n = static_cast<int>(std::min<Eigen::Index>(chunk, T - b0));
      for (int t = 0; t < n; ++t)
        rotary(pos0 + b0 + t, cos_t + static_cast<std::size_t>(t * half),
               sin_t + static_cast<std::size_t>(t * half));
      for (int h = h0; h < h1; ++h) {
        const Ring r = ring_at(state.keys_, state.values_, state.d_head_, state.d_padded_,
                               state.slots_, state.slots_padded_, h);
        const Eigen::Index col = Eigen::Index(h) * d;
        for (int t = 0; t < n; ++t) {
          const Eigen::Index row = b0 + t;
          const float* c = cos_t + static_cast<std::size_t>(t * half);
          const float* s = sin_t + static_cast<std::size_t>(t * half);
          rotate(K.data() + row * K.outerStride() + col, c, s, half, 1.0f, kr);
          rotate(Q.data() + row * Q.outerStride() + col, c, s, half, scale_, qs);
          attend(kern, r, qs, kr, V.data() + row * V.outerStride() + col, pos0 + row, qscratch,
                 O.data() + row * O.outerStride() + col);
        }
      }
    }
  });
  state.n_tokens_ += T;
}

RowMatrix WindowAttention::prefill(WindowState& state, const ConstMatrixRef& Q,
                                   const ConstMatrixRef& K, const ConstMatrixRef& V,
                                   const PrefillOptions& options) const {
  RowMatrix O(Q.rows(), Eigen::Index(config_.n_heads) * config_.d_head);
  prefill(state, Q, K, V, O, options);
  return O;
}

}  // namespace recur
