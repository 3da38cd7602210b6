// The loaded form of a model: the embeddings, the family's layer stack (a Network), the final
// norm and the head, and the list of tensors read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/dense.h"
#include "model/network.h"
#include "recur/model.h"

namespace recur {

/// One tensor the loader read: under which name, as which tensor of the family's table, and
/// whether it became a matrix of the forward pass (what `recur quantize` may quantize).
struct TensorUse {
  enum class Role {
    kOther,   // norms, biases, feature maps, convolutions, an untied embedding: kept as they are
    kMatrix,  // a projection or MLP matrix (dense(), or a part of a fused one)
    kHead,    // the LM head, or the tied embedding that serves as the head
  };
  std::string name;       // as stored in the source
  std::string canonical;  // as hashed into the fingerprint (a tied tensor has one such name)
  std::vector<std::int64_t> shape;  // logical: (n_out, k_in) for a matrix
  Role role = Role::kOther;
  std::string format;     // "f32", "bf16", "f16", "q8", "q4": as loaded
};

struct Model::Impl {
  std::vector<float> embeddings;  // (embedding_rows, hidden): vocab_size rows, then padding
  std::unique_ptr<const model::Network> network;  // the family's layers
  bool has_final_norm = false;
  model::Norm final_norm;
  model::Dense lm_head;
  std::vector<TensorUse> tensors;  // every tensor read, in the order read
};

namespace model {

/// The one way in to a Model's loaded form, for the engine's code (the decoders, saved states,
/// quantize, a family's describe); the public header keeps it private.
struct ModelAccess {
  static const Model::Impl& impl(const Model& m) { return *m.impl_; }
};

inline const Model::Impl& impl_of(const Model& m) { return ModelAccess::impl(m); }

}  // namespace model

}  // namespace recur
