// flash-linear-attention's gated models as fla lays them out (fla/models/{gla,retnet,hgrn2},
// fla/layers/{gla,multiscale_retention,hgrn2,attn}.py): the family, its tensor table and loading.
// The layer stack is gla_network.cpp. docs/fla-models.md.
#include "models/gla/gla.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/loader.h"
#include "models/gla/gla_layers.h"
#include "models/registry.h"
#include "recur/error.h"

namespace recur::models::gla {

std::string prefix(int i) { return fmt::format("model.layers.{}.", i); }

std::string out_norm_name(const ModelConfig& c) {
  const GlaConfig& fc = config_of(c);
  if (fc.kind == GlaConfig::Kind::kHgrn2) return "attn.g_norm";
  return fc.use_output_gate && fc.fuse_norm ? "attn.g_norm_swish_gate" : "attn.g_norm";
}

Widths gated_widths(const ModelConfig& c) {
  const GlaConfig& fc = config_of(c);
  if (fc.kind == GlaConfig::Kind::kHgrn2) return {c.hidden_size, c.hidden_size, c.hidden_size};
  return {fc.key_dim, fc.key_dim / fc.kv_groups, fc.value_dim / fc.kv_groups};
}


namespace {

using Init = model::TensorSpec::Init;

void load_into(const ModelConfig& c, model::Loader& ld, Model::Impl& impl,
               std::vector<Layer>& layers) {
  const GlaConfig& fc = config_of(c);
  const int d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
  const auto eps = static_cast<float>(c.norm_eps);
  const auto norm = [&](const std::string& name, int dim, bool affine, const char* why) {
    Norm n;
    n.dim = dim;
    n.eps = eps;
    if (affine) n.weight = ld.take(name + ".weight", {dim}, why, Init::kNorm);
    return n;
  };
  const auto conv = [&](const std::string& name, int channels, const char* why) {
    const auto taps = ld.take(name + ".weight", {channels, 1, fc.conv_size}, why, Init::kConv);
    return std::make_unique<ShortConvolution>(
        Eigen::Map<const RowMatrix>(taps.data(), channels, fc.conv_size));
  };
  const model::Ends ends{"model.embeddings.weight", "lm_head.weight", V};
  const model::MatrixWeight table = model::take_embedding(ld, c, impl, ends);
  // HGRN2's lower bounds: softmax over the layers per channel, its running sum, minus the first
  // layer's share (so layer 0 has none), in double, as the model computes them once per forward.
  std::vector<double> bounds;
  if (fc.kind == GlaConfig::Kind::kHgrn2 && fc.use_lower_bound) {
    const auto raw = ld.take("model.lower_bounds", {L, d}, "num_hidden_layers, hidden_size",
                             Init::kUnit);
    bounds.assign(std::size_t(L) * std::size_t(d), 0.0);
    for (int j = 0; j < d; ++j) {
      double m = double(raw[std::size_t(j)]);
      for (int l = 1; l < L; ++l) m = std::max(m, double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]));
      double sum = 0;
      for (int l = 0; l < L; ++l) sum += std::exp(double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]) - m);
      double run = 0, first = 0;
      for (int l = 0; l < L; ++l) {
        const double p = std::exp(double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]) - m) / sum;
        if (l == 0) first = p;
        run += p;
        bounds[std::size_t(l) * std::size_t(d) + std::size_t(j)] = run - first;
      }
    }
  }
  for (int i = 0; i < L; ++i) {
    const std::string p = prefix(i);
    Layer layer;
    layer.mixer = c.mixers[std::size_t(i)];
    layer.attn_norm = norm(p + "attn_norm", d, true, "hidden_size");
    if (layer.mixer == MixerKind::kAttention) {
      model::GqaLayer a =
          model::load_hybrid_attention(ld, p + "attn.", d, fc.attn.at(i));
      layer.q = std::move(a.q);
      layer.k = std::move(a.k);
      layer.v = std::move(a.v);
      layer.o = std::move(a.o);
      layer.causal = std::move(a.attention);
    } else if (fc.kind == GlaConfig::Kind::kHgrn2) {
      layer.q = model::dense(ld, p + "attn.q_proj", d, d, false, "hidden_size");
      layer.k = model::dense(ld, p + "attn.f_proj", d, d, false, "hidden_size");
      layer.v = model::dense(ld, p + "attn.i_proj", d, d, false, "hidden_size");
      if (fc.use_short_conv) {
        layer.conv_q = conv(p + "attn.q_conv1d", d, "hidden_size, 1, conv_size");
        layer.conv_k = conv(p + "attn.f_conv1d", d, "hidden_size, 1, conv_size");
        layer.conv_v = conv(p + "attn.i_conv1d", d, "hidden_size, 1, conv_size");
      }
      layer.head_norm = norm(p + "attn.g_norm", d, fc.elementwise_affine, "hidden_size");
      layer.o = model::dense(ld, p + "attn.o_proj", d, d, false, "hidden_size");
      if (!bounds.empty() && i > 0) {
        layer.lower_bound.resize(std::size_t(d));
        for (int j = 0; j < d; ++j)
          layer.lower_bound[std::size_t(j)] = float(bounds[std::size_t(i) * std::size_t(d) + std::size_t(j)]);
      }
    } else {
      const Widths w = gated_widths(c);
      const bool gla = fc.kind == GlaConfig::Kind::kGla;
      layer.q = model::dense(ld, p + "attn.q_proj", w.q, d, false, "key_dim, hidden_size");
      layer.k = model::dense(ld, p + "attn.k_proj", w.k, d, false, "key_dim / kv groups, hidden_size");
      layer.v = model::dense(ld, p + "attn.v_proj", w.v, d, false, "value_dim / kv groups, hidden_size");
      if (fc.use_output_gate) layer.g_proj = model::dense(ld, p + "attn.g_proj", fc.value_dim, d, false, "value_dim, hidden_size");
      if (fc.use_short_conv && gla) {
        layer.conv_q = conv(p + "attn.q_conv1d", w.q, "key_dim, 1, conv_size");
        layer.conv_k = conv(p + "attn.k_conv1d", w.k, "key_dim / kv groups, 1, conv_size");
        layer.conv_v = conv(p + "attn.v_conv1d", w.v, "value_dim / kv groups, 1, conv_size");
      }
      if (gla) {
        const int rk = GlaConfig::kGateLowRankDim;
        layer.gk0 = model::dense(ld, p + "attn.gk_proj.0", rk, d, false, "gate_low_rank_dim 16, hidden_size");
        layer.gk1 = model::dense(ld, p + "attn.gk_proj.1", w.k, rk, true, "key_dim / kv groups, 16");
      }
      layer.o = model::dense(ld, p + "attn.o_proj", d, fc.value_dim, false, "hidden_size, value_dim");
      layer.head_norm = norm(p + out_norm_name(c), fc.head_v_dim, fc.elementwise_affine, "head_v_dim");
      if (!gla) {
        ld.ignore(p + "attn.rotary.inv_freq");
        const int half = fc.head_k_dim / 2;
        for (int j = 0; j < half; ++j)  // fla's RotaryEmbedding(dim=head_k_dim), base 10000, in float
          layer.rope_inv_freq.push_back(static_cast<float>(
              1.0 / std::pow(10000.0, 2.0 * double(j) / double(fc.head_k_dim))));
      }
    }
    if (layer.mixer == MixerKind::kDecayedRecurrence) {
      GlaRecurrenceConfig gc;
      gc.n_heads = c.num_heads;
      gc.d_key = fc.head_k_dim;
      gc.d_value = fc.head_v_dim;
      gc.scale = fc.attn_scale;  // head_k_dim^-1/2, the kernels' default
      if (fc.kind == GlaConfig::Kind::kRetNet) {  // gamma_h = 1 - 2^(-5 - h)
        gc.decay = DecayKind::kPerHead;
        gc.head_decay = gates::retnet_decays(c.num_heads);
      }
      layer.gated = std::make_unique<GlaRecurrence>(gc);
    }
    layer.mlp_norm = norm(p + "mlp_norm", d, true, "hidden_size");
    layer.gate = model::dense(ld, p + "mlp.gate_proj", I, d, false, "intermediate_size, hidden_size");
    layer.up = model::dense(ld, p + "mlp.up_proj", I, d, false, "intermediate_size, hidden_size");
    layer.down = model::dense(ld, p + "mlp.down_proj", d, I, false, "hidden_size, intermediate_size");
    layers.push_back(std::move(layer));
  }
  impl.has_final_norm = true;
  impl.final_norm = norm("model.norm", d, true, "hidden_size");
  model::take_head(ld, c, impl, ends, table);
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "fla gated"; }
  std::vector<std::string> model_types() const override { return {"gla", "retnet", "hgrn2"}; }
  const char* model_type(const ModelConfig& c) const override {
    return model_type_of(config_of(c).kind);
  }
  void read_config(const std::string& type, const json::Value&, model::Fields& f,
                   ModelConfig& c) const override {
    gla::read_config(type, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override { gla::resolve(c, source); }
  std::string config_fields(const ModelConfig& c) const override { return gla::config_fields(c); }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    std::vector<Layer> layers;
    load_into(c, L, impl, layers);
    impl.network = make_network(c, std::move(layers));
  }

  std::vector<std::string> make_model_archs() const override { return {"gla", "retnet", "hgrn2"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    std::vector<model::MakeOption> out;
    for (const std::string& arch : make_model_archs())
      for (auto& o : schema(kind_of(arch)).make_options({arch})) out.push_back(std::move(o));
    return out;
  }
  std::string make_model_config(const std::string& arch, const model::MakeOptions& o) const override {
    return fmt::format("{{\"model_type\": \"{}\", {}}}", arch, schema(kind_of(arch)).make_fields(o));
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const GlaConfig& fc = config_of(c);
    const auto n_attn = std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kAttention);
    return model::describe_lines(
        m, label,
        fmt::format("{}, {} layers ({} gated recurrence, {} softmax attention)", model_type(c),
                    c.num_hidden_layers, c.num_hidden_layers - n_attn, n_attn),
        fmt::format(", {} heads{}", c.num_heads,
                    c.num_kv_heads != c.num_heads ? fmt::format(" ({} kv)", c.num_kv_heads) : ""),
        model::state_growth_note(model::hybrid_attention_growth(fc.attn, c.hidden_size)));
  }
};

}  // namespace
}  // namespace recur::models::gla

namespace recur::models {

const model::Family& gla_family() {
  static const gla::Family family;
  return family;
}

}  // namespace recur::models

