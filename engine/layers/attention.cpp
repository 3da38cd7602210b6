#include "layers/attention.h"

#include <fmt/format.h>

#include <utility>

#include "model/loader.h"

namespace recur::model {

const char* const kHybridAttentionFields =
    "fla's Attention layer is built from layers, num_heads, num_kv_heads, qkv_bias, window_size "
    "and rope_theta only";

const Schema<HybridAttentionSpec>& hybrid_attention_schema() {
  static const Schema<HybridAttentionSpec> s = [] {
    using S = HybridAttentionSpec;
    Schema<S> t;
    // make-model writes the block when --attn-layers is given.
    t.layers("layers", &S::layers, "num_hidden_layers").required()
        .option("attn-layers", "softmax attention layers, e.g. 1,3 (attn.layers)")
        .integer("num_heads", &S::num_heads, 0, 1, kMaxDim).required()
        .option("attn-heads", "the attention layers' heads (default: --heads)",
                [](const ModelConfig& c, const S&) { return double(c.num_heads); })
        // Its default, num_heads, is filled in by resolve_hybrid_attention.
        .integer("num_kv_heads", &S::num_kv_heads, 0, 1, kMaxDim)
        .option("attn-kv-heads", "their kv heads (default: as many as heads)", "", 1 << 16)
        .boolean("qkv_bias", &S::qkv_bias, false)
        .integer_or_null("window_size", &S::window_size, 0, 1, 1 << 24)
        .option("attn-window", "attn.window_size (default: full attention)")
        .number("rope_theta", &S::rope_theta, 10000, 1.0 + 1e-9, 1e12);
    return t;
  }();
  return s;
}

HybridAttention read_hybrid_attention(const json::Value& v, const std::string& source,
                                      int n_layers) {
  ModelConfig c;  // what the block's fields see of the model: its layers
  c.num_hidden_layers = n_layers;
  HybridAttention a;
  read_objects(v, source, "attn", hybrid_attention_schema(), kHybridAttentionFields, c, a);
  return a;
}

void resolve_hybrid_attention(HybridAttention& a, int hidden_size, int n_layers,
                              const std::string& source) {
  const int d = hidden_size;
  a.spec_of.assign(std::size_t(n_layers), -1);
  for (std::size_t i = 0; i < a.specs.size(); ++i) {
    HybridAttentionSpec& s = a.specs[i];
    const std::string owner = a.is_list ? fmt::format("attn[{}]", i) : "attn";
    if (s.num_kv_heads == 0) s.num_kv_heads = s.num_heads;
    if (s.num_heads < 1 || d % s.num_heads != 0 || (d / s.num_heads) % 2 != 0)
      config_fail(source, "{}: hidden_size {} is not num_heads {} heads of an even width (rotary "
                          "turns pairs)", owner, d, s.num_heads);
    if (s.num_kv_heads < 1 || s.num_heads % s.num_kv_heads != 0)
      config_fail(source, "{}: num_heads {} is not a multiple of num_kv_heads {}", owner,
                  s.num_heads, s.num_kv_heads);
    if (s.window_size == 1)
      config_fail(source, "{}.window_size is 1 (a token attending to itself alone): not supported",
                  owner);
    for (const int l : s.layers) {
      if (l < 0 || l >= n_layers)
        config_fail(source, "{}.layers holds {}, expected layer indices 0 to {}", owner, l,
                    n_layers - 1);
      const int earlier = a.spec_of[std::size_t(l)];
      if (earlier == int(i))
        config_fail(source, "{}.layers names layer {} twice", owner, l);
      if (earlier != -1)
        config_fail(source, "{}.layers names layer {}, which attn[{}] already has", owner, l, earlier);
      a.spec_of[std::size_t(l)] = static_cast<int>(i);
    }
  }
}

void write_hybrid_attention(FieldWriter& w, const HybridAttention& a) {
  w.add("attn", objects_text(hybrid_attention_schema(), ModelConfig{}, a));
}

std::size_t kv_cache_growth(std::size_t layers, int n_kv_heads, int head_dim) {
  return layers * 2 * std::size_t(n_kv_heads) * std::size_t(head_dim) * sizeof(float);
}

std::size_t hybrid_attention_growth(const HybridAttention& a, int hidden_size) {
  std::size_t grow = 0;
  for (const HybridAttentionSpec& s : a.specs)
    if (s.window_size == 0)
      grow += kv_cache_growth(s.layers.size(), s.num_kv_heads, hidden_size / s.num_heads);
  return grow;
}

std::string state_growth_note(std::size_t growth) {
  if (!growth) return " at any length";
  return fmt::format(" at the start, and the full-attention layers' KV cache adds {} bytes every "
                     "token (conversations' memory counts it)", growth);
}

GqaLayer load_hybrid_attention(Loader& L, const std::string& prefix, int hidden_size,
                               const HybridAttentionSpec& s) {
  const int d = hidden_size, dh = d / s.num_heads, kv = s.num_kv_heads * dh;
  GqaLayer a;
  a.H = s.num_heads;
  a.Hkv = s.num_kv_heads;
  a.d = dh;
  a.q = dense(L, prefix + "q_proj", d, d, s.qkv_bias, "hidden_size");
  a.k = dense(L, prefix + "k_proj", kv, d, s.qkv_bias, "attn num_kv_heads * head_dim, hidden_size");
  a.v = dense(L, prefix + "v_proj", kv, d, s.qkv_bias, "attn num_kv_heads * head_dim, hidden_size");
  a.o = dense(L, prefix + "o_proj", d, d, false, "hidden_size");
  L.ignore(prefix + "rotary.inv_freq");
  CausalAttentionConfig ac;
  ac.n_heads = s.num_heads;
  ac.n_kv_heads = s.num_kv_heads;
  ac.d_head = dh;
  ac.window = s.window_size > 0 ? s.window_size - 1 : 0;  // flash-attn's (window_size - 1, 0)
  ac.rope_theta = static_cast<float>(s.rope_theta);
  a.attention = std::make_unique<CausalAttention>(ac);
  return a;
}

}  // namespace recur::model
