#include "recur/gla_recurrence.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/gated_kernels.h"
#include "kernels/linear_kernels.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"
#include "util/state_buffers.h"

namespace recur {
namespace {

constexpr std::size_t kAlign = 64;

int round_up(int x, int m) { return (x + m - 1) / m * m; }
std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// Throws, as `call`, unless every element of a (rows, cols) block is in [0, 1] (NaN is not);
// run after check_finite, so that what remains is a finite number out of range.
void check_unit_interval(const char* call, const char* name, const float* data,
                         std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    bool ok = true;
    for (std::int64_t c = 0; c < cols; ++c) ok &= row[c] >= 0.0f && row[c] <= 1.0f;
    if (ok) continue;
    for (std::int64_t c = 0; c < cols; ++c)
      if (!(row[c] >= 0.0f && row[c] <= 1.0f)) {
        if (rows == 1)
          detail::throw_argument(call, "{} holds {} at element {} of {}, expected a decay in [0, 1]",
                                 name, row[c], c, cols);
        detail::throw_argument(call,
                               "{} holds {} at row {}, column {} of a ({}, {}) matrix, expected a "
                               "decay in [0, 1]",
                               name, row[c], r, c, rows, cols);
      }
  }
}

// One head's decay per token (kPerHeadToken: a[t * stride], n tokens) in the walk's tiles of a
// per-channel decay: the value on each of the d_key rows, 0 on the padding rows, as
// gather_tiles writes a per-channel decay. The tiles of d_key rows alone are all alike: the
// first is written, the others copied from it.
void fill_decay_tiles(const float* a, std::int64_t stride, int n, int dk, int Dp, float* tiles) {
  constexpr int R = kernels::kTileRows;
  const std::int64_t tile_stride = kernels::tile_stride_of(n);
  for (int t = 0; t < n; ++t) std::fill(tiles + t * R, tiles + (t + 1) * R, a[t * stride]);
  const int alike = std::min(dk, Dp) / R;
  for (int b = 1; b < alike; ++b)
    std::memcpy(tiles + b * tile_stride, tiles, sizeof(float) * static_cast<std::size_t>(n * R));
  for (int i = alike * R; i < Dp; ++i) {
    float* row = tiles + (i / R) * tile_stride + i % R;
    for (int t = 0; t < n; ++t) row[t * R] = i < dk ? a[t * stride] : 0.0f;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// GlaState

GlaState::Buffer GlaState::allocate(std::size_t floats) {
  Buffer b;
  const std::size_t bytes = floats * sizeof(float);
  b.storage.reset(new unsigned char[bytes + kAlign]);
  const auto addr = reinterpret_cast<std::uintptr_t>(b.storage.get());
  b.data = reinterpret_cast<float*>(b.storage.get() + (round_up(addr, kAlign) - addr));
  b.floats = floats;
  std::memset(b.data, 0, bytes);
  return b;
}

GlaState::GlaState(int n_heads, int d_key, int d_value)
    : n_heads_(n_heads),
      d_key_(d_key),
      d_value_(d_value),
      d_key_padded_(round_up(d_key, kernels::kRowPad)),
      d_value_padded_(round_up(d_value, kernels::kTileCols)) {
  const auto Dp = static_cast<std::size_t>(d_key_padded_);
  const auto dvp = static_cast<std::size_t>(d_value_padded_);
  head_floats_ = round_up(Dp * dvp, kAlign / sizeof(float));
  const auto H = static_cast<std::size_t>(n_heads_);
  S_ = allocate(head_floats_ * H);
  workspace_ = allocate(H * (3 * Dp + 2 * dvp));
}

// The record holds each head's S without its padding (which stays zero): (d_key, d_value).
template <class Self, class F>
void GlaState::buffers(Self& s, F&& f) {
  for (int h = 0; h < s.n_heads_; ++h)
    f(detail::block("S", s.head(h), std::size_t(s.d_key_), std::size_t(s.d_value_),
                    std::size_t(s.d_value_padded_), h));
}

GlaState GlaState::blank(std::int64_t n_tokens) const {
  GlaState s(n_heads_, d_key_, d_value_);
  s.n_tokens_ = n_tokens;
  return s;
}

GlaState GlaState::clone() const { return detail::DeclaredBuffers::clone(*this); }
void GlaState::reset() { detail::DeclaredBuffers::reset(*this); }
std::vector<unsigned char> GlaState::raw_bytes() const {
  return detail::DeclaredBuffers::raw_bytes(*this);
}
void GlaState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  detail::DeclaredBuffers::load(*this, data, size);
}
std::size_t GlaState::raw_size() const { return detail::DeclaredBuffers::raw_size(*this); }

std::size_t GlaState::bytes() const {
  return sizeof(*this) + (S_.floats + workspace_.floats) * sizeof(float) + 2 * kAlign;
}

Eigen::MatrixXd GlaState::S(int h) const {
  if (h < 0 || h >= n_heads_)
    detail::throw_argument("GlaState::S", "head {} is out of range [0, {})", h, n_heads_);
  const float* s = head(h);
  Eigen::MatrixXd out(d_key_, d_value_);
  for (int i = 0; i < d_key_; ++i)
    for (int j = 0; j < d_value_; ++j) out(i, j) = double(s[i * d_value_padded_ + j]);
  return out;
}


// ---------------------------------------------------------------------------------------------
// GlaRecurrence

GlaRecurrence::GlaRecurrence(const GlaRecurrenceConfig& config) : config_(config) {
  constexpr const char* call = "GlaRecurrence";
  constexpr int kMaxDim = 1 << 16;
  if (config.n_heads < 1 || config.n_heads > kMaxDim)
    detail::throw_argument(call, "n_heads is {}, expected 1 to {}", config.n_heads, kMaxDim);
  if (config.d_key < 1 || config.d_key > kMaxDim)
    detail::throw_argument(call, "d_key is {}, expected 1 to {}", config.d_key, kMaxDim);
  if (config.d_value < 1 || config.d_value > kMaxDim)
    detail::throw_argument(call, "d_value is {}, expected 1 to {}", config.d_value, kMaxDim);
  if (config.decay == DecayKind::kPerHead) {
    if (config.head_decay.size() != static_cast<std::size_t>(config.n_heads))
      detail::throw_shape(call, "head_decay has {} values, expected n_heads = {} (decay per head)",
                          config.head_decay.size(), config.n_heads);
    for (std::size_t h = 0; h < config.head_decay.size(); ++h)
      if (!(config.head_decay[h] >= 0.0f && config.head_decay[h] <= 1.0f))
        detail::throw_argument(call, "head_decay[{}] is {}, expected a decay in [0, 1]", h,
                               config.head_decay[h]);
  } else if (config.decay == DecayKind::kPerChannel ||
             config.decay == DecayKind::kPerHeadToken) {
    if (!config.head_decay.empty())
      detail::throw_shape(call,
                          "head_decay has {} values, expected none (the decay is per {}, "
                          "given with each token)",
                          config.head_decay.size(),
                          config.decay == DecayKind::kPerChannel ? "channel" : "head");
  } else {
    detail::throw_argument(call, "decay is {}, not a DecayKind", static_cast<int>(config.decay));
  }
  if (!std::isfinite(config.scale) || config.scale < 0.0f)
    detail::throw_argument(call, "scale is {}, expected a finite number >= 0 (0: default)",
                           config.scale);
  if (config.qk_heads < 0 || config.qk_heads > config.n_heads ||
      (config.qk_heads > 0 && config.n_heads % config.qk_heads != 0))
    detail::throw_argument(call, "qk_heads is {}, expected 0 (n_heads) or a divisor of n_heads {}",
                           config.qk_heads, config.n_heads);
  qk_heads_ = config.qk_heads > 0 ? config.qk_heads : config.n_heads;
  scale_ = config.scale != 0.0f ? config.scale
                                : static_cast<float>(1.0 / std::sqrt(double(config.d_key)));
}

GlaState GlaRecurrence::make_state() const {
  return GlaState(config_.n_heads, config_.d_key, config_.d_value);
}

void GlaRecurrence::check_state(const GlaState& s, const char* call) const {
  if (s.n_heads_ != config_.n_heads || s.d_key_ != config_.d_key ||
      s.d_value_ != config_.d_value)
    detail::throw_argument(call,
                           "state was made for another layer: state has n_heads {}, d_key {}, "
                           "d_value {}; layer has n_heads {}, d_key {}, d_value {}",
                           s.n_heads_, s.d_key_, s.d_value_, config_.n_heads, config_.d_key,
                           config_.d_value);
}

void GlaRecurrence::step(GlaState& state, ConstVectorRef q, ConstVectorRef k,
                          ConstVectorRef v, ConstVectorRef alpha, VectorRef out) const {
  constexpr const char* call = "GlaRecurrence::step";
  check_state(state, call);
  const int H = config_.n_heads, dk = config_.d_key, dv = config_.d_value;
  const int per_qk = H / qk_heads_;
  const bool per_channel = config_.decay == DecayKind::kPerChannel;
  const bool per_token = config_.decay == DecayKind::kPerHeadToken;
  const auto check_size = [&](const char* name, Eigen::Index n, const char* heads, int h, int d,
                              const char* dname) {
    if (n != Eigen::Index(h) * d)
      detail::throw_shape(call, "{} has {} elements, expected {} * {} = {} * {} = {}", name, n,
                          heads, dname, h, d, Eigen::Index(h) * d);
  };
  check_size("q", q.size(), "qk_heads", qk_heads_, dk, "d_key");
  check_size("k", k.size(), "qk_heads", qk_heads_, dk, "d_key");
  check_size("v", v.size(), "n_heads", H, dv, "d_value");
  check_size("out", out.size(), "n_heads", H, dv, "d_value");
  if (per_channel)
    check_size("alpha", alpha.size(), "n_heads", H, dk, "d_key");
  else if (per_token)
    check_size("alpha", alpha.size(), "n_heads", H, 1, "1");
  else if (alpha.size() != 0)
    detail::throw_shape(call, "alpha has {} elements, expected none (the decay is per head)",
                        alpha.size());
  detail::check_finite(call, "q", q.data(), 1, q.size(), q.size());
  detail::check_finite(call, "k", k.data(), 1, k.size(), k.size());
  detail::check_finite(call, "v", v.data(), 1, v.size(), v.size());
  if (per_channel || per_token) {
    detail::check_finite(call, "alpha", alpha.data(), 1, alpha.size(), alpha.size());
    check_unit_interval(call, "alpha", alpha.data(), 1, alpha.size(), alpha.size());
  }

  const int Dp = state.d_key_padded_, dvp = state.d_value_padded_;
  float* qs = state.workspace_.data;  // (H, Dp)
  float* ks = qs + H * Dp;            // (H, Dp)
  float* as = ks + H * Dp;            // (H, Dp)
  float* vs = as + H * Dp;            // (H, dvp)
  float* os = vs + H * dvp;           // (H, dvp)
  // Only the first d_key / d_value entries of each row are written: the padding stays zero.
  for (int h = 0; h < H; ++h) {
    const float* qh = q.data() + (h / per_qk) * dk;
    for (int i = 0; i < dk; ++i) qs[h * Dp + i] = qh[i] * scale_;
    std::memcpy(ks + h * Dp, k.data() + (h / per_qk) * dk,
                sizeof(float) * static_cast<std::size_t>(dk));
    if (per_channel)
      std::memcpy(as + h * Dp, alpha.data() + h * dk, sizeof(float) * static_cast<std::size_t>(dk));
    if (per_token) std::fill(as + h * Dp, as + h * Dp + dk, alpha[h]);
    std::memcpy(vs + h * dvp, v.data() + h * dv, sizeof(float) * static_cast<std::size_t>(dv));
  }
  for (int h = 0; h < H; ++h) {
    const kernels::GatedHeadView view{state.head(h), Dp, dvp, dvp};
    const bool fixed = config_.decay == DecayKind::kPerHead;
    const float gamma = fixed ? config_.head_decay[static_cast<std::size_t>(h)] : 0.0f;
    kernels::gated_step_head(view, qs + h * Dp, ks + h * Dp, vs + h * dvp,
                             fixed ? nullptr : as + h * Dp, gamma, os + h * dvp);
    std::memcpy(out.data() + h * dv, os + h * dvp, sizeof(float) * static_cast<std::size_t>(dv));
  }
  ++state.n_tokens_;
}

Eigen::VectorXf GlaRecurrence::step(GlaState& state, ConstVectorRef q, ConstVectorRef k,
                                     ConstVectorRef v, ConstVectorRef alpha) const {
  Eigen::VectorXf out(Eigen::Index(config_.n_heads) * config_.d_value);
  step(state, q, k, v, alpha, out);
  return out;
}

void GlaRecurrence::prefill(GlaState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                             const ConstMatrixRef& V, const ConstMatrixRef& A, MatrixRef O,
                             const PrefillOptions& options) const {
  constexpr const char* call = "GlaRecurrence::prefill";
  check_state(state, call);
  const int H = config_.n_heads, dk = config_.d_key, dv = config_.d_value;
  const int per_qk = H / qk_heads_;
  const bool per_channel = config_.decay == DecayKind::kPerChannel;
  const bool per_token = config_.decay == DecayKind::kPerHeadToken;
  const bool decayed = per_channel || per_token;  // A given with the tokens
  const Eigen::Index T = Q.rows();
  const auto check_qk = [&](const char* name, const ConstMatrixRef& X) {
    if (X.rows() != T || X.cols() != Eigen::Index(qk_heads_) * dk)
      detail::throw_shape(call, "{} has shape ({}, {}), expected (T, qk_heads * d_key) = ({}, {} * {})",
                          name, X.rows(), X.cols(), T, qk_heads_, dk);
  };
  check_qk("Q", Q);
  check_qk("K", K);
  detail::check_heads_shape(call, "V", V, T, H, dv, "d_value");
  detail::check_heads_shape(call, "O", O, T, H, dv, "d_value");
  if (per_channel)
    detail::check_heads_shape(call, "A", A, T, H, dk, "d_key");
  else if (per_token)
    detail::check_heads_shape(call, "A", A, T, H, 1, "1");
  else if (A.size() != 0)
    detail::throw_shape(call, "A has shape ({}, {}), expected no elements (the decay is per head)",
                        A.rows(), A.cols());
  detail::check_prefill_options(call, options.chunk, options.threads);
  detail::check_finite(call, "Q", Q.data(), T, Q.cols(), Q.outerStride());
  detail::check_finite(call, "K", K.data(), T, K.cols(), K.outerStride());
  detail::check_finite(call, "V", V.data(), T, V.cols(), V.outerStride());
  if (decayed) {
    detail::check_finite(call, "A", A.data(), T, A.cols(), A.outerStride());
    check_unit_interval(call, "A", A.data(), T, A.cols(), A.outerStride());
  }
  if (T == 0) return;

  const int Dp = state.d_key_padded_, dvp = state.d_value_padded_;
  const int chunk = static_cast<int>(std::min<Eigen::Index>(options.chunk, T));
  const int threads = std::min(detail::resolve_threads(options.threads), H);
  // Per worker, for the head it walks: q', k' and alpha in tile-walk layout (tile_floats),
  // v and o in panels (see below). Allocated before the state changes, zeroed once: the
  // padding of v is never written, so it stays zero.
  const std::size_t C = static_cast<std::size_t>(chunk);
  const std::size_t rows_per_head = decayed ? 3 : 2;
  const std::size_t tile_block = kernels::tile_floats(chunk, Dp);
  const std::size_t per_head = rows_per_head * tile_block + 2 * C * static_cast<std::size_t>(dvp);
  const std::size_t per_worker = per_head;
  std::vector<float> scratch(per_worker * static_cast<std::size_t>(threads), 0.0f);
  // v and o are walked in panels of kPanel columns, each panel's tokens contiguous: the walk
  // then reads and writes a few KiB in order, where whole rows (H * d_value floats apart) would
  // fall into a handful of cache sets.
  constexpr int kPanel = 64;
  const auto panel_width = [&](int p0) { return std::min(kPanel, dvp - p0); };
  const auto valid = [&](int p0) { return std::max(0, std::min(panel_width(p0), dv - p0)); };

  // Each worker owns a contiguous range of heads; which worker runs which range never changes
  // a result (heads share nothing).
  detail::parallel_ranges(H, threads, [&](int h0, int h1, int worker) {
    float* const qT = scratch.data() + per_worker * static_cast<std::size_t>(worker);
    float* const kT = qT + tile_block;
    float* const aT = kT + tile_block;  // kPerChannel and kPerHeadToken only
    float* const vbuf = kT + tile_block * (rows_per_head - 1);
    float* const obuf = vbuf + C * static_cast<std::size_t>(dvp);
    // v and o as (panels, C, width): the panel from column p0 starts at C * p0.
    const auto vb = [&](int p0) { return vbuf + C * static_cast<std::size_t>(p0); };
    const auto ob = [&](int p0) { return obuf + C * static_cast<std::size_t>(p0); };

    for (Eigen::Index b0 = 0; b0 < T; b0 += chunk) {
      const int n = static_cast<int>(std::min<Eigen::Index>(chunk, T - b0));
      // Head by head: gather its inputs, walk it, scatter its outputs, while they are in cache.
      for (int h = h0; h < h1; ++h) {
        // q', k' and alpha in the walk's tiles, through the linear layer's input pass (the
        // inputs were checked above, so it finds nothing to refuse).
        const auto to_tiles = [&](const ConstMatrixRef& X, int head, float* tiles, float s) {
          kernels::gather_tiles(X.data() + b0 * X.outerStride() + Eigen::Index(head) * dk,
                                X.outerStride(), n, 1, dk, kernels::InputMap::kIdentity, s, tiles,
                                0, Dp);
        };
        // Heads that share q and k (qk_heads) and follow one another in a range reuse the
        // tiles of the head before: the walk only reads them.
        if (h == h0 || h / per_qk != (h - 1) / per_qk) {
          to_tiles(Q, h / per_qk, qT, scale_);
          to_tiles(K, h / per_qk, kT, 1.0f);
        }
        if (per_channel) to_tiles(A, h, aT, 1.0f);
        if (per_token) fill_decay_tiles(A.data() + b0 * A.outerStride() + h, A.outerStride(), n,
                                        dk, Dp, aT);
        for (int t = 0; t < n; ++t) {
          const Eigen::Index row = b0 + t;
          // The padding columns of the last panel are never written: they stay zero.
          const float* vrow = V.data() + row * V.outerStride() + Eigen::Index(h) * dv;
          for (int p0 = 0; p0 < dv; p0 += kPanel)
            std::memcpy(vb(p0) + static_cast<std::size_t>(t * panel_width(p0)), vrow + p0,
                        sizeof(float) * static_cast<std::size_t>(valid(p0)));
        }
        const float gamma = decayed ? 0.0f : config_.head_decay[static_cast<std::size_t>(h)];
        const float* a = decayed ? aT : nullptr;
        for (int p0 = 0; p0 < dvp; p0 += kPanel) {
          const int w = panel_width(p0);
          const kernels::GatedHeadView view{state.head(h) + p0, Dp, dvp, w};
          kernels::gated_walk_head(view, qT, kT, a, gamma, vb(p0), w, ob(p0), w, n);
        }
        for (int t = 0; t < n; ++t) {
          float* orow = O.data() + (b0 + t) * O.outerStride() + Eigen::Index(h) * dv;
          for (int p0 = 0; p0 < dv; p0 += kPanel)
            std::memcpy(orow + p0, ob(p0) + static_cast<std::size_t>(t * panel_width(p0)),
                        sizeof(float) * static_cast<std::size_t>(valid(p0)));
        }
      }
    }
  });
  state.n_tokens_ += T;
}

RowMatrix GlaRecurrence::prefill(GlaState& state, const ConstMatrixRef& Q,
                                  const ConstMatrixRef& K, const ConstMatrixRef& V,
                                  const ConstMatrixRef& A, const PrefillOptions& options) const {
  RowMatrix O(Q.rows(), Eigen::Index(config_.n_heads) * config_.d_value);
  prefill(state, Q, K, V, A, O, options);
  return O;
}

}  // namespace recur
