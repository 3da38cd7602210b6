// Choosing the next token from logits, and the byte-level tokenizer for models that ship none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recur/types.h"

namespace recur {

/// The ids that may be chosen, and over which logprobs are normalised. A head may have more rows
/// than its tokenizer has ids (RWKV's world models: 65,536 rows, 65,530 ids; heads padded to a
/// round size), and an id the tokenizer cannot decode must never be drawn: its logit counts as
/// -inf, so every sampler gives it probability 0. Made once where a model and its tokenizer are
/// joined (Tokenizer::sample_mask); immutable, so the samplers of every thread share one.
class TokenMask {
 public:
  /// allowed[id] != 0: the id may be chosen; ids at or past allowed.size() may not. At least one
  /// id must be allowed (ArgumentError otherwise).
  explicit TokenMask(std::vector<char> allowed);
  bool allows(int id) const {
    return id >= 0 && id < size() && allowed_[static_cast<std::size_t>(id)] != 0;
  }
  int size() const { return static_cast<int>(allowed_.size()); }
  /// How many ids are allowed.
  int count() const { return count_; }

 private:
  std::vector<char> allowed_;
  int count_ = 0;
};

/// A rule over what may come next that changes with every token chosen (structured output,
/// recur/json_constraint.h): one per sequence, never shared. The sampler asks it for the ids
/// allowed at each step and tells it the id chosen.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  /// allowed[id] != 0 for the ids that may come next (`n_ids` entries). The sampler draws among
  /// the ids both this and the mask allow; when none is, sample() throws ArgumentError.
  virtual const std::vector<char>& allowed(int n_ids) = 0;
  /// The id chosen (by sample(), or fed by the caller).
  virtual void accept(int id) = 0;
  /// Whether nothing may follow: the caller ends the sequence.
  virtual bool finished() const = 0;
};

struct SamplerOptions {
  /// 0 picks the most likely token (greedy); otherwise logits are divided by it.
  float temperature = 0.8f;
  /// Keep only the k most likely tokens (0: all).
  int top_k = 40;
  /// Keep the smallest set of most likely tokens whose probability reaches p (1: all).
  float top_p = 0.95f;
  /// > 1 discourages tokens already in the context: a positive logit is divided by it, a
  /// negative one multiplied (as in CTRL and Hugging Face). 1: off.
  float repetition_penalty = 1.0f;
  /// The random stream: the same seed, logits and history give the same tokens.
  std::uint64_t seed = 0;
  /// Only the ids it allows are ever chosen (null: every id of the logits). Text output sets it
  /// to the ids the tokenizer can decode.
  std::shared_ptr<const TokenMask> mask;
  /// Threads for the passes over the vocabulary (the exponentials, the max; 0: every core). The
  /// draws are the same for any value: each id's number is its own, and their sum is taken in
  /// one order on one thread.
  int threads = 1;
};

/// Applies, in order: the mask, repetition penalty, temperature, top-k, top-p, then draws.
/// Greedy ties go to the lowest id. The draw walks the kept ids most likely first, except with
/// top_k 0 and top_p 1 (every id kept), where it walks them in id order: the same distribution,
/// without sorting the vocabulary.
class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options = {});
  const SamplerOptions& options() const { return options_; }
  /// Sets options().mask (null: none): for a caller that learns the tokenizer after the sampler
  /// is made.
  void set_mask(std::shared_ptr<const TokenMask> mask) { options_.mask = std::move(mask); }
  /// A per-sequence constraint (null: none): sample() draws only ids it allows, as it does for
  /// the mask, and passes it the id drawn.
  void set_constraint(std::shared_ptr<TokenConstraint> constraint) { constraint_ = std::move(constraint); }
  TokenConstraint* constraint() const { return constraint_.get(); }
  /// The next token given the logits and the tokens seen so far (for the penalty).
  int sample(ConstVectorRef logits, const std::vector<int>& history);
  /// The random stream's position: save it with a state (SessionData) and restore it with
  /// set_state() to continue the same draws.
  std::uint64_t state() const { return state_; }
  void set_state(std::uint64_t state) { state_ = state; }

 private:
  double uniform();  // in [0, 1)
  int draw(ConstVectorRef logits, const std::vector<int>& history);
  SamplerOptions options_;
  std::shared_ptr<TokenConstraint> constraint_;
  std::uint64_t state_;
  std::vector<float> work_;
  std::vector<int> order_;
  std::vector<double> p_;                         // the candidates' softmax numerators, by id
  std::vector<std::size_t> best_;                 // (ranges) each range's first best candidate
  std::size_t first_best(std::size_t n);          // the first of order_[0, n) with the highest logit
  double numerators(std::size_t n, double t, double top);  // sets p_ of order_[0, n); their sum
  int draw_ranked(std::size_t keep, double sum);  // top-p and the draw over the first candidates
};

/// Bytes as tokens: id b is the byte b. 256 ids; models with a larger vocabulary can still use
/// it (ids >= 256 decode to nothing).
class ByteTokenizer {
 public:
  static constexpr int kVocab = 256;
  std::vector<int> encode(const std::string& text) const;
  /// The bytes of one token ("" for ids outside 0..255).
  std::string decode(int token) const;
  std::string decode(const std::vector<int>& tokens) const;
};

/// log softmax(logits)[target], computed in float64.
double log_probability(const float* logits, int vocab, int target);
/// log sum(exp(logits[id])) over the ids `mask` allows (every id when null), in float64: a
/// logprob normalised over those ids alone is logits[id] - this.
double log_normalizer(const float* logits, int vocab, const TokenMask* mask = nullptr);

}  // namespace recur
