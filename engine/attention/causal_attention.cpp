#include "recur/causal_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "attention/rotary.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"
#include "util/state_buffers.h"

namespace recur {
namespace {

constexpr int kPad = 16;
constexpr int P = CausalState::kPageSlots;
int padded(int n) { return (n + kPad - 1) / kPad * kPad; }

// GPT-NeoX's rotation of one head's row (d wide, its first 2 * half dimensions turned), then
// times `scale`: each multiply and add rounded on its own (no contraction in this tree), as
// WindowAttention rotates.
void rotate(const float* x, const float* c, const float* s, int half, int d, float scale,
            float* out) {
  for (int i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    out[i] = (x1 * c[i] - x2 * s[i]) * scale;
    out[i + half] = (x2 * c[i] + x1 * s[i]) * scale;
  }
  for (int i = 2 * half; i < d; ++i) out[i] = x[i] * scale;
}

// What one query needs besides the state: a page of scores, the weights of every visible key,
// the accumulator.
struct Scratch {
  float* scores;   // (P)
  float* weights;  // (visible keys)
  float* acc;      // (d_padded)
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// CausalState

CausalState::CausalState(int n_kv_heads, int d_head, int window)
    : n_kv_heads_(n_kv_heads),
      d_head_(d_head),
      d_padded_(padded(d_head)),
      window_(window),
      page_floats_(std::size_t(n_kv_heads) * std::size_t(P) * std::size_t(d_head + padded(d_head))) {
  // cos, sin (d / 2 each), a rotated key (d), then one range's q (d), scores (P), acc (dp).
  workspace_.assign(std::size_t(3 * d_head + P + d_padded_), 0.0f);
  if (window_ > 0) {
    ensure_pages(window_ + 1);
    weights_.assign(std::size_t(window_ + 1), 0.0f);
  }
}

float* CausalState::keys(std::size_t page, int kv_head) const {
  return pages_[page].get() + std::size_t(kv_head) * std::size_t(P) * std::size_t(d_head_ + d_padded_);
}
float* CausalState::values(std::size_t page, int kv_head) const {
  return keys(page, kv_head) + std::size_t(d_head_) * std::size_t(P);
}

void CausalState::ensure_pages(std::int64_t slots) {
  const auto need = std::size_t((slots + P - 1) / P);
  while (pages_.size() < need) {
    pages_.emplace_back(new float[page_floats_]);
    std::fill(pages_.back().get(), pages_.back().get() + page_floats_, 0.0f);
  }
}

// A range's workspace (a rotated q, a page of scores, acc) after the shared cos, sin and rotated
// key; its weights `keys` floats apart in weights_. Called by prefill() too, for the threads it
// runs on, so that a windowed state's size does not change at the first step after a prompt.
void CausalState::reserve_step(int ranges, std::int64_t keys) {
  const auto want = std::size_t(2 * d_head_) + std::size_t(ranges) * std::size_t(d_head_ + P + d_padded_);
  if (workspace_.size() < want) workspace_.resize(want, 0.0f);
  const std::size_t need = std::size_t(ranges) * std::size_t(keys);
  if (weights_.size() < need) weights_.resize(std::max(need, 2 * weights_.size()));
}

std::int64_t CausalState::slots_used() const { return window_ > 0 ? window_ + 1 : n_tokens_; }

// The record holds, per kv head, the slots in use (every slot of a ring; the tokens so far of a
// full cache), each its key (a column of its page) then its value (a row): the same bytes
// whatever pages were allocated.
template <class Self, class F>
void CausalState::buffers(Self& s, F&& f) {
  const auto d = std::size_t(s.d_head_);
  const std::int64_t slots = s.slots_used();
  for (int g = 0; g < s.n_kv_heads_; ++g)
    for (std::int64_t t = 0; t < slots; ++t) {
      const auto page = std::size_t(t / P), slot = std::size_t(t % P);
      f(detail::block("keys", s.keys(page, g) + slot, d, 1, std::size_t(P), g));
      f(detail::contiguous("values", s.values(page, g) + slot * std::size_t(s.d_padded_), d, g));
    }
}

CausalState CausalState::blank(std::int64_t n_tokens) const {
  CausalState s(n_kv_heads_, d_head_, window_);
  s.n_tokens_ = n_tokens;
  if (window_ == 0) {
    s.ensure_pages(n_tokens);
    s.weights_.assign(std::size_t(n_tokens), 0.0f);
  }
  return s;
}

CausalState CausalState::clone() const { return detail::DeclaredBuffers::clone(*this); }
void CausalState::reset() { detail::DeclaredBuffers::reset(*this); }

std::size_t CausalState::bytes() const {
  return sizeof(*this) + (pages_.size() * page_floats_ + workspace_.capacity() + weights_.capacity()) *
                             sizeof(float) +
         pages_.capacity() * sizeof(pages_[0]);
}

std::size_t CausalState::raw_size_at(std::int64_t n_tokens) const {
  const std::int64_t slots = window_ > 0 ? window_ + 1 : n_tokens;
  return std::size_t(slots) * std::size_t(n_kv_heads_) * 2 * std::size_t(d_head_) * sizeof(float) +
         sizeof(std::int64_t);
}

std::vector<unsigned char> CausalState::raw_bytes() const {
  return detail::DeclaredBuffers::raw_bytes(*this);
}
void CausalState::load_raw_bytes(const unsigned char* data, std::size_t size) {
  detail::DeclaredBuffers::load(*this, data, size);
}

// ---------------------------------------------------------------------------------------------
// CausalAttention

CausalAttention::CausalAttention(const CausalAttentionConfig& config) : config_(config) {
  constexpr const char* call = "CausalAttention";
  constexpr int kMaxDim = 1 << 16;
  if (config_.n_kv_heads == 0) config_.n_kv_heads = config_.n_heads;
  const auto& c = config_;
  if (c.n_heads < 1 || c.n_heads > kMaxDim || c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0)
    detail::throw_argument(call, "n_heads {} and n_kv_heads {}: expected 1 to {} heads, a multiple "
                                 "of the kv heads", c.n_heads, c.n_kv_heads, kMaxDim);
  if (c.d_head < 2 || c.d_head > kMaxDim || c.d_head % 2 != 0)
    detail::throw_argument(call, "d_head is {}, expected an even number from 2 to {}", c.d_head,
                           kMaxDim);
  if (c.window < 0 || c.window > (1 << 24))
    detail::throw_argument(call, "window is {}, expected 0 (full) to {}", c.window, 1 << 24);
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 1.0f)
    detail::throw_argument(call, "rope_theta is {}, expected a finite number > 1", c.rope_theta);
  if (!std::isfinite(c.scale) || c.scale < 0.0f)
    detail::throw_argument(call, "scale is {}, expected a finite number >= 0 (0: default)", c.scale);
  if (c.rotary_dim < 0 || c.rotary_dim > c.d_head || c.rotary_dim % 2 != 0)
    detail::throw_argument(call, "rotary_dim is {}, expected an even number from 0 (all) to d_head "
                                 "{}", c.rotary_dim, c.d_head);
  scale_ = c.scale != 0.0f ? c.scale : static_cast<float>(1.0 / std::sqrt(double(c.d_head)));
  const int rot = c.rotary_dim > 0 ? c.rotary_dim : c.d_head;
  // Without rotary no pair turns: rotate() then only scales, every dimension as the rest of a
  // partial rotary's.
  const int half = c.rotary ? rot / 2 : 0;
  inv_freq_.resize(std::size_t(half));
  for (int i = 0; i < half; ++i)
    inv_freq_[std::size_t(i)] = static_cast<float>(
        1.0 / std::pow(double(c.rope_theta), 2.0 * double(i) / double(rot)));
}

CausalState CausalAttention::make_state() const {
  return CausalState(config_.n_kv_heads, config_.d_head, config_.window);
}

void CausalAttention::check_state(const CausalState& s, const char* call) const {
  if (s.n_kv_heads_ != config_.n_kv_heads || s.d_head_ != config_.d_head || s.window_ != config_.window)
    detail::throw_argument(call, "state was made for another layer: state has kv heads {}, d_head "
                                 "{}, window {}; layer has {}, {}, {}", s.n_kv_heads_, s.d_head_,
                           s.window_, config_.n_kv_heads, config_.d_head, config_.window);
}

void CausalAttention::rotary(std::int64_t pos, float* cos_out, float* sin_out) const {
  for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = static_cast<double>(pos) * static_cast<double>(inv_freq_[i]);
    double s = 0.0, c = 0.0;
    sincos_fixed(angle, &s, &c);
    cos_out[i] = static_cast<float>(c);
    sin_out[i] = static_cast<float>(s);
  }
}

namespace {

// The keys a query at `pos` sees, as runs of consecutive slots within one page, oldest first:
// f(page, first column, count, index of the run's first key among the visible ones).
template <class F>
void for_each_run(std::int64_t pos, int window, F&& f) {
  const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, pos - window) : 0;
  const std::int64_t slots = window > 0 ? window + 1 : pos + 1;
  std::int64_t p = first;
  int index = 0;
  while (p <= pos) {
    const std::int64_t slot = window > 0 ? p % slots : p;
    const int col = int(slot % P);
    std::int64_t len = std::min<std::int64_t>(P - col, pos - p + 1);
    if (window > 0) len = std::min<std::int64_t>(len, slots - slot);
    f(std::size_t(slot / P), col, int(len), index);
    p += len;
    index += int(len);
  }
}

}  // namespace

// The one routine of step() and prefill(): query head qs (rotated, scaled) over kv head g's
// visible keys. Scores: one FMA chain over d per key (column_dots over a page); m the largest,
// oldest first; w = exp(score - m) by recur's exp; l summed oldest first; acc one FMA chain per
// value column over the keys oldest first; out = acc * (1 / l).
static void attend_one(const kernels::Kernels& kern, const CausalState& s, int g, int d, int dp,
                       int window, const float* qs, std::int64_t pos, const Scratch& w,
                       float* out, float* (*keys)(const CausalState&, std::size_t, int),
                       float* (*values)(const CausalState&, std::size_t, int)) {
  const int n = int(window > 0 ? std::min<std::int64_t>(pos, window) + 1 : pos + 1);
  for_each_run(pos, window, [&](std::size_t page, int col, int len, int index) {
    kern.column_dots(qs, keys(s, page, g), d, P, P, w.scores);
    std::memcpy(w.weights + index, w.scores + col, sizeof(float) * std::size_t(len));
  });
  float m = w.weights[0];
  for (int j = 1; j < n; ++j) m = w.weights[j] > m ? w.weights[j] : m;
  kern.exp_minus(w.weights, w.weights, n, m);
  float l = 0.0f;
  for (int j = 0; j < n; ++j) l += w.weights[j];
  std::fill(w.acc, w.acc + dp, 0.0f);
  for_each_run(pos, window, [&](std::size_t page, int col, int len, int index) {
    kern.weighted_rows(w.acc, values(s, page, g) + std::size_t(col) * std::size_t(dp),
                       w.weights + index, len, dp);
  });
  const float inv = 1.0f / l;
  for (int j = 0; j < d; ++j) out[j] = w.acc[j] * inv;
}

struct CausalAccess {
  static float* keys(const CausalState& s, std::size_t page, int g) { return s.keys(page, g); }
  static float* values(const CausalState& s, std::size_t page, int g) { return s.values(page, g); }
};

namespace {

// Multiply-adds of a step's attention (scores and weighted values) worth a range of their own:
// below it, handing a range to another thread costs about what the range saves.
constexpr std::int64_t kMinStepRangeWork = 1 << 15;

}  // namespace

void CausalAttention::step(CausalState& state, ConstVectorRef q, ConstVectorRef k,
                           ConstVectorRef v, VectorRef out, int threads) const {
  constexpr const char* call = "CausalAttention::step";
  check_state(state, call);
  const int H = config_.n_heads, Hkv = config_.n_kv_heads, d = config_.d_head;
  const int G = H / Hkv;
  if (q.size() != Eigen::Index(H) * d || out.size() != Eigen::Index(H) * d ||
      k.size() != Eigen::Index(Hkv) * d || v.size() != Eigen::Index(Hkv) * d)
    detail::throw_shape(call, "q {}, k {}, v {}, out {} elements; expected n_heads * d_head = {} "
                              "for q and out, n_kv_heads * d_head = {} for k and v",
                        q.size(), k.size(), v.size(), out.size(), H * d, Hkv * d);
  if (threads < 0)
    detail::throw_argument(call, "threads is {}, expected 0 (all cores) or more", threads);
  detail::check_finite(call, "q", q.data(), 1, q.size(), q.size());
  detail::check_finite(call, "k", k.data(), 1, k.size(), k.size());
  detail::check_finite(call, "v", v.data(), 1, v.size(), v.size());
  const std::int64_t pos = state.n_tokens_;
  const int window = config_.window;
  const int n = int(window > 0 ? std::min<std::int64_t>(pos, window) + 1 : pos + 1);
  const std::int64_t work = std::int64_t(H) * n * 2 * d;
  // The workspace holds as many ranges as the threads could take, so that it grows at a thread
  // count's first step, not later when the context becomes long enough to split.
  const int workers = detail::resolve_threads(threads);
  const int most = detail::ranges_for(H, workers);
  const int ranges = int(std::clamp<std::int64_t>(work / kMinStepRangeWork, 1, most));
  // Everything allocated before the state changes: the page, and per range its workspace and
  // the weights of the keys it sees (a window's at most window + 1).
  const int half = int(inv_freq_.size()), dp = state.d_padded_;
  const auto per_range = std::size_t(d + P + dp);
  const std::size_t shared = std::size_t(2 * d);  // cos and sin, a rotated key
  if (window == 0) state.ensure_pages(pos + 1);
  state.reserve_step(most, window > 0 ? window + 1 : n);
  const std::size_t weights_stride = state.weights_.size() / std::size_t(most);

  float* cos_t = state.workspace_.data();
  float* sin_t = cos_t + half;
  float* kr = cos_t + d;
  rotary(pos, cos_t, sin_t);
  const std::int64_t slot = window > 0 ? pos % (window + 1) : pos;
  for (int g = 0; g < Hkv; ++g) {
    rotate(k.data() + g * d, cos_t, sin_t, half, d, 1.0f, kr);
    float* kc = state.keys(std::size_t(slot / P), g);
    for (int i = 0; i < d; ++i) kc[std::size_t(i) * P + std::size_t(slot % P)] = kr[i];
    std::memcpy(state.values(std::size_t(slot / P), g) + std::size_t(slot % P) * std::size_t(dp),
                v.data() + g * d, sizeof(float) * std::size_t(d));
  }
  const kernels::Kernels& kern = kernels::active();
  detail::parallel_ranges(H, ranges, workers, [&](int h0, int h1, int r) {
    float* qs = cos_t + shared + std::size_t(r) * per_range;
    const Scratch w{qs + d, state.weights_.data() + std::size_t(r) * weights_stride, qs + d + P};
    for (int h = h0; h < h1; ++h) {
      rotate(q.data() + h * d, cos_t, sin_t, half, d, scale_, qs);
      attend_one(kern, state, h / G, d, dp, window, qs, pos, w, out.data() + h * d,
                 &CausalAccess::keys, &CausalAccess::values);
    }
  });
  ++state.n_tokens_;
}

void CausalAttention::prefill(CausalState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                              const ConstMatrixRef& V, MatrixRef O,
                              const PrefillOptions& options) const {
  constexpr const char* call = "CausalAttention::prefill";
  check_state(state, call);
  const int H = config_.n_heads, Hkv = config_.n_kv_heads, d = config_.d_head;
  const Eigen::Index T = Q.rows();
  if (Q.cols() != Eigen::Index(H) * d || O.rows() != T || O.cols() != Eigen::Index(H) * d ||
      K.rows() != T || V.rows() != T || K.cols() != Eigen::Index(Hkv) * d ||
      V.cols() != Eigen::Index(Hkv) * d)
    detail::throw_shape(call, "Q ({}, {}), K ({}, {}), V ({}, {}), O ({}, {}); expected T rows, "
                              "n_heads * d_head = {} columns for Q and O, n_kv_heads * d_head = {} "
                              "for K and V", Q.rows(), Q.cols(), K.rows(), K.cols(), V.rows(),
                        V.cols(), O.rows(), O.cols(), H * d, Hkv * d);
  detail::check_prefill_options(call, options.chunk, options.threads);
  detail::check_finite(call, "Q", Q.data(), T, Q.cols(), Q.outerStride());
  detail::check_finite(call, "K", K.data(), T, K.cols(), K.outerStride());
  detail::check_finite(call, "V", V.data(), T, V.cols(), V.outerStride());
  if (T == 0) return;
  if (config_.window > 0)
    state.reserve_step(detail::ranges_for(H, detail::resolve_threads(options.threads)),
                       config_.window + 1);
  const int chunk = int(std::min<Eigen::Index>(options.chunk, T));
  if (config_.window > 0) return prefill_ring(state, Q, K, V, O, chunk, options.threads);
  prefill_full(state, Q, K, V, O, chunk, options.threads);
}

namespace {

// Query rows of one tile: positions times the query heads of one kv head. Every page of keys
// and values is read once for all of them (64 rows: the page's 64 x d_head keys are read once
// per 64 queries, not once per query, and the tile's scores, 64 x the context, stay in L2 at
// the lengths that matter).
constexpr int kTileRows = 64;

// The tile kernels take rows in whole vectors of every target: a tile's rows are padded to a
// multiple of 16. A padded row's query is 0 and it sees the keys the tile's first row sees, so
// that the softmax's vectors walk unmasked as far as with no padding; its results are not read.
constexpr int kRowPad = 16;

// Splits `items` items, item i costing cost(i), into `parts` contiguous ranges of about equal
// cost: range r is [cut[r], cut[r + 1]). Causal tiles cost more the later they are, so equal
// counts would leave the first thread idle.
template <class Cost>
std::vector<std::int64_t> balanced_cuts(std::int64_t items, int parts, Cost&& cost) {
  std::vector<double> cumulative(std::size_t(items) + 1, 0.0);
  for (std::int64_t i = 0; i < items; ++i)
    cumulative[std::size_t(i) + 1] = cumulative[std::size_t(i)] + cost(i);
  std::vector<std::int64_t> cut{0};
  std::int64_t i = 0;
  for (int r = 1; r < parts; ++r) {
    const double target = cumulative.back() * r / parts;
    while (i < items && cumulative[std::size_t(i) + 1] <= target) ++i;
    cut.push_back(i);
  }
  cut.push_back(items);
  return cut;
}

}  // namespace

// A full layer: every key and value of the T tokens is stored first (threads split the kv
// heads), then tiles of queries attend (threads split the (kv head, tile) pairs). A tile's rows
// are its positions times the G query heads of its kv head; for each page up to its last
// position it computes the scores of every row against the page's keys up to that position
// (tile_scores: each score the FMA chain column_dots gives step), then each row's max, weights
// and sum over the keys its query sees (tile_softmax: the rows in the lanes, each walking its
// keys as attend_one does), then, page by page, every row's accumulator over the page's values
// (tile_weighted_rows: each column the chain weighted_rows gives step, a row's keys past its
// own position weighted by 0). Queries, scores and weights are held transposed (a row per
// lane). Every query's arithmetic is attend_one's, in attend_one's order, whatever the tile, the
// chunk or the thread that runs it.
void CausalAttention::prefill_full(CausalState& state, const ConstMatrixRef& Q,
                                   const ConstMatrixRef& K, const ConstMatrixRef& V, MatrixRef O,
                                   int chunk, int threads_asked) const {
  const int H = config_.n_heads, Hkv = config_.n_kv_heads, d = config_.d_head;
  const int G = H / Hkv, half = int(inv_freq_.size()), dp = state.d_padded_;
  const std::int64_t T = Q.rows(), pos0 = state.n_tokens_;
  const int tile = std::max(1, kTileRows / G);  // positions per tile
  const std::int64_t n_tiles = (T + tile - 1) / tile, items = Hkv * n_tiles;
  const int threads = int(std::min<std::int64_t>(detail::resolve_threads(threads_asked), items));
  const std::size_t rows = std::size_t(tile) * std::size_t(G);
  const std::size_t ld = (rows + kRowPad - 1) / kRowPad * kRowPad;  // a key's or dimension's rows
  // The accumulators' rows one cache line past a multiple of 1 KiB: rows a power of two apart
  // fall into the same few of L1's sets, and a tile's rows then evict each other.
  const auto lda = std::size_t(dp + kPad);
  const auto keys = std::size_t((pos0 + T + P - 1) / P * P);  // every page a query sees
  const std::size_t table = std::size_t(std::max(chunk, tile)) * std::size_t(half);
  // Storing needs a rotated key (d); attending a rotated query, the transposed queries, scores,
  // accumulators and sums.
  const std::size_t attend = std::size_t(d) + ld * (std::size_t(d) + keys + 1) + rows * lda;
  const std::size_t per_worker = 2 * table + std::max<std::size_t>(std::size_t(d), attend);
  // Everything allocated before the state changes.
  state.ensure_pages(pos0 + T);
  std::vector<float> scratch(per_worker * std::size_t(threads));
  // Keys each row sees: int32, as the lanes hold them (a context of 2^31 tokens would hold
  // terabytes of keys).
  std::vector<std::int32_t> visible(ld * std::size_t(threads));
  const kernels::Kernels& kern = kernels::active();

  // The keys (after rotary) and values of every token, each kv head by one worker.
  const int store_threads = std::min(threads, Hkv);
  detail::parallel_ranges(Hkv, store_threads, [&](int g0, int g1, int worker) {
    float* cos_t = scratch.data() + per_worker * std::size_t(worker);
    float* sin_t = cos_t + table;
    float* kr = sin_t + table;
    for (std::int64_t b0 = 0; b0 < T; b0 += chunk) {
      const int n = int(std::min<std::int64_t>(chunk, T - b0));
      for (int t = 0; t < n; ++t)
        rotary(pos0 + b0 + t, cos_t + std::size_t(t * half), sin_t + std::size_t(t * half));
      for (int g = g0; g < g1; ++g)
        for (int t = 0; t < n; ++t) {
          const std::int64_t row = b0 + t, pos = pos0 + row;
          rotate(K.data() + row * K.outerStride() + g * d, cos_t + std::size_t(t * half),
                 sin_t + std::size_t(t * half), half, d, 1.0f, kr);
          float* kc = state.keys(std::size_t(pos / P), g);
          for (int i = 0; i < d; ++i) kc[std::size_t(i) * P + std::size_t(pos % P)] = kr[i];
          float* vc = state.values(std::size_t(pos / P), g) + std::size_t(pos % P) * std::size_t(dp);
          std::memcpy(vc, V.data() + row * V.outerStride() + g * d, sizeof(float) * std::size_t(d));
        }
    }
  });

  // Item i: kv head i / n_tiles, tile i % n_tiles; a tile costs about its positions' context.
  const std::vector<std::int64_t> cut = balanced_cuts(items, threads, [&](std::int64_t i) {
    return double(pos0 + (i % n_tiles) * tile + tile / 2 + P);
  });
  detail::parallel_ranges(threads, threads, [&](int r, int, int worker) {
    float* cos_t = scratch.data() + per_worker * std::size_t(worker);
    float* sin_t = cos_t + table;
    float* qs = sin_t + table;      // (d): one rotated, scaled query
    float* qT = qs + d;             // (d, ld): the tile's queries, a row per lane
    float* sT = qT + std::size_t(d) * ld;  // (keys, ld): scores, then weights
    float* l = sT + keys * ld;      // (ld)
    float* acc = l + ld;            // (rows, lda)
    std::int32_t* n = visible.data() + ld * std::size_t(worker);  // (ld): keys each sees
    for (std::int64_t item = cut[std::size_t(r)]; item < cut[std::size_t(r) + 1]; ++item) {
      const int g = int(item / n_tiles);
      const std::int64_t a = (item % n_tiles) * tile;
      const int nt = int(std::min<std::int64_t>(tile, T - a)), R = nt * G;
      for (int t = 0; t < nt; ++t) {
        rotary(pos0 + a + t, cos_t + std::size_t(t * half), sin_t + std::size_t(t * half));
        for (int u = 0; u < G; ++u) {
          const std::size_t at = std::size_t(t * G + u);
          rotate(Q.data() + (a + t) * Q.outerStride() + (g * G + u) * d,
                 cos_t + std::size_t(t * half), sin_t + std::size_t(t * half), half, d, scale_, qs);
          for (int i = 0; i < d; ++i) qT[std::size_t(i) * ld + at] = qs[i];
          n[at] = std::int32_t(pos0 + a + t + 1);
        }
      }
      for (std::size_t at = std::size_t(R); at < ld; ++at) {
        for (int i = 0; i < d; ++i) qT[std::size_t(i) * ld + at] = 0.0f;
        n[at] = n[0];
      }
      const std::int64_t last = pos0 + a + nt;  // keys the tile's last query sees
      const auto pages = std::size_t((last + P - 1) / P);
      const auto in_page = [&](std::size_t p) {
        return int(std::min<std::int64_t>(P, last - std::int64_t(p) * P));
      };
      for (std::size_t p = 0; p < pages; ++p)
        kern.tile_scores(qT, int(ld), int(ld), state.keys(p, g), P, d, in_page(p),
                         sT + p * P * ld, std::int64_t(ld));
      kern.tile_softmax(sT, std::int64_t(ld), int(ld), n, int(last), l);
      std::fill(acc, acc + std::size_t(R) * lda, 0.0f);
      for (std::size_t p = 0; p < pages; ++p)
        kern.tile_weighted_rows(acc, std::int64_t(lda), R, sT + p * P * ld, std::int64_t(ld),
                                state.values(p, g), in_page(p), dp);
      for (int t = 0; t < nt; ++t)
        for (int u = 0; u < G; ++u) {
          const std::size_t at = std::size_t(t * G + u);
          const float inv = 1.0f / l[at];
          float* out = O.data() + (a + t) * O.outerStride() + (g * G + u) * d;
          for (int j = 0; j < d; ++j) out[j] = acc[at * lda + std::size_t(j)] * inv;
        }
    }
  });
  state.n_tokens_ += T;
}

// A windowed layer: its ring holds window + 1 slots, so a token's key overwrites one that the
// queries before it may still need; the tokens are walked in turn, each stored and then
// attended, as step() does (a token's cost is bounded by the window, whatever the context).
void CausalAttention::prefill_ring(CausalState& state, const ConstMatrixRef& Q,
                                   const ConstMatrixRef& K, const ConstMatrixRef& V, MatrixRef O,
                                   int chunk, int threads_asked) const {
  const int H = config_.n_heads, Hkv = config_.n_kv_heads, d = config_.d_head;
  const int G = H / Hkv;
  const Eigen::Index T = Q.rows();
  const int window = config_.window;
  const std::int64_t pos0 = state.n_tokens_;
  const int half = int(inv_freq_.size()), dp = state.d_padded_;
  const int threads = std::min(detail::resolve_threads(threads_asked), Hkv);
  const std::size_t visible = std::size_t(window + 1);
  const std::size_t table = std::size_t(chunk) * std::size_t(half);
  const std::size_t per_worker = 2 * table + std::size_t(2 * d + P + dp) + visible;
  std::vector<float> scratch(per_worker * std::size_t(threads), 0.0f);
  const kernels::Kernels& kern = kernels::active();
  // A worker owns kv heads [g0, g1) and their query heads, and walks every token in order:
  // it stores a token's key before any query of that token reads it, as step() does.
  detail::parallel_ranges(Hkv, threads, [&](int g0, int g1, int worker) {
    float* cos_t = scratch.data() + per_worker * std::size_t(worker);
    float* sin_t = cos_t + table;
    float* qs = sin_t + table;
    float* kr = qs + d;
    const Scratch w{kr + d, kr + d + P + dp, kr + d + P};
    for (Eigen::Index b0 = 0; b0 < T; b0 += chunk) {
      const int n = int(std::min<Eigen::Index>(chunk, T - b0));
      for (int t = 0; t < n; ++t)
        rotary(pos0 + b0 + t, cos_t + std::size_t(t * half), sin_t + std::size_t(t * half));
      for (int g = g0; g < g1; ++g)
        for (int t = 0; t < n; ++t) {
          const Eigen::Index row = b0 + t;
          const std::int64_t pos = pos0 + row;
          const float* c = cos_t + std::size_t(t * half);
          const float* s = sin_t + std::size_t(t * half);
          const std::int64_t slot = pos % (window + 1);
          rotate(K.data() + row * K.outerStride() + g * d, c, s, half, d, 1.0f, kr);
          float* kc = state.keys(std::size_t(slot / P), g);
          for (int i = 0; i < d; ++i) kc[std::size_t(i) * P + std::size_t(slot % P)] = kr[i];
          std::memcpy(state.values(std::size_t(slot / P), g) + std::size_t(slot % P) * std::size_t(dp),
                      V.data() + row * V.outerStride() + g * d, sizeof(float) * std::size_t(d));
          for (int h = g * G; h < (g + 1) * G; ++h) {
            rotate(Q.data() + row * Q.outerStride() + h * d, c, s, half, d, scale_, qs);
            attend_one(kern, state, g, d, dp, window, qs, pos, w, O.data() + row * O.outerStride() + h * d,
                       &CausalAccess::keys, &CausalAccess::values);
          }
        }
    }
  });
  state.n_tokens_ += T;
}

}  // namespace recur
