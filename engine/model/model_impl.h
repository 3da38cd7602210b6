// The loaded form of a model: packed matrices, norms and feature maps, layer by layer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/layers.h"
#include "recur/causal_attention.h"
#include "recur/feature_map.h"
#include "recur/gated_attention.h"
#include "recur/linear_attention.h"
#include "recur/model.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"

namespace recur {

namespace model {

/// "model.layers.<i>.": where layer i's tensors are named in every layout.
std::string layer_prefix(int i);

/// Appends the names and shapes of one learned feature map's parameters, under `prefix`
/// (attn.feature_map_q. or _k.); nothing for a fixed map.
void feature_map_tensors(const ModelConfig& c, const std::string& prefix,
                         std::vector<std::pair<std::string, std::vector<std::int64_t>>>& out);

}  // namespace model

/// One tensor the loader read: under which name, as which tensor of the architecture's table,
/// and whether it became a matrix of the forward pass (what `recur quantize` may quantize).
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
  struct Layer {
    MixerKind mixer = MixerKind::kLinearAttention;
    model::Norm attn_norm;  // pre-norm: before attention; post-norm: after the attention residual
    model::Norm mlp_norm;
    model::Dense q, k, v, o;
    // q's and k's maps, per head: head_k_dim floats to d_feature (tied maps share parameters;
    // norm_q / norm_k wrap them). Null for Based, whose linear attention maps q and k itself.
    std::shared_ptr<const FeatureMap> phi_q, phi_k;
    bool has_head_norm = false;
    model::Norm head_norm;  // per head, over head_v_dim
    model::Dense gate, up, down;  // SwiGLU (linear_attn)
    model::Dense fc1, fc2;        // ReLU / GELU MLP (transformers_are_rnns)
    bool gelu = false;            // fc1's activation: GELU, else ReLU (read once, at load)
    std::unique_ptr<LinearAttention> attention;  // kLinearAttention
    // Based's BaseConv (kShortConv): in_proj's two halves, the convolution of the first, the
    // gate silu(conv(u1)) * u2, out_proj. The other Based mixers use q, k, v and o above
    // (kWindowAttention: Wqkv's three thirds; kLinearAttention: proj_q, proj_k, proj_v).
    model::Dense in_u1, in_u2, out_proj;
    std::unique_ptr<ShortConvolution> conv;
    std::unique_ptr<WindowAttention> window;
    // fla's gated models (kGated): q, k, v, o above, the output gate g_proj, GLA's low-rank gate
    // gk_proj (gk0 then gk1, with a bias), short convolutions on q, k, v (or none), the
    // recurrence, and the output norm in head_norm (per head; HGRN2's over the whole width).
    model::Dense g_proj, gk0, gk1;
    std::unique_ptr<ShortConvolution> conv_q, conv_k, conv_v;
    std::unique_ptr<GatedAttention> gated;
    std::vector<float> lower_bound;  // HGRN2: (hidden), the forget gate's floor; empty for none
    std::vector<float> rope_inv_freq;  // RetNet: (head_k_dim / 2), rotary on q and k
    // fla's hybrid `attn` layers (kAttention): q, k, v (biases if qkv_bias), o, and the layer.
    std::unique_ptr<CausalAttention> causal;
  };
  std::vector<float> embeddings;  // (embedding_rows, hidden): vocab_size rows, then padding
  std::vector<Layer> layers;
  bool has_final_norm = false;
  model::Norm final_norm;
  model::Dense lm_head;
  std::vector<TensorUse> tensors;  // every tensor read, in the order read
};

}  // namespace recur
