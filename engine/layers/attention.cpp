#include "layers/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "model/loader.h"

namespace recur::model {

namespace {

bool names(const HybridAttentionSpec& s, int layer) {
  return std::find(s.layers.begin(), s.layers.end(), layer) != s.layers.end();
}

// One entry, called `owner` in messages ("attn", "attn[1]"); `earlier` are the entries before it,
// none of which may name its layers.
HybridAttentionSpec read_spec(const json::Value& v, const std::string& source,
                              const std::string& owner, int n_layers,
                              const std::vector<HybridAttentionSpec>& earlier) {
  if (!v.is_object()) config_fail(source, "{} is {}, expected an object", owner, v.kind_name());
  Fields f(v, source, owner);
  HybridAttentionSpec s;
  const json::Value* layers = f.get("layers");
  if (!layers || !layers->is_array())
    config_fail(source, "{}.layers is {}, expected a list of layer indices", owner,
                layers ? layers->kind_name() : "missing");
  for (const auto& l : layers->array()) {
    if (!l.is_integer() || l.integer() < 0 || l.integer() >= n_layers)
      config_fail(source,
                  "{}.layers holds {}, expected layer indices 0 to num_hidden_layers - 1 = {}",
                  owner, describe_json(l), n_layers - 1);
    const int idx = static_cast<int>(l.integer());
    if (names(s, idx)) config_fail(source, "{}.layers names layer {} twice", owner, idx);
    for (std::size_t j = 0; j < earlier.size(); ++j)
      if (names(earlier[j], idx))
        config_fail(source, "{}.layers names layer {}, which attn[{}] already has", owner, idx, j);
    s.layers.push_back(idx);
  }
  if (!f.get("num_heads")) config_fail(source, "{}.num_heads is missing", owner);
  s.num_heads = f.integer("num_heads", 0, 1, kMaxDim);
  s.num_kv_heads = f.integer("num_kv_heads", s.num_heads, 1, kMaxDim);
  s.qkv_bias = f.boolean("qkv_bias", false);
  s.window_size = f.integer("window_size", 0, 1, 1 << 24);
  if (s.window_size == 1)
    config_fail(source, "{}.window_size is 1 (a token attending to itself alone): not supported",
                owner);
  s.rope_theta = f.number("rope_theta", 10000, 1.0 + 1e-9, 1e12);
  f.reject_unknown("fla's Attention layer is built from layers, num_heads, num_kv_heads, "
                   "qkv_bias, window_size and rope_theta only");
  return s;
}

}  // namespace

HybridAttention read_hybrid_attention(const json::Value& v, const std::string& source,
                                      int n_layers) {
  HybridAttention a;
  a.present = true;
  a.is_list = v.is_array();
  if (v.is_object()) {
    a.specs.push_back(read_spec(v, source, "attn", n_layers, a.specs));
  } else if (v.is_array()) {
    for (const auto& e : v.array())
      a.specs.push_back(
          read_spec(e, source, fmt::format("attn[{}]", a.specs.size()), n_layers, a.specs));
  } else {
    config_fail(source, "attn is {}, expected an object or a list of objects", v.kind_name());
  }
  return a;
}

void resolve_hybrid_attention(HybridAttention& a, int hidden_size, int n_layers,
                              const std::string& source) {
  const int d = hidden_size;
  a.spec_of.assign(std::size_t(n_layers), -1);
  for (std::size_t i = 0; i < a.specs.size(); ++i) {
    const HybridAttentionSpec& s = a.specs[i];
    if (s.num_heads < 1 || d % s.num_heads != 0 || (d / s.num_heads) % 2 != 0)
      config_fail(source, "attn: hidden_size {} is not num_heads {} heads of an even width (rotary "
                          "turns pairs)", d, s.num_heads);
    if (s.num_kv_heads < 1 || s.num_heads % s.num_kv_heads != 0)
      config_fail(source, "attn: num_heads {} is not a multiple of num_kv_heads {}", s.num_heads,
                  s.num_kv_heads);
    for (const int l : s.layers) {
      if (l < 0 || l >= n_layers || a.spec_of[std::size_t(l)] != -1)
        config_fail(source, "attn: layer {} is out of range or named twice", l);
      a.spec_of[std::size_t(l)] = static_cast<int>(i);
    }
  }
}

void write_hybrid_attention(FieldWriter& w, const HybridAttention& a) {
  std::string text = a.is_list ? "[" : "";
  for (std::size_t i = 0; i < a.specs.size(); ++i) {
    const HybridAttentionSpec& s = a.specs[i];
    std::string layers;
    for (std::size_t j = 0; j < s.layers.size(); ++j)
      layers += (j ? ", " : "") + std::to_string(s.layers[j]);
    text += fmt::format("{}{{\"layers\": [{}], \"num_heads\": {}, \"num_kv_heads\": {}, "
                        "\"qkv_bias\": {}, \"window_size\": {}, \"rope_theta\": {}}}",
                        i ? ", " : "", layers, s.num_heads, s.num_kv_heads, config_bool(s.qkv_bias),
                        s.window_size > 0 ? config_number(s.window_size) : "null",
                        config_number(s.rope_theta));
  }
  if (a.is_list) text += "]";
  w.add("attn", text);
}

std::size_t hybrid_attention_growth(const HybridAttention& a, int hidden_size) {
  std::size_t grow = 0;
  for (const HybridAttentionSpec& s : a.specs)
    if (s.window_size == 0)
      grow += s.layers.size() * 2 * std::size_t(s.num_kv_heads) *
              std::size_t(hidden_size / s.num_heads) * sizeof(float);
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
