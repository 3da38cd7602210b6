// What Decoder and BatchDecoder share: the workspace rows run through, the layer stack with the
// attention left to the caller, and the LM head. Every stage is a function of one row, so a row's
// bytes do not depend on which rows share the call: a chunk of one sequence's tokens (prefill)
// and one token from each of many sequences (batched decode) go through the same code.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/model_impl.h"

namespace recur::model {

/// Buffers for up to `cap` rows; never part of a decoder's value.
struct Workspace {
  int cap = 0;
  std::vector<float> x, h, q, k, v, fq, fk, fk_full, v_full, o, a, g, u, map_scratch, logits;

  /// Sizes every buffer for `rows` rows (logits stays empty until run_head() needs it).
  void allocate(const ModelConfig& c, const Model::Impl& m, int rows);
  std::size_t bytes() const;
};

/// A non-owning reference to a callable, so that the per-token path allocates nothing.
template <class Signature>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as a function argument
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(a...); }) {}
  R operator()(A... a) const { return call_(object_, a...); }

 private:
  void* object_;
  R (*call_)(void*, A...);
};

/// The attention of layer `layer` over the workspace's n rows: fq and fk (n, H * d_feature) after
/// the feature maps, v (n, H * head_v_dim) with kv heads already repeated; writes o (n, H *
/// head_v_dim). May throw (the stack then stops and rethrows).
using Attend = FunctionRef<void(std::size_t layer, const float* fq, const float* fk,
                                const float* v, float* o, int n, int threads)>;

/// Runs n rows (n <= w.cap), the embeddings of `tokens`, through every layer; leaves the last
/// layer's output in w.x.
void run_stack(const Model& model, Workspace& w, const int* tokens, int n, int threads,
               Attend attend);

/// The LM head over rows [first, n) of w.x: (n - first) x vocab_size logits into `out`, checked
/// finite unless `call` is null (NumericError names `call`).
void run_head(const Model& model, Workspace& w, int first, int n, float* out, int threads,
              const char* call);

}  // namespace recur::model

namespace recur {

struct Decoder::Impl {
  std::vector<LinearState> states;
  std::int64_t n_tokens = 0;
  bool has_logits = false;
  // Set when a forward pass failed after some layers had advanced (an overflow inside the
  // model): the states no longer describe one sequence, so nothing runs until reset() or load().
  std::string broken;
  Eigen::VectorXf logits;  // after the last token
  model::Workspace work;   // for up to options.chunk rows

  // Bytes of a saved state of this model with an empty session: the header, each layer's size
  // and sums, the logits, the session's header and the checksum (see save_bytes()).
  std::size_t saved_size(int vocab) const;
  static constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4;
  static constexpr std::size_t kSessionHeaderBytes = 4 + 8 + 8;
};

}  // namespace recur
