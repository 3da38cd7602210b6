// Causal softmax attention with rotary position embeddings and grouped kv heads: the softmax
// layers of the hybrid models (flash-linear-attention's `attn` layers, and the attention every
// other hybrid family puts among its recurrent layers). A layer is either full (a token sees every
// token before it: its state is a KV cache that grows by 2 * n_kv_heads * d_head floats a token)
// or windowed (a token sees the `window` tokens before it: a ring of window + 1 slots, constant).
//
// The output for a query depends only on its q and on the keys and values it sees, visited in
// one fixed order (oldest first, by absolute position) for the max, the exponentials (recur's own
// exp), the sum and the weighted values: prefill() in any split, chunking or thread count gives
// the bytes of step() token by token, on every instruction set. The arithmetic is that of
// WindowAttention (Based's sliding window), which this layer generalises to kv groups and to a
// cache without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "recur/linear_attention.h"  // PrefillOptions
#include "recur/types.h"

namespace recur {

/// Shape of one causal softmax attention layer.
struct CausalAttentionConfig {
  int n_heads = 8;
  int n_kv_heads = 0;  ///< 0: n_heads. Query head h reads kv head h / (n_heads / n_kv_heads).
  int d_head = 64;     ///< even: rotary turns pairs (i, i + d_head / 2), GPT-NeoX's halves
  /// 0: full attention over every earlier token (the state grows). Else the previous tokens a
  /// token sees (flash-attn's window (window, 0); fla's window_size is this plus one).
  int window = 0;
  float rope_theta = 10000.0f;  ///< pair i turns by pos * rope_theta^(-2i / rotary_dim)
  /// The leading dimensions rotary turns (even, at most d_head; 0: all of them): pairs
  /// (i, i + rotary_dim / 2), the rest pass unturned (Qwen3.5's partial rotary).
  int rotary_dim = 0;
  float scale = 0.0f;           ///< multiplies q . k; 0 picks d_head^-1/2
  bool rotary = true;           ///< false: no positions at all (Granite 4.0-H's "nope")
};

class CausalAttention;

/// One sequence's keys (after rotary) and values for one layer, in pages of kPageSlots slots
/// per kv head. A windowed layer's ring has window + 1 slots, allocated at creation; a full
/// layer's cache gains a page every kPageSlots tokens and never moves what it holds. Copying is
/// explicit: clone().
class CausalState {
 public:
  static constexpr int kPageSlots = 64;

  CausalState(CausalState&&) noexcept = default;
  CausalState& operator=(CausalState&&) noexcept = default;
  CausalState(const CausalState&) = delete;
  CausalState& operator=(const CausalState&) = delete;

  CausalState clone() const;
  /// Back to the start of a sequence; a full layer's pages are freed.
  void reset();

  std::int64_t n_tokens() const { return n_tokens_; }
  /// True for a full layer, whose size grows with the sequence.
  bool grows() const { return window_ == 0; }
  /// Bytes held now: pages and workspace.
  std::size_t bytes() const;

  /// The keys and values of the slots in use (every slot of a ring; the tokens so far of a full
  /// cache), per kv head, then the token count: the same bytes whatever pages were allocated.
  std::vector<unsigned char> raw_bytes() const;
  std::size_t raw_size() const { return raw_size_at(n_tokens_); }
  /// raw_size() of this layer's state after `n_tokens` tokens.
  std::size_t raw_size_at(std::int64_t n_tokens) const;
  /// Restores raw_bytes() of a state of this shape. Throws FormatError (the state unchanged) if
  /// the size does not match the count it holds, a value is not finite or the count is negative.
  void load_raw_bytes(const unsigned char* data, std::size_t size);

 private:
  friend class CausalAttention;
  friend struct CausalAccess;
  CausalState(int n_kv_heads, int d_head, int window);
  // Declared as its buffers (engine/util/state_buffers.h): the record, load, clone and reset.
  friend struct detail::DeclaredBuffers;
  static constexpr const char* kName = "CausalState";
  static constexpr std::uint32_t kFormat = 0;  // no format word
  static constexpr bool kGrows = true;
  template <class Self, class F>
  static void buffers(Self& s, F&& f);
  CausalState blank(std::int64_t n_tokens) const;
  std::int64_t slots_used() const;
  void ensure_pages(std::int64_t tokens);
  // Room for a step's `ranges` ranges of query heads, each seeing up to `keys` keys.
  void reserve_step(int ranges, std::int64_t keys);
  float* keys(std::size_t page, int kv_head) const;    // (d_head, kPageSlots): column = slot
  float* values(std::size_t page, int kv_head) const;  // (kPageSlots, d_padded): row = slot

  int n_kv_heads_ = 0;
  int d_head_ = 0;
  int d_padded_ = 0;  // d_head rounded up to 16
  int window_ = 0;
  std::int64_t n_tokens_ = 0;
  std::size_t page_floats_ = 0;
  std::vector<std::unique_ptr<float[]>> pages_;
  // step() workspace, not part of the state's value: cos, sin, a rotated key, then per range of
  // query heads a rotated q, a page of scores and acc; and per range the weights of every key a
  // query sees (grows with a full cache).
  std::vector<float> workspace_;
  std::vector<float> weights_;
};

/// One causal softmax attention layer. Immutable: share it between threads.
class CausalAttention {
 public:
  explicit CausalAttention(const CausalAttentionConfig& config);

  const CausalAttentionConfig& config() const { return config_; }
  float scale() const { return scale_; }
  CausalState make_state() const;

  /// One token at position state.n_tokens(). q, out: (n_heads * d_head); k, v: (n_kv_heads *
  /// d_head); before rotary. A full layer allocates when its cache gains a page, and the state
  /// its workspace when more threads than before take part. `threads` (0: every core) split the
  /// query heads once the context is long enough to pay for it; each head's sums are the same
  /// chains on any thread.
  void step(CausalState& state, ConstVectorRef q, ConstVectorRef k, ConstVectorRef v,
            VectorRef out, int threads = 1) const;
  /// T tokens: Q, O (T, n_heads * d_head); K, V (T, n_kv_heads * d_head). A full layer stores
  /// the T keys, then attends tiles of queries against each page of keys, and options.threads
  /// splits the (kv head, tile) pairs; a windowed layer walks the tokens in turn, its threads
  /// split over kv heads. options.chunk bounds the rotary table. Nothing here changes a result:
  /// each query's sums are the chains step() runs.
  void prefill(CausalState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
               const ConstMatrixRef& V, MatrixRef O, const PrefillOptions& options = {}) const;

 private:
  void check_state(const CausalState& state, const char* call) const;
  void prefill_full(CausalState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V, MatrixRef O, int chunk, int threads) const;
  void prefill_ring(CausalState& state, const ConstMatrixRef& Q, const ConstMatrixRef& K,
                    const ConstMatrixRef& V, MatrixRef O, int chunk, int threads) const;
  void rotary(std::int64_t pos, float* cos_out, float* sin_out) const;

  CausalAttentionConfig config_;
  float scale_ = 1.0f;
  std::vector<float> inv_freq_;  // (d_head / 2)
};

}  // namespace recur
