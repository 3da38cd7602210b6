// What Decoder and BatchDecoder share: the layer stack over a scratch's rows with the
// per-sequence stages left to the caller, and the LM head. Every other stage is a function of
// one row, so a row's bytes do not depend on which rows share the call: a chunk of one
// sequence's tokens (prefill) and one token from each of many sequences (batched decode) go
// through the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model_impl.h"
#include "model/network.h"

namespace recur::model {

/// Runs n rows (n <= s.cap), the embeddings of `tokens`, through every layer; leaves the last
/// layer's output in s.x.
void run_stack(const Model& model, Scratch& s, const int* tokens, int n, int threads,
               Attend attend);

/// The LM head over rows [first, n) of s.x: (n - first) x vocab_size logits into `out`, checked
/// finite unless `call` is null (NumericError names `call`).
void run_head(const Model& model, Scratch& s, int first, int n, float* out, int threads,
              const char* call);

}  // namespace recur::model

namespace recur {

struct Decoder::Impl {
  std::vector<std::unique_ptr<model::LayerState>> states;  // one per layer
  std::int64_t n_tokens = 0;
  bool has_logits = false;
  // Set when a forward pass failed after some layers had advanced (an overflow inside the
  // model): the states no longer describe one sequence, so nothing runs until reset() or load().
  std::string broken;
  Eigen::VectorXf logits;               // after the last token
  std::unique_ptr<model::Scratch> work;  // for up to options.chunk rows

  // Bytes of a saved state of this model after n_tokens tokens with an empty session: the
  // header, each layer's size and sums, the logits, the session's header and the checksum (see
  // save_bytes()).
  std::size_t saved_size(int vocab, std::int64_t n_tokens) const;
  static constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4;
  static constexpr std::size_t kSessionHeaderBytes = 4 + 8 + 8;
};

}  // namespace recur
