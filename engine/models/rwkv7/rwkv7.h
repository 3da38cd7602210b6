// RWKV-7 "Goose" (BlinkDL), read from either of its published layouts: BlinkDL's bare state dict
// (.pth, no config.json: every size from the tensors) and fla-hub's folder (config.json with
// model_type "rwkv7" and flash-linear-attention's tensor names). One model, one forward pass;
// each layout keeps its publisher's numeric rules (ln_x's eps, the kk normalisation).
// docs/rwkv7.md has the tensor tables and the formulas; tests/rwkv7 the float64 reference.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/family.h"

namespace recur::models::rwkv7 {

/// What RWKV-7 adds to ModelConfig's common fields (hidden_size C, num_hidden_layers L,
/// num_heads H, intermediate_size F, vocab_size V, norm_eps: the LayerNorms' eps).
struct Rwkv7Config final : FamilyConfig {
  enum class Layout {
    kFla,    // fla-hub's names (model.layers.i.attn.r_proj, ...), LoRA factors [rank, C]/[C, rank]
    kBlink,  // BlinkDL's names (blocks.i.att.receptance, ...), LoRA factors [C, rank]/[rank, C]
  };
  Layout layout = Layout::kFla;
  int head_size = 64;  // N; C = H N
  int n_heads = 0;     // H = C / N (resolved)
  // LoRA ranks: decay, in-context rate, value residual, output gate.
  int rank_w = 64, rank_a = 64, rank_v = 16, rank_g = 128;
  double lnx_eps = 64e-5;   // the per-head group norm's (BlinkDL 64e-5, fla head_dim * norm_eps)
  bool fla_l2 = false;      // kk / sqrt(|kk|^2 + 1e-6) (fla's fuse_norm), else / max(|kk|, 1e-12)
  bool ln0 = true;          // LayerNorm on the embeddings (fla: norm_first)
  bool ln0_stored = true;   // its weight and bias are in the file (fla may leave them out: 1, 0)
  bool norm_bias = true;    // the LayerNorms have a bias (fla's norm_bias; g_norm always has one)
  bool fused_lerps = false; // fla's first layout: the six lerps as one attn.x_x [6, C]
  // fla config fields that change nothing recur computes, kept so config.json round-trips.
  double hidden_ratio = 4;
  int max_position_embeddings = 2048;
};

const Rwkv7Config& config_of(const ModelConfig& c);

// rwkv7_config.cpp
void read_config(const json::Value& root, model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);
/// make-model's options and configuration (fla-hub's layout), from the table.
std::vector<model::MakeOption> make_model_options();
std::string make_model_config(const model::MakeOptions& o);
/// The sizes the layer takes from the tensors (ranks, FFN width, vocab rows, which optional
/// tensors are there), over config.json's fields where those are stale.
void fit_to_weights(ModelConfig& c, const WeightSource& w);
/// A .pth's configuration, every size from the tensors; nullopt when it is not RWKV-7's.
std::optional<ModelConfig> config_from_weights(const WeightSource& w, const std::string& source);

/// The tensor names of one layout.
struct Names {
  std::string emb, ln0, ln_out, head;
  std::string layer(int i) const;  // "blocks.i." or "model.layers.i."
  std::string ln1, ln2, att, ffn;  // after layer(i): "ln1" / "attn_norm", ..., "att." / "attn."
  std::string r, k, v, o, lnx;     // projections and the group norm, after att
  bool blink = false;
};
Names names_of(const Rwkv7Config& rc);

}  // namespace recur::models::rwkv7
