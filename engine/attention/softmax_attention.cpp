#include "recur/softmax_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dispatch.h"
#include "kernels/finite.h"
#include "util/check.h"
#include "util/parallel.h"

namespace recur {
namespace {

constexpr int kPage = KVCache::kPageTokens;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows of values are padded to whole vectors of the widest target (16 lanes).
constexpr int kPad = 16;
int padded(int d) { return (d + kPad - 1) / kPad * kPad; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// KVCache

KVCache::KVCache(int n_heads, int d_head)
    : n_heads_(n_heads),
      d_head_(d_head),
      page_floats_(static_cast<std::size_t>(n_heads) * kPage *
                   static_cast<std::size_t>(d_head + padded(d_head))),
      workspace_(2 * static_cast<std::size_t>(padded(d_head)) + kPage) {}

float* KVCache::key_page(std::size_t page, int head) const {
  return pages_[page].get() +
         static_cast<std::size_t>(head) * kPage * static_cast<std::size_t>(d_head_ + padded(d_head_));
}

float* KVCache::value_page(std::size_t page, int head) const {
  return key_page(page, head) + static_cast<std::size_t>(d_head_) * kPage;
}

void KVCache::ensure_capacity(std::int64_t tokens) {
  const auto need = static_cast<std::size_t>((tokens + kPage - 1) / kPage);
  while (pages_.size() < need) {
    // Zeroed, so that the padding of value rows and unused key columns are finite.
    pages_.emplace_back(new float[page_floats_]());
  }
}

KVCache KVCache::clone() const {
  KVCache copy(n_heads_, d_head_);
  copy.ensure_capacity(n_tokens_);
  for (std::size_t p = 0; p < copy.pages_.size(); ++p)
    std::memcpy(copy.pages_[p].get(), pages_[p].get(), page_floats_ * sizeof(float));
  copy.n_tokens_ = n_tokens_;
  return copy;
}

void KVCache::reset() { n_tokens_ = 0; }

void KVCache::truncate(std::int64_t n) {
  if (n < 0 || n > n_tokens_)
    detail::throw_argument("KVCache::truncate", "n is {}, expected 0 to n_tokens = {}", n,
                           n_tokens_);
  n_tokens_ = n;
}

void KVCache::release() {
  n_tokens_ = 0;
  pages_.clear();
  pages_.shrink_to_fit();
}

std::size_t KVCache::bytes() const {
  return sizeof(*this) + pages_.size() * (page_floats_ * sizeof(float) + sizeof(pages_[0])) +
         workspace_.size() * sizeof(float);
}

// ---------------------------------------------------------------------------------------------
// SoftmaxAttention

SoftmaxAttention::SoftmaxAttention(const SoftmaxAttentionConfig& config) : config_(config) {
  constexpr const char* call = "SoftmaxAttention";
  if (config.n_heads < 1 || config.n_heads > 65536)
    detail::throw_argument(call, "n_heads is {}, expected 1 to 65536", config.n_heads);
  if (config.d_head < 1 || config.d_head > 65536)
    detail::throw_argument(call, "d_head is {}, expected 1 to 65536", config.d_head);
  if (!std::isfinite(config.scale) || config.scale < 0.0f)
    detail::throw_argument(call, "scale is {}, expected a finite number >= 0 (0: default)",
                           config.scale);
  scale_ = config.scale != 0.0f ? config.scale
                                : static_cast<float>(1.0 / std::sqrt(double(config.d_head)));
}

KVCache SoftmaxAttention::make_cache() const { return KVCache(config_.n_heads, config_.d_head); }

void SoftmaxAttention::check_cache(const KVCache& cache, const char* call) const {
  if (cache.n_heads_ != config_.n_heads || cache.d_head_ != config_.d_head)
    detail::throw_argument(call,
                           "cache was made for another layer: cache has n_heads {}, d_head {}; "
                           "layer has n_heads {}, d_head {}",
                           cache.n_heads_, cache.d_head_, config_.n_heads, config_.d_head);
}

void SoftmaxAttention::store(KVCache& cache, const float* k, const float* v,
                             std::int64_t pos) const {
  const int d = config_.d_head, dp = padded(d);
  const auto page = static_cast<std::size_t>(pos / kPage);
  const int slot = static_cast<int>(pos % kPage);
  for (int h = 0; h < config_.n_heads; ++h) {
    float* kt = cache.key_page(page, h);
    for (int i = 0; i < d; ++i) kt[i * kPage + slot] = k[h * d + i];
    std::memcpy(cache.value_page(page, h) + slot * dp, v + h * d, sizeof(float) * std::size_t(d));
  }
}

void SoftmaxAttention::step(KVCache& cache, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
                            VectorRef out) const {
  constexpr const char* call = "SoftmaxAttention::step";
  check_cache(cache, call);
  const int H = config_.n_heads, d = config_.d_head, dp = padded(d);
  for (const auto& [name, x] : {std::pair<const char*, const ConstVectorRef*>{"q", &q},
                                {"k", &k}, {"v", &v}}) {
    if (x->size() != Eigen::Index(H) * d)
      detail::throw_shape(call, "{} has {} elements, expected n_heads * d_head = {} * {} = {}",
                          name, x->size(), H, d, H * d);
  }
  if (out.size() != Eigen::Index(H) * d)
    detail::throw_shape(call, "out has {} elements, expected n_heads * d_head = {} * {} = {}",
                        out.size(), H, d, H * d);
  detail::check_finite(call, "q", q.data(), 1, q.size(), q.size());
  detail::check_finite(call, "k", k.data(), 1, k.size(), k.size());
  detail::check_finite(call, "v", v.data(), 1, v.size(), v.size());

  const std::int64_t pos = cache.n_tokens_;
  cache.ensure_capacity(pos + 1);  // may throw bad_alloc: nothing has changed yet
  store(cache, k.data(), v.data(), pos);
  const std::int64_t n = pos + 1;
  ++cache.n_tokens_;

  float* qs = cache.workspace_.data();      // (d)
  float* acc = qs + dp;                     // (dp)
  float* scores = acc + dp;                 // (kPage)
  const kernels::Kernels& kern = kernels::active();
  for (int h = 0; h < H; ++h) {
    for (int i = 0; i < d; ++i) qs[i] = q[h * d + i] * scale_;
    std::fill(acc, acc + dp, 0.0f);
    float m = kNegInf, l = 0.0f;
    for (std::int64_t p0 = 0; p0 < n; p0 += kPage) {
      const auto page = static_cast<std::size_t>(p0 / kPage);
      const int count = static_cast<int>(std::min<std::int64_t>(kPage, n - p0));
      const float* kt = cache.key_page(page, h);
      // At long contexts the cache is far larger than the caches: while this page is
      // computed, each of its rows asks for the same row of the next page.
      const float* next = p0 + kPage < n ? cache.key_page(page + 1, h) : kt;
      // Scores of the page's tokens, one FMA chain over q's elements each.
      kern.kv_scores(qs, kt, next, d, kPage, scores);
      float page_max = kNegInf;
      for (int t = 0; t < count; ++t) page_max = std::max(page_max, scores[t]);
      const float m_new = std::max(m, page_max);
      const float correction = std::exp(m - m_new);  // 0 on the first page
      kern.exp_minus(scores, scores, kPage, m_new);
      // Slots past the last token hold scores of stale or zeroed keys: they must not count.
      for (int t = count; t < kPage; ++t) scores[t] = 0.0f;
      float page_sum = 0.0f;
      for (int t = 0; t < count; ++t) page_sum += scores[t];
      l = l * correction + page_sum;
      // acc = acc * correction + sum_t p_t v_t, with the next page's values on their way.
      kern.kv_accumulate(acc, cache.value_page(page, h), scores, count, dp, correction,
                         next + d * kPage);
      m = m_new;
    }
    const float inv = 1.0f / l;
    for (int i = 0; i < d; ++i) out[h * d + i] = acc[i] * inv;
  }
}

void SoftmaxAttention::append(KVCache& cache, const ConstMatrixRef& K,
                              const ConstMatrixRef& V) const {
  constexpr const char* call = "SoftmaxAttention::append";
  check_cache(cache, call);
  const int H = config_.n_heads, d = config_.d_head;
  if (K.cols() != Eigen::Index(H) * d || V.cols() != K.cols() || V.rows() != K.rows())
    detail::throw_shape(call, "K has shape ({}, {}) and V ({}, {}), expected (T, {} * {}) both",
                        K.rows(), K.cols(), V.rows(), V.cols(), H, d);
  detail::check_finite(call, "K", K.data(), K.rows(), K.cols(), K.outerStride());
  detail::check_finite(call, "V", V.data(), V.rows(), V.cols(), V.outerStride());
  cache.ensure_capacity(cache.n_tokens_ + K.rows());
  for (Eigen::Index t = 0; t < K.rows(); ++t)
    store(cache, K.data() + t * K.outerStride(), V.data() + t * V.outerStride(),
          cache.n_tokens_ + t);
  cache.n_tokens_ += K.rows();
}

void SoftmaxAttention::prefill(KVCache& cache, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                               const ConstMatrixRef& V, MatrixRef O) const {
  constexpr const char* call = "SoftmaxAttention::prefill";
  check_cache(cache, call);
  const int H = config_.n_heads, d = config_.d_head, dp = padded(d);
  const Eigen::Index T = Q.rows();

  detail::check_heads_shape(call, "Q", Q, T, H, d, "d_head");
  detail::check_heads_shape(call, "K", K, T, H, d, "d_head");
  detail::check_heads_shape(call, "V", V, T, H, d, "d_head");
  detail::check_heads_shape(call, "O", O, T, H, d, "d_head");
  detail::check_finite(call, "Q", Q.data(), T, Q.cols(), Q.outerStride());
  detail::check_finite(call, "K", K.data(), T, K.cols(), K.outerStride());
  detail::check_finite(call, "V", V.data(), T, V.cols(), V.outerStride());
  if (T == 0) return;
  const std::int64_t pos0 = cache.n_tokens_;
  cache.ensure_capacity(pos0 + T);
  for (Eigen::Index t = 0; t < T; ++t)
    store(cache, K.data() + t * K.outerStride(), V.data() + t * V.outerStride(), pos0 + t);
  cache.n_tokens_ += T;

  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const Mat>;
  constexpr Eigen::Index kQueryBlock = 64;
  const int threads = std::min(detail::resolve_threads(0), H);
  detail::parallel_ranges(H, threads, [&](int h0, int h1, int) {
    Mat q(kQueryBlock, d), s(kQueryBlock, kPage), acc(kQueryBlock, dp);
    Eigen::VectorXf m(kQueryBlock), l(kQueryBlock);
    for (int h = h0; h < h1; ++h) {
      for (Eigen::Index a = 0; a < T; a += kQueryBlock) {
        const Eigen::Index nq = std::min(kQueryBlock, T - a);
        q.topRows(nq) = Q.block(a, Eigen::Index(h) * d, nq, d) * scale_;
        acc.setZero();
        m.setConstant(kNegInf);
        l.setZero();
        const std::int64_t last = pos0 + a + nq - 1;  // the block's last query position
        for (std::int64_t p0 = 0; p0 <= last; p0 += kPage) {
          const auto page = static_cast<std::size_t>(p0 / kPage);
          const CMap kt(cache.key_page(page, h), d, kPage);
          const CMap vp(cache.value_page(page, h), kPage, dp);
          s.topRows(nq).noalias() = q.topRows(nq) * kt;
          for (Eigen::Index r = 0; r < nq; ++r) {
            const std::int64_t qpos = pos0 + a + r;
            const auto visible = static_cast<Eigen::Index>(
                std::clamp<std::int64_t>(qpos - p0 + 1, 0, kPage));
            if (visible < kPage) s.row(r).tail(kPage - visible).setConstant(kNegInf);
            if (visible == 0) {  // only keys after this query: they add nothing
              s.row(r).setZero();
              continue;
            }
            const float m_new = std::max(m(r), s.row(r).head(visible).maxCoeff());
            const float correction = std::exp(m(r) - m_new);
            s.row(r) = (s.row(r).array() - m_new).exp();
            // Eigen's exp flushes -inf to a tiny positive number, not 0: masked keys are zeroed.
            if (visible < kPage) s.row(r).tail(kPage - visible).setZero();
            l(r) = l(r) * correction + s.row(r).sum();
            acc.row(r) *= correction;
            m(r) = m_new;
          }
          acc.topRows(nq).noalias() += s.topRows(nq) * vp;
        }
        for (Eigen::Index r = 0; r < nq; ++r)
          O.block(a + r, Eigen::Index(h) * d, 1, d) = acc.row(r).head(d) / l(r);
      }
    }
  });
}

RowMatrix SoftmaxAttention::prefill(KVCache& cache, const ConstMatrixRef& Q,
                                    const ConstMatrixRef& K, const ConstMatrixRef& V) const {
  RowMatrix O(Q.rows(), Eigen::Index(config_.n_heads) * config_.d_head);
  prefill(cache, Q, K, V, O);
  return O;
}

}  // namespace recur
