#include "recur/linear_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "attention/input_map.h"
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

// phi over n_heads consecutive heads of one token (x: n_heads * d_key floats), each head's
// d_feature results scaled and written to a row of `rows` (stride Dp). Step and prefill both
// produce q' and k' through this routine, so they round alike. The padding of each row (from
// d_feature to Dp) is never written: callers keep it zero.
void map_heads(const FeatureMap& phi, const float* x, int n_heads, int d_key, int d_feature,
               float scale, float* rows, int Dp) {
  phi.apply(x, n_heads, d_key, d_key, rows, Dp);
  if (scale == 1.0f) return;  // x * 1 == x exactly
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < d_feature; ++i) rows[h * Dp + i] *= scale;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LinearState

LinearState::Buffer LinearState::allocate(std::size_t bytes) {
  Buffer b;
  b.storage.reset(new unsigned char[bytes + kAlign]);
  const auto addr = reinterpret_cast<std::uintptr_t>(b.storage.get());
  b.data = b.storage.get() + (round_up(addr, kAlign) - addr);
  b.size = bytes;
  std::memset(b.data, 0, bytes);
  return b;
}

LinearState::LinearState(int n_heads, int d_feature, int d_value, bool normalized)
    : n_heads_(n_heads),
      d_feature_(d_feature),
      d_value_(d_value),
      normalized_(normalized),
      d_feature_padded_(round_up(d_feature, kernels::kRowPad)),
      d_value_padded_(round_up(d_value, kernels::kTileCols)) {
  const auto Dp = static_cast<std::size_t>(d_feature_padded_);
  const auto dvp = static_cast<std::size_t>(d_value_padded_);
  std::size_t per_head = Dp * dvp * (2 * sizeof(float) + sizeof(double));
  if (normalized_) per_head += Dp * (2 * sizeof(float) + sizeof(double));
  head_bytes_ = round_up(per_head, kAlign);
  sums_ = allocate(head_bytes_ * static_cast<std::size_t>(n_heads_));
  workspace_ = allocate(static_cast<std::size_t>(n_heads_) * (2 * Dp + 2 * dvp) * sizeof(float));
}

std::size_t LinearState::bytes() const {
  return sizeof(*this) + sums_.size + workspace_.size + 2 * kAlign;
}

namespace {
kernels::HeadView head_view(unsigned char* sums, std::size_t head_bytes, int head, int Dp,
                            int dvp, bool normalized) {
  unsigned char* base = sums + head_bytes * static_cast<std::size_t>(head);
  const auto n = static_cast<std::size_t>(Dp) * static_cast<std::size_t>(dvp);
  kernels::HeadView h{};
  h.P = reinterpret_cast<float*>(base);
  h.L32 = h.P + n;
  h.L64 = reinterpret_cast<double*>(h.L32 + n);
  if (normalized) {
    h.Z64 = h.L64 + n;
    h.Zp = reinterpret_cast<float*>(h.Z64 + Dp);
    h.Z32 = h.Zp + Dp;
  }
  h.Dp = Dp;
  h.dvp = dvp;
  return h;
}
}  // namespace

Eigen::MatrixXd LinearState::S(int head) const {
  if (head < 0 || head >= n_heads_)
    detail::throw_argument("LinearState::S", "head {} is out of range [0, {})", head, n_heads_);
  const auto h = head_view(sums_.data, head_bytes_, head, d_feature_padded_, d_value_padded_,
                           normalized_);
  Eigen::MatrixXd s(d_feature_, d_value_);
  for (int i = 0; i < d_feature_; ++i)
    for (int j = 0; j < d_value_; ++j) {
      const int e = i * d_value_padded_ + j;
      s(i, j) = h.L64[e] + static_cast<double>(h.P[e]);
    }
  return s;
}

Eigen::VectorXd LinearState::Z(int head) const {
  if (head < 0 || head >= n_heads_)
    detail::throw_argument("LinearState::Z", "head {} is out of range [0, {})", head, n_heads_);
  Eigen::VectorXd z = Eigen::VectorXd::Zero(d_feature_);
  if (!normalized_) return z;
  const auto h = head_view(sums_.data, head_bytes_, head, d_feature_padded_, d_value_padded_,
                           normalized_);
  for (int i = 0; i < d_feature_; ++i) z(i) = h.Z64[i] + static_cast<double>(h.Zp[i]);
  return z;
}

// The record holds each head's sums as they lie in memory, padding included: P, L32, L64, then
// when normalized Z64, Zp, Z32.
template <class Self, class F>
void LinearState::buffers(Self& s, F&& f) {
  const auto n = static_cast<std::size_t>(s.d_feature_padded_) *
                 static_cast<std::size_t>(s.d_value_padded_);
  const auto Dp = static_cast<std::size_t>(s.d_feature_padded_);
  for (int head = 0; head < s.n_heads_; ++head) {
    const auto h = head_view(s.sums_.data, s.head_bytes_, head, s.d_feature_padded_,
                             s.d_value_padded_, s.normalized_);
    f(detail::contiguous("P", h.P, n, head));
    f(detail::contiguous("L32", h.L32, n, head));
    f(detail::contiguous("L64", h.L64, n, head));
    if (!s.normalized_) continue;
    f(detail::contiguous("Z64", h.Z64, Dp, head));
    f(detail::contiguous("Zp", h.Zp, Dp, head));
    f(detail::contiguous("Z32", h.Z32, Dp, head));
  }
}

LinearState LinearState::blank(std::int64_t n_tokens) const {
  LinearState s(n_heads_, d_feature_, d_value_, normalized_);
  s.n_tokens_ = n_tokens;
  return s;
}

LinearState LinearState::clone() const { return detail::DeclaredBuffers::clone(*this); }
void LinearState::reset() { detail::DeclaredBuffers::reset(*this); }
std::size_t LinearState::raw_size() const { return detail::DeclaredBuffers::raw_size(*this); }
std::vector<unsigned char> LinearState::raw_bytes() const {
  return detail::DeclaredBuffers::raw_bytes(*this);
}
void LinearState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  detail::DeclaredBuffers::load(*this, data, size);
}

// ---------------------------------------------------------------------------------------------
// LinearAttention

LinearAttention::LinearAttention(const LinearAttentionConfig& config)
    : LinearAttention(config, make_feature_map(config.feature_map)) {}

LinearAttention::LinearAttention(const LinearAttentionConfig& config,
                                 std::shared_ptr<const FeatureMap> phi)
    : config_(config), phi_(std::move(phi)) {
  constexpr const char* call = "LinearAttention";
  constexpr int kMaxDim = 1 << 16;
  if (config.n_heads < 1 || config.n_heads > kMaxDim)
    detail::throw_argument(call, "n_heads is {}, expected 1 to {}", config.n_heads, kMaxDim);
  if (config.d_key < 1 || config.d_key > kMaxDim)
    detail::throw_argument(call, "d_key is {}, expected 1 to {}", config.d_key, kMaxDim);
  if (config.d_value < 1 || config.d_value > kMaxDim)
    detail::throw_argument(call, "d_value is {}, expected 1 to {}", config.d_value, kMaxDim);
  if (!phi_) detail::throw_argument(call, "the feature map is null");
  d_feature_ = phi_->d_feature(config.d_key);
  if (d_feature_ < 1 || d_feature_ > kMaxDim)
    detail::throw_argument(call, "feature map {} gives d_feature {} for d_key {}", phi_->name(),
                           d_feature_, config.d_key);
  if (!std::isfinite(config.scale) || config.scale < 0.0f)
    detail::throw_argument(call, "scale is {}, expected a finite number >= 0 (0: default)",
                           config.scale);
  if (!std::isfinite(config.eps) || config.eps < 0.0f)
    detail::throw_argument(call, "eps is {}, expected a finite number >= 0", config.eps);
  scale_ = config.scale != 0.0f ? config.scale
           : config.normalized  ? 1.0f
                                : static_cast<float>(1.0 / std::sqrt(double(d_feature_)));
}

LinearState LinearAttention::make_state() const {
  return LinearState(config_.n_heads, d_feature_, config_.d_value, config_.normalized);
}

void LinearAttention::check_state(const LinearState& s, const char* call) const {
  if (s.n_heads_ != config_.n_heads || s.d_feature_ != d_feature_ ||
      s.d_value_ != config_.d_value || s.normalized_ != config_.normalized) {
    detail::throw_argument(
        call,
        "state was made for another layer: state has n_heads {}, d_feature {}, d_value {}, {}; "
        "layer has n_heads {}, d_feature {}, d_value {}, {}",
        s.n_heads_, s.d_feature_, s.d_value_, s.normalized_ ? "normalized" : "unnormalized",
        config_.n_heads, d_feature_, config_.d_value,
        config_.normalized ? "normalized" : "unnormalized");
  }
}

void LinearAttention::step(LinearState& state, ConstVectorRef q, ConstVectorRef k,
                           ConstVectorRef v, VectorRef out) const {
  constexpr const char* call = "LinearAttention::step";
  check_state(state, call);
  const int H = config_.n_heads, dk = config_.d_key, dv = config_.d_value;
  const auto check_size = [&](const char* name, Eigen::Index n, int d, const char* dname) {
    if (n != Eigen::Index(H) * d)
      detail::throw_shape(call, "{} has {} elements, expected n_heads * {} = {} * {} = {}", name,
                          n, dname, H, d, Eigen::Index(H) * d);
  };
  check_size("q", q.size(), dk, "d_key");
  check_size("k", k.size(), dk, "d_key");
  check_size("v", v.size(), dv, "d_value");
  check_size("out", out.size(), dv, "d_value");
  detail::check_finite(call, "q", q.data(), 1, q.size(), q.size());
  detail::check_finite(call, "k", k.data(), 1, k.size(), k.size());
  detail::check_finite(call, "v", v.data(), 1, v.size(), v.size());

  const int Dp = state.d_feature_padded_, dvp = state.d_value_padded_;
  auto* ws = reinterpret_cast<float*>(state.workspace_.data);
  float* qf = ws;                 // (H, Dp)
  float* kf = qf + H * Dp;        // (H, Dp)
  float* vp = kf + H * Dp;        // (H, dvp)
  float* op = vp + H * dvp;       // (H, dvp)
  // The workspace's padding stays zero: only the first d_feature / d_value entries are written.
  map_heads(*phi_, q.data(), H, dk, d_feature_, scale_, qf, Dp);
  map_heads(*phi_, k.data(), H, dk, d_feature_, 1.0f, kf, Dp);
  for (int h = 0; h < H; ++h)
    std::memcpy(vp + h * dvp, v.data() + h * dv, sizeof(float) * static_cast<std::size_t>(dv));
  for (int h = 0; h < H; ++h) {
    const auto view = head_view(state.sums_.data, state.head_bytes_, h, Dp, dvp,
                                config_.normalized);
    kernels::step_head(view, qf + h * Dp, kf + h * Dp, vp + h * dvp, op + h * dvp,
                       config_.normalized, config_.eps, state.n_tokens_);
    std::memcpy(out.data() + h * dv, op + h * dvp, sizeof(float) * static_cast<std::size_t>(dv));
  }
  ++state.n_tokens_;
}

Eigen::VectorXf LinearAttention::step(LinearState& state, ConstVectorRef q, ConstVectorRef k,
                                      ConstVectorRef v) const {
  Eigen::VectorXf out(Eigen::Index(config_.n_heads) * config_.d_value);
  step(state, q, k, v, out);
  return out;
}

void LinearAttention::prefill(LinearState& state, const ConstMatrixRef& Q,
                              const ConstMatrixRef& K, const ConstMatrixRef& V, MatrixRef O,
                              const PrefillOptions& options) const {
  constexpr const char* call = "LinearAttention::prefill";
  check_state(state, call);
  const int H = config_.n_heads, dk = config_.d_key, dv = config_.d_value;
  const Eigen::Index T = Q.rows();
  detail::check_heads_shape(call, "Q", Q, T, H, dk, "d_key");
  detail::check_heads_shape(call, "K", K, T, H, dk, "d_key");
  detail::check_heads_shape(call, "V", V, T, H, dv, "d_value");
  detail::check_heads_shape(call, "O", O, T, H, dv, "d_value");
  detail::check_prefill_options(call, options.chunk, options.threads);
  if (T == 0) return;

  const int Dp = state.d_feature_padded_, dvp = state.d_value_padded_;
  const int chunk = static_cast<int>(std::min<Eigen::Index>(options.chunk, T));
  const int threads = std::min(detail::resolve_threads(options.threads), H);
  const int max_heads = (H + threads - 1) / threads;  // per worker

  // The inputs are checked for finiteness in the pass that maps and lays them out for the walk,
  // chunk by chunk, so that they are read from memory once. A failed call must leave the state
  // as it was, so the checks must come before anything changes: with one chunk on one worker
  // they do by themselves; otherwise either the state is staged (copied, and restored on
  // failure) or, when the inputs are smaller than the state, they are checked up front.
  const bool one_pass = T <= chunk && threads == 1;
  const auto input_bytes = static_cast<std::size_t>(T) * sizeof(float) *
                           static_cast<std::size_t>(Q.cols() + K.cols() + V.cols());
  const bool stage = !one_pass && input_bytes > state.sums_.size;
  const auto check_all = [&] {
    detail::check_finite(call, "Q", Q.data(), T, Q.cols(), Q.outerStride());
    detail::check_finite(call, "K", K.data(), T, K.cols(), K.outerStride());
    detail::check_finite(call, "V", V.data(), T, V.cols(), V.outerStride());
  };
  if (!one_pass && !stage) check_all();
  std::unique_ptr<unsigned char[]> staged;
  if (stage) {
    staged.reset(new unsigned char[state.sums_.size]);
    std::memcpy(staged.get(), state.sums_.data, state.sums_.size);
  }
  std::atomic<bool> failed{false};

  // Per worker and head: q', k' in tile-walk layout (kernels::tile_floats), v and o (chunk, dvp);
  // per worker, one token's feature-mapped rows (heads, Dp). Allocated before the state changes,
  // zeroed once: the padding of the rows and of v is never written, so it stays zero.
  const std::size_t C = static_cast<std::size_t>(chunk);
  // Each block starts one cache line past a multiple of its size, so that the blocks, and the
  // same block of successive heads, do not all lie at one offset modulo 4 KiB (where the core
  // takes a load for a possible alias of an earlier store, and waits).
  constexpr std::size_t kSkew = 64 / sizeof(float);
  const std::size_t tile_block = kernels::tile_floats(chunk, Dp);
  const std::size_t per_head = 2 * tile_block + 2 * C * static_cast<std::size_t>(dvp) + 4 * kSkew;
  const std::size_t per_worker = per_head * static_cast<std::size_t>(max_heads) +
                                 static_cast<std::size_t>(max_heads * Dp);
  std::vector<float> scratch(per_worker * static_cast<std::size_t>(threads), 0.0f);
  const std::int64_t pos0 = state.n_tokens_;
  constexpr int kRows = kernels::kTileRows;
  // When d_value needs no padding, the walk reads V and writes O where they are.
  const bool direct_v = dv == dvp;
  const kernels::InputMap fused = detail::input_map_of(*phi_);

  // Each worker owns a contiguous range of heads and reads its part of every row in one piece:
  // the inputs are usually far larger than the caches, and short strided reads stall.
  detail::parallel_ranges(H, threads, [&](int h0, int h1, int worker) {
    const int nh = h1 - h0;
    float* base = scratch.data() + per_worker * static_cast<std::size_t>(worker);
    const auto qT = [&](int j) { return base + per_head * static_cast<std::size_t>(j); };
    const auto kT = [&](int j) { return qT(j) + tile_block + kSkew; };
    const auto vb = [&](int j) { return kT(j) + tile_block + kSkew; };
    const auto ob = [&](int j) { return vb(j) + C * static_cast<std::size_t>(dvp) + kSkew; };
    float* rows = base + per_head * static_cast<std::size_t>(max_heads);  // (nh, Dp)

    for (Eigen::Index b0 = 0; b0 < T; b0 += chunk) {
      if (failed.load(std::memory_order_relaxed)) return;
      const int n = static_cast<int>(std::min<Eigen::Index>(chunk, T - b0));
      const auto tile_stride = static_cast<std::size_t>(kernels::tile_stride_of(n));
      // q', k': this worker's heads of the chunk, checked, mapped and laid out in one pass.
      // While it maps one input, the pass fetches the rows read next: with Q, those of K and
      // of O (which the walk writes); with K, those of V.
      const auto rows_of = [&](const float* start, Eigen::Index ld, int d, bool write) {
        return kernels::RowsAhead::Rows{start + b0 * ld + Eigen::Index(h0) * d, ld, d, write};
      };
      const kernels::RowsAhead before_k{{rows_of(K.data(), K.outerStride(), dk, false),
                                         rows_of(O.data(), O.outerStride(), dv, true)}};
      const kernels::RowsAhead before_v{{rows_of(V.data(), V.outerStride(), dv, false), {}}};
      const auto gather = [&](const ConstMatrixRef& X, const auto& dst, float s,
                              const kernels::RowsAhead& ahead) {
        const float* x = X.data() + b0 * X.outerStride() + Eigen::Index(h0) * dk;
        if (fused != kernels::InputMap::kNone)
          return kernels::gather_tiles(x, X.outerStride(), n, nh, dk, fused, s, dst(0),
                                       static_cast<std::int64_t>(per_head), Dp, ahead);
        // Any other map: checked first (the map may assume finite input), then mapped a token
        // at a time and transposed.
        if (!detail::all_finite(x, n, Eigen::Index(nh) * dk, X.outerStride())) return false;
        for (int t = 0; t < n; ++t) {
          map_heads(*phi_, x + t * X.outerStride(), nh, dk, d_feature_, s, rows, Dp);
          for (int j = 0; j < nh; ++j) {
            const float* row = rows + j * Dp;
            float* tiles = dst(j) + static_cast<std::size_t>(t) * kRows;
            for (int tile = 0; tile < Dp / kRows; ++tile) {
              float* dst_tile = tiles + static_cast<std::size_t>(tile) * tile_stride;
              for (int r = 0; r < kRows; ++r) dst_tile[r] = row[tile * kRows + r];
            }
          }
        }
        return true;
      };
      const float* v0 = V.data() + b0 * V.outerStride() + Eigen::Index(h0) * dv;
      bool ok = gather(Q, qT, scale_, before_k) && gather(K, kT, 1.0f, before_v) &&
                detail::all_finite(v0, n, Eigen::Index(nh) * dv, V.outerStride());
      if (!ok) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
      if (!direct_v) {
        for (int t = 0; t < n; ++t) {
          const float* vrow = v0 + t * V.outerStride();
          for (int j = 0; j < nh; ++j)
            std::memcpy(vb(j) + static_cast<std::size_t>(t * dvp), vrow + j * dv,
                        sizeof(float) * static_cast<std::size_t>(dv));
        }
      }
      for (int j = 0; j < nh; ++j) {
        const auto view = head_view(state.sums_.data, state.head_bytes_, h0 + j, Dp, dvp,
                                    config_.normalized);
        const Eigen::Index col = Eigen::Index(h0 + j) * dv;
        if (direct_v)  // v and o in place: rows of exactly dvp values
          kernels::walk_head(view, qT(j), kT(j), V.data() + b0 * V.outerStride() + col,
                             V.outerStride(), O.data() + b0 * O.outerStride() + col,
                             O.outerStride(), n, config_.normalized, config_.eps, pos0 + b0);
        else
          kernels::walk_head(view, qT(j), kT(j), vb(j), dvp, ob(j), dvp, n, config_.normalized,
                             config_.eps, pos0 + b0);
      }
      if (direct_v) continue;
      for (int t = 0; t < n; ++t) {
        float* orow = O.data() + (b0 + t) * O.outerStride() + Eigen::Index(h0) * dv;
        for (int j = 0; j < nh; ++j)
          std::memcpy(orow + j * dv, ob(j) + static_cast<std::size_t>(t * dvp),
                      sizeof(float) * static_cast<std::size_t>(dv));
      }
    }
  });
  if (failed.load()) {
    // Put back what the chunks before the bad one changed, then name the first bad element as
    // the full check does.
    if (stage) std::memcpy(state.sums_.data, staged.get(), state.sums_.size);
    check_all();
    detail::throw_numeric(call, "an input holds a non-finite value");  // not reached
  }
  state.n_tokens_ += T;
}

RowMatrix LinearAttention::prefill(LinearState& state, const ConstMatrixRef& Q,
                                   const ConstMatrixRef& K, const ConstMatrixRef& V,
                                   const PrefillOptions& options) const {
  RowMatrix O(Q.rows(), Eigen::Index(config_.n_heads) * config_.d_value);
  prefill(state, Q, K, V, O, options);
  return O;
}

}  // namespace recur
