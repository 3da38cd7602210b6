// RWKV-7's configuration: fla-hub's config.json field by field (fla/models/rwkv7's configuration
// class, as fla/layers/rwkv7.py reads it), and BlinkDL's .pth with every size from the tensors.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "model/config_schema.h"
#include "models/rwkv7/rwkv7.h"
#include "recur/error.h"

namespace recur::models::rwkv7 {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;
using Layout = Rwkv7Config::Layout;

namespace {

constexpr double kBlinkLnxEps = 64e-5;  // nn.GroupNorm(H, C, eps=64e-5) in every BlinkDL v7 file
constexpr double kBlinkLnEps = 1e-5;    // nn.LayerNorm's default

// BlinkDL's layout in a folder recur wrote from a .pth (convert, quantize): config.json's
// "checkpoint_layout" says which names the tensors have.
constexpr const char* kBlinkLayoutName = "blinkdl";

// A tensor's shape, or empty when absent.
std::vector<std::int64_t> shape_of(const WeightSource& w, const std::string& name) {
  return w.has(name) ? w.shape(name) : std::vector<std::int64_t>{};
}

int dim(std::int64_t v) { return v > 0 && v <= kMaxDim ? int(v) : 0; }

}  // namespace

const Rwkv7Config& config_of(const ModelConfig& c) {
  const auto* rc = dynamic_cast<const Rwkv7Config*>(c.family.get());
  if (!rc) throw std::logic_error("[Model] internal: an RWKV-7 configuration without its fields");
  return *rc;
}

std::string Names::layer(int i) const {
  return fmt::format(blink ? "blocks.{}." : "model.layers.{}.", i);
}

Names names_of(const Rwkv7Config& rc) {
  Names n;
  n.blink = rc.layout == Layout::kBlink;
  if (n.blink) {
    n.emb = "emb.weight";
    n.ln0 = "blocks.0.ln0";
    n.ln_out = "ln_out";
    n.head = "head.weight";
    n.ln1 = "ln1";
    n.ln2 = "ln2";
    n.att = "att.";
    n.ffn = "ffn.";
    n.r = "receptance";
    n.k = "key";
    n.v = "value";
    n.o = "output";
    n.lnx = "ln_x";
  } else {
    n.emb = "model.embeddings.weight";
    n.ln0 = "model.layers.0.pre_norm";
    n.ln_out = "model.norm";
    n.head = "lm_head.weight";
    n.ln1 = "attn_norm";
    n.ln2 = "ffn_norm";
    n.att = "attn.";
    n.ffn = "ffn.";
    n.r = "r_proj";
    n.k = "k_proj";
    n.v = "v_proj";
    n.o = "o_proj";
    n.lnx = "g_norm";
  }
  return n;
}

namespace {

// make-model's head_dim: --hidden over --heads, a size the delta-rule kernel takes.
double head_size_of_heads(double heads, const ModelConfig& c, const Rwkv7Config&) {
  const int hidden = c.hidden_size, h = int(heads);
  if (hidden % h != 0 || (hidden / h) % 16 != 0)
    throw ArgumentError(fmt::format("--hidden {} is not --heads {} heads of a multiple of 16 "
                                    "(the delta-rule kernel's head sizes)", hidden, h));
  return hidden / h;
}

}  // namespace

// Every field of config.json once, in the order config.json is written; make-model's options
// beside the fields they set (fla-hub's layout).
const model::Schema<Rwkv7Config>& schema() {
  static const model::Schema<Rwkv7Config> s = [] {
    const auto fla = [](const ModelConfig&, const Rwkv7Config& rc) { return rc.layout == Layout::kFla; };
    const auto blink = [](const ModelConfig&, const Rwkv7Config& rc) { return rc.layout == Layout::kBlink; };
    model::Schema<Rwkv7Config> t;
    t.written("model_type", "\"rwkv7\"")
        // BlinkDL's layout in a folder recur wrote from a .pth (convert, quantize): which names
        // the tensors have.
        .choice("checkpoint_layout", &Rwkv7Config::layout, Layout::kFla,
                {{Layout::kFla, "fla"}, {Layout::kBlink, kBlinkLayoutName}})
        .written_when(blink)
        .written("architectures", "[\"RWKV7ForCausalLM\"]").only_when(fla)
        .integer("vocab_size", &ModelConfig::vocab_size, 32000, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 2048, 1, kMaxDim).common_option("hidden")
        .integer("head_dim", &Rwkv7Config::head_size, 64, 1, kMaxDim).read_apart()
        .common_option("heads", false, nullptr, head_size_of_heads)
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 24, 1, 4096)
        .common_option("layers")
        .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, kMaxDim)
        .common_option("intermediate", true)
        .number("hidden_ratio", &Rwkv7Config::hidden_ratio, 4, 1e-6, 1e6)
        .integer("decay_low_rank_dim", &Rwkv7Config::rank_w, 64, 1, kMaxDim)
        .option_item("lora-ranks", 0, 4, "RWKV-7's LoRA ranks w,a,v,g (default: fla's 64,64,16,128)")
        .integer("a_low_rank_dim", &Rwkv7Config::rank_a, 64, 1, kMaxDim)
        .option_item("lora-ranks", 1, 4)
        .integer("v_low_rank_dim", &Rwkv7Config::rank_v, 16, 1, kMaxDim)
        .option_item("lora-ranks", 2, 4)
        .integer("gate_low_rank_dim", &Rwkv7Config::rank_g, 128, 1, kMaxDim)
        .option_item("lora-ranks", 3, 4)
        .fixed("hidden_act", "sqrelu", "RWKV-7's channel mix is sqrelu (relu squared)")
        .integer("max_position_embeddings", &Rwkv7Config::max_position_embeddings, 2048, 0, 1 << 30)
        // BlinkDL's eps are fixed in its code (kBlinkLnEps, kBlinkLnxEps), its l2 norm unfused.
        .number("norm_eps", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0).only_when(fla)
        .boolean("norm_first", &Rwkv7Config::ln0, true).only_when(fla)
        .boolean("norm_bias", &Rwkv7Config::norm_bias, true).only_when(fla)
        .boolean("fuse_norm", &Rwkv7Config::fla_l2, true).only_when(fla)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings")
        .accepted("attn_mode", "fla's kernel choice (chunked or recurrent): the same model")
        .accepted("_attn_implementation_autoset",
                  "transformers' note that it chose the attention kernel itself: bookkeeping");
    return t;
  }();
  return s;
}

void read_config(const json::Value& root, Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  Rwkv7Config rc;
  c.architecture = Architecture::kRwkv7;
  schema().read(f, c, rc);
  // Heads: fla's layer takes head_dim when it is set (num_heads = hidden_size // head_dim) and
  // then ignores num_heads, which fla's converter leaves stale (its default config's 32).
  const json::Value* head_dim = root.find("head_dim");
  const bool head_dim_null = head_dim && head_dim->is_null();
  const int N = f.integer("head_dim", 64, 1, kMaxDim);
  const int H = f.integer("num_heads", 0, 1, kMaxDim);
  if (!head_dim_null) {
    rc.head_size = N;
  } else if (H > 0) {
    if (c.hidden_size % H != 0)
      config_fail(source, "hidden_size {} is not num_heads {} heads of one size", c.hidden_size, H);
    rc.head_size = c.hidden_size / H;
  } else {
    config_fail(source, "head_dim and num_heads are both null: the head size is unknown");
  }
  if (const json::Value* attn = f.get("attn"))
    config_fail(source, "attn is {}: fla's hybrid softmax-attention layers are not RWKV-7",
                describe_json(*attn));
  if (const json::Value* vd = f.get("value_dim")) {
    const auto check = [&](const json::Value& v) {
      if (!v.is_integer() || v.integer() != c.hidden_size)
        config_fail(source, "value_dim holds {}, expected hidden_size {} (a wider value, fla's "
                            "expanded state, is in no published RWKV-7)",
                    describe_json(v), c.hidden_size);
    };
    if (vd->is_array()) {
      for (const auto& v : vd->array()) check(v);
    } else {
      check(*vd);
    }
  }
  if (rc.layout == Layout::kBlink) {
    c.norm_eps = kBlinkLnEps;
    rc.lnx_eps = kBlinkLnxEps;
    rc.fla_l2 = false;
  }
  c.family = std::make_shared<Rwkv7Config>(rc);
}

void resolve(ModelConfig& c, const std::string& source) {
  if (!c.family) config_fail(source, "an RWKV-7 configuration without its fields");
  Rwkv7Config rc = config_of(c);
  const int C = c.hidden_size, N = rc.head_size;
  if (N < 1 || C % N != 0)
    config_fail(source, "hidden_size {} is not a whole number of heads of head_dim {}", C, N);
  if (N % 16 != 0 || N > (1 << 12))
    config_fail(source, "head_dim {}: recur's delta-rule kernel takes head sizes that are "
                        "multiples of 16 up to 4096 (every published RWKV-7 has 64)", N);
  rc.n_heads = C / N;
  if (c.intermediate_size == 0) {
    // fla: 32 * ceil(hidden_size * hidden_ratio / 32) when intermediate_size is null.
    const double raw = std::ceil(double(C) * rc.hidden_ratio / 32.0) * 32.0;
    if (!(raw >= 1 && raw <= kMaxDim))
      config_fail(source, "hidden_size * hidden_ratio = {} is out of range", raw);
    c.intermediate_size = int(raw);
  }
  for (const int r : {rc.rank_w, rc.rank_a, rc.rank_v, rc.rank_g})
    if (r < 1 || r > kMaxDim) config_fail(source, "a LoRA rank is {}, expected 1 to {}", r, kMaxDim);
  if (rc.layout == Layout::kFla) rc.lnx_eps = double(N) * c.norm_eps;  // fla: head_dim * norm_eps
  if (c.tie_word_embeddings && rc.layout == Layout::kBlink)
    config_fail(source, "tie_word_embeddings: BlinkDL's layout always has its own head.weight");
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kDeltaRule);
  c.family = std::make_shared<Rwkv7Config>(rc);
}

std::string config_fields(const ModelConfig& c) {
  model::FieldWriter w;
  schema().write(w, c, config_of(c));
  return w.text();
}

std::vector<model::MakeOption> make_model_options() { return schema().make_options({"rwkv7"}); }

std::string make_model_config(const model::MakeOptions& o) {
  return "{\"model_type\": \"rwkv7\", " + schema().make_fields(o) + "}";
}

void fit_to_weights(ModelConfig& c, const WeightSource& w) {
  Rwkv7Config rc = config_of(c);
  const Names n = names_of(rc);
  const bool blink = n.blink;
  const auto emb = shape_of(w, n.emb);
  if (emb.size() == 2 && dim(emb[0]) && emb[1] == c.hidden_size) c.vocab_size = dim(emb[0]);
  const std::string l0 = n.layer(0), l1 = n.layer(1);
  // A size is taken from a tensor whose other side fits; any other shape is the loader's to
  // refuse, against config.json's size.
  if (const auto f = shape_of(w, l0 + "ffn.key.weight");
      f.size() == 2 && dim(f[0]) && f[1] == c.hidden_size)
    c.intermediate_size = dim(f[0]);
  // A LoRA's rank: BlinkDL's factors are [C, rank] and [rank, C], fla's Linears [rank, C] and
  // [C, rank]. The rank comes from the first; a second that disagrees is named here with both
  // shapes, since the loader would blame it alone for a size config.json never gave.
  const auto rank = [&](const std::string& layer, char which, int& out) {
    const std::string first = blink ? layer + "att." + which + "1"
                                    : layer + "attn." + which + "_lora.lora.0.weight";
    const std::string second = blink ? layer + "att." + which + "2"
                                     : layer + "attn." + which + "_lora.lora.2.weight";
    const auto s = shape_of(w, first), t = shape_of(w, second);
    const std::size_t at_s = blink ? 1 : 0, at_t = blink ? 0 : 1;
    if (s.size() != 2 || !dim(s[at_s]) || s[1 - at_s] != c.hidden_size) return;
    if (t.size() == 2 && t[1 - at_t] == c.hidden_size && t[at_t] != s[at_s]) {
      auto s_by_t = s, t_by_s = t;
      s_by_t[at_s] = t[at_t];
      t_by_s[at_t] = s[at_s];
      throw FormatError(fmt::format(
          "[Model] {}: tensors '{}' {} and '{}' {} disagree on the LoRA's rank: expected {} and "
          "{} (rank {}), or {} and {} (rank {})", w.describe(), first, shape_string(s), second,
          shape_string(t), shape_string(s), shape_string(t_by_s), s[at_s], shape_string(s_by_t),
          shape_string(t), t[at_t]));
    }
    out = dim(s[at_s]);
  };
  rank(l0, 'w', rc.rank_w);
  rank(l0, 'a', rc.rank_a);
  rank(l0, 'g', rc.rank_g);
  if (c.num_hidden_layers > 1) rank(l1, 'v', rc.rank_v);  // layer 0 has no value residual
  if (!blink) {
    rc.fused_lerps = w.has(l0 + "attn.x_x");
    // Either half of the norm says it is stored: a missing weight beside its bias is named.
    rc.ln0_stored = w.has(n.ln0 + ".weight") || w.has(n.ln0 + ".bias");
  }
  c.family = std::make_shared<Rwkv7Config>(rc);
}

std::optional<ModelConfig> config_from_weights(const WeightSource& w, const std::string& source) {
  if (!w.has("emb.weight") || !w.has("blocks.0.att.r_k")) return std::nullopt;
  const auto fail = [&](const std::string& what) -> void {
    throw FormatError(fmt::format("[Model] {}: {} (BlinkDL's RWKV-7 layout, read by its tensors' "
                                  "shapes)", source, what));
  };
  ModelConfig c;
  c.architecture = Architecture::kRwkv7;
  Rwkv7Config rc;
  rc.layout = Layout::kBlink;
  const auto emb = w.shape("emb.weight");
  if (emb.size() != 2 || !dim(emb[0]) || !dim(emb[1]))
    fail(fmt::format("tensor 'emb.weight' has shape {}, expected [vocab, n_embd]",
                     shape_string(emb)));
  c.vocab_size = dim(emb[0]);
  c.hidden_size = dim(emb[1]);
  const auto rk = w.shape("blocks.0.att.r_k");
  if (rk.size() != 2 || !dim(rk[0]) || !dim(rk[1]) || rk[0] * rk[1] != emb[1])
    fail(fmt::format("tensor 'blocks.0.att.r_k' has shape {}, expected [heads, head_size] with "
                     "heads * head_size = n_embd {}", shape_string(rk), c.hidden_size));
  rc.head_size = dim(rk[1]);
  int L = 0;
  while (L < 4096 && w.has(fmt::format("blocks.{}.ffn.key.weight", L))) ++L;
  if (L == 0) fail("no tensor 'blocks.0.ffn.key.weight': no layers");
  c.num_hidden_layers = L;
  c.norm_eps = kBlinkLnEps;
  rc.lnx_eps = kBlinkLnxEps;
  c.family = std::make_shared<Rwkv7Config>(rc);
  fit_to_weights(c, w);
  c.resolve(source);
  return c;
}

}  // namespace recur::models::rwkv7
