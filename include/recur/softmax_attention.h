// Softmax attention with a KV cache: the baseline that linear attention is measured against.
// The cache keeps every past key and value, so its memory grows by
// 2 * n_heads * d_head * 4 bytes per token and a step costs O(context * d_head) per head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "recur/types.h"

namespace recur {

/// Shape of one softmax attention layer.
struct SoftmaxAttentionConfig {
  int n_heads = 8;
  int d_head = 64;
  float scale = 0.0f;  ///< multiplies q . k; 0 picks 1 / sqrt(d_head)
};

class SoftmaxAttention;

/// The keys and values of one sequence, in pages of kPageTokens tokens that are allocated as
/// the sequence grows; nothing already stored is ever copied or moved. Copying is explicit.
class KVCache {
 public:
  static constexpr int kPageTokens = 64;

  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  KVCache clone() const;
  /// Forget every token; pages already allocated are kept for reuse.
  void reset();
  /// Forget every token and free every page.
  void release();
  /// Keep the first n tokens and forget the rest (0 <= n <= n_tokens()).
  void truncate(std::int64_t n);

  std::int64_t n_tokens() const { return n_tokens_; }
  int n_heads() const { return n_heads_; }
  int d_head() const { return d_head_; }
  /// Bytes held: the pages allocated (keys and values) plus the workspace.
  std::size_t bytes() const;

 private:
  friend class SoftmaxAttention;
  KVCache(int n_heads, int d_head);
  float* key_page(std::size_t page, int head) const;    // (d_head, kPageTokens): transposed
  float* value_page(std::size_t page, int head) const;  // (kPageTokens, d_head)
  void ensure_capacity(std::int64_t tokens);

  int n_heads_ = 0;
  int d_head_ = 0;
  std::int64_t n_tokens_ = 0;
  std::size_t page_floats_ = 0;  // per page: n_heads * 2 * kPageTokens * d_head
  std::vector<std::unique_ptr<float[]>> pages_;
  std::vector<float> workspace_;  // step, one head at a time: scaled q (dp), acc (dp), scores (kPageTokens)
};

/// One softmax attention layer. Immutable; share it between threads.
class SoftmaxAttention {
 public:
  explicit SoftmaxAttention(const SoftmaxAttentionConfig& config);

  const SoftmaxAttentionConfig& config() const { return config_; }
  float scale() const { return scale_; }
  KVCache make_cache() const;

  /// Appends k and v, then attends q over every cached token. q, k, v, out: (n_heads * d_head).
  void step(KVCache& cache, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
            VectorRef out) const;
  /// Causal attention of T new tokens over the cache and each other, in blocks with an online
  /// softmax (never a T x T matrix). Q, K, V, O: (T, n_heads * d_head).
  void prefill(KVCache& cache, const ConstMatrixRef& Q, const ConstMatrixRef& K,
               const ConstMatrixRef& V, MatrixRef O) const;
  RowMatrix prefill(KVCache& cache, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V) const;
  /// Stores keys and values without attending: what prefill leaves in the cache, at the cost
  /// of a copy. For filling a cache to a given context quickly (benchmarks).
  void append(KVCache& cache, const ConstMatrixRef& K, const ConstMatrixRef& V) const;

 private:
  void check_cache(const KVCache& cache, const char* call) const;
  void store(KVCache& cache, const float* k, const float* v, std::int64_t pos) const;

  SoftmaxAttentionConfig config_;
  float scale_ = 1.0f;
};

}  // namespace recur
