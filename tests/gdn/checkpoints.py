"""The readers of reference.py: Qwen3.5's Hugging Face layout (model_type qwen3_5 with its
text_config, or qwen3_5_text) and fla's (gated_deltanet, delta_net), each into reference.Model
(float64 tensors in per-layer dicts). Sizes come from the config and every tensor's shape is
checked against them; tensors no reading uses are refused, except the ones skipped by name
(Qwen's vision tower and multi-token-prediction head, fla's old attn.D)."""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import read_safetensors  # noqa: E402

from reference import Model  # noqa: E402

DT = torch.float64


def load_weights(model_dir):
    """model.safetensors, or the shards model.safetensors.index.json names."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single), single
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        sd = {}
        for s in shards:
            sd.update(read_safetensors(os.path.join(model_dir, s)))
        return sd, index
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {model_dir}")


class Tensors:
    """Takes tensors by name with their expected shapes; remembers which were used."""

    def __init__(self, sd, skip_prefixes=()):
        self.w = {k: v.to(DT) for k, v in sd.items()}
        self.dtypes = sorted({str(v.dtype).replace("torch.", "") for v in sd.values()})
        self.used = set()
        self.skip_prefixes = tuple(skip_prefixes)

    def __call__(self, name, shape):
        if name not in self.w:
            raise ValueError(f"missing tensor {name} (expected shape {tuple(shape)})")
        x = self.w[name]
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
        self.used.add(name)
        return x

    def has(self, name):
        return name in self.w

    def finish(self):
        """The names skipped by prefix; refuses any other tensor nothing used."""
        left = [n for n in self.w if n not in self.used]
        unknown = sorted(n for n in left if not n.startswith(self.skip_prefixes))
        if unknown:
            raise ValueError(f"tensors this configuration does not use: {unknown}")
        return sorted(left)


def embed_and_head(m, t, embed, final_norm, tie):
    """Embedding, final norm and head; a tied checkpoint may still carry lm_head.weight, accepted
    only when it equals the embedding."""
    m.embed = t(embed, (m.V, m.D))
    m.final_norm = t(final_norm, (m.D,))
    m.tied = tie
    m.head = m.embed if tie else t("lm_head.weight", (m.V, m.D))
    if tie and t.has("lm_head.weight"):
        if not torch.equal(t("lm_head.weight", (m.V, m.D)), m.embed):
            raise ValueError("tie_word_embeddings is true but lm_head.weight differs from the embedding")


def block(t, p, names, D, I):
    """A layer's two norms and SwiGLU MLP; names = (pre-mixer norm, pre-MLP norm)."""
    return {"in_norm": t(p + names[0] + ".weight", (D,)), "mlp_norm": t(p + names[1] + ".weight", (D,)),
            "gate": t(p + "mlp.gate_proj.weight", (I, D)), "up": t(p + "mlp.up_proj.weight", (I, D)),
            "down": t(p + "mlp.down_proj.weight", (D, I))}


# --------------------------------------------------------------------------------------------
# Qwen3.5 (transformers' qwen3_5: Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM)

QWEN_SKIP = ("model.visual.", "mtp.", "model.mtp.")


def qwen_text_config(config):
    """(text config, tensor prefix, tie) from a qwen3_5 (multimodal) or qwen3_5_text config."""
    mt = config.get("model_type")
    if mt == "qwen3_5":
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise ValueError("qwen3_5: config.json has no text_config")
        if text.get("model_type", "qwen3_5_text") != "qwen3_5_text":
            raise ValueError(f"qwen3_5: text_config.model_type {text.get('model_type')!r} is not qwen3_5_text")
        tie_text, tie_top = text.get("tie_word_embeddings"), config.get("tie_word_embeddings")
        if tie_text is not None and tie_top is not None and bool(tie_text) != bool(tie_top):
            raise ValueError(f"qwen3_5: tie_word_embeddings {tie_top} at the top, {tie_text} in text_config")
        return text, "model.language_model.", bool(tie_text if tie_text is not None else (tie_top or False))
    if mt == "qwen3_5_text":
        return config, "model.", bool(config.get("tie_word_embeddings", False))
    raise ValueError(f"model_type {mt!r} is not qwen3_5 or qwen3_5_text")


def qwen_rope(text):
    """(theta, partial_rotary_factor). rope_parameters (transformers >= 5) or the older
    top-level rope_theta / partial_rotary_factor / rope_scaling. Text-only positions are the same
    for t, h and w, so interleaved mrope (any mrope_section) is plain rope: each frequency takes
    its angle from one of three equal position rows."""
    rp = text.get("rope_parameters") or text.get("rope_scaling") or {}
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype not in ("default", "mrope"):
        raise ValueError(f"qwen3_5: rope_type {rtype!r} is not supported (only default)")
    return (float(rp.get("rope_theta", text.get("rope_theta", 10000.0))),
            float(rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))))


def qwen_layer_types(text, L):
    types = text.get("layer_types")
    if types is None:
        n = int(text.get("full_attention_interval", 4))
        types = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(L)]
    if len(types) != L or any(x not in ("linear_attention", "full_attention") for x in types):
        raise ValueError(f"qwen3_5: layer_types {types} do not give {L} linear/full layers")
    return types


def qwen_dims(text, D):
    d = {"H": int(text["num_attention_heads"]), "KV": int(text["num_key_value_heads"]),
         "Hk": int(text["linear_num_key_heads"]), "Hv": int(text["linear_num_value_heads"]),
         "dk": int(text["linear_key_head_dim"]), "dv": int(text["linear_value_head_dim"]),
         "K": int(text.get("linear_conv_kernel_dim", 4))}
    d["hd"] = int(text.get("head_dim") or D // d["H"])
    d["theta"], prf = qwen_rope(text)
    d["rot"] = int(d["hd"] * prf)
    if d["Hv"] % d["Hk"]:
        raise ValueError(f"qwen3_5: linear_num_value_heads {d['Hv']} is not a multiple of "
                         f"linear_num_key_heads {d['Hk']}")
    if d["H"] % d["KV"]:
        raise ValueError(f"qwen3_5: num_attention_heads {d['H']} is not a multiple of "
                         f"num_key_value_heads {d['KV']}")
    return d


def qwen_linear(t, a, d, D, eps):
    Hk, Hv, dk, dv, K = d["Hk"], d["Hv"], d["dk"], d["dv"], d["K"]
    kd, vd = Hk * dk, Hv * dv
    qkv = t(a + "in_proj_qkv.weight", (2 * kd + vd, D))
    # One conv over the concatenated q, k, v channels is one per part: the conv is depthwise.
    conv = t(a + "conv1d.weight", (2 * kd + vd, 1, K))[:, 0, :]
    return dict(kind="delta", Hk=Hk, Hv=Hv, dk=dk, dv=dv, K=K, decay=True, act="silu", qk_norm="l2",
                eps=eps, neg_eigval=False, wq=qkv[:kd], wk=qkv[kd:2 * kd], wv=qkv[2 * kd:], conv=conv,
                z=t(a + "in_proj_z.weight", (vd, D)), b=t(a + "in_proj_b.weight", (Hv, D)),
                a=t(a + "in_proj_a.weight", (Hv, D)), A_log=t(a + "A_log", (Hv,)),
                dt_bias=t(a + "dt_bias", (Hv,)), onorm=t(a + "norm.weight", (dv,)),
                o=t(a + "out_proj.weight", (D, vd)))


def qwen_attention(t, a, d, D, eps):
    H, KV, hd = d["H"], d["KV"], d["hd"]
    return dict(kind="qwen_attn", H=H, KV=KV, hd=hd, rot=d["rot"], theta=d["theta"], eps=eps,
                q=t(a + "q_proj.weight", (2 * H * hd, D)), k=t(a + "k_proj.weight", (KV * hd, D)),
                v=t(a + "v_proj.weight", (KV * hd, D)), o=t(a + "o_proj.weight", (D, H * hd)),
                q_norm=t(a + "q_norm.weight", (hd,)), k_norm=t(a + "k_norm.weight", (hd,)))


def build_qwen(config, sd):
    text, prefix, tie = qwen_text_config(config)
    if text.get("hidden_act", "silu") != "silu":
        raise ValueError("qwen3_5: hidden_act must be silu")
    if text.get("attention_bias", False):
        raise ValueError("qwen3_5: attention_bias true is not supported")
    if not text.get("attn_output_gate", True):
        raise ValueError("qwen3_5: attn_output_gate false is not Qwen3.5's attention")
    D, L, V = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
    types = qwen_layer_types(text, L)
    eps = float(text.get("rms_norm_eps", 1e-6))
    I = int(text["intermediate_size"])
    d = qwen_dims(text, D)
    t = Tensors(sd, QWEN_SKIP)
    m = Model("qwen3_5", D, V, eps, zero_centred=True)
    embed_and_head(m, t, prefix + "embed_tokens.weight", prefix + "norm.weight", tie)
    for i, kind in enumerate(types):
        p = f"{prefix}layers.{i}."
        lay = block(t, p, ("input_layernorm", "post_attention_layernorm"), D, I)
        if kind == "full_attention":
            lay.update(qwen_attention(t, p + "self_attn.", d, D, eps))
        else:
            lay.update(qwen_linear(t, p + "linear_attn.", d, D, eps))
        m.layers.append(lay)
    m.skipped = t.finish()
    m.dtypes = t.dtypes
    m.rules = {"norms": "(1 + w) for input/post_attention/final/q_norm/k_norm, w for the gated norm",
               "eps": eps, "rope_theta": d["theta"], "rotary_dims": d["rot"], "tied": tie,
               "kv_heads_map": "value head h reads key head h // (Hv / Hk)"}
    return m


# --------------------------------------------------------------------------------------------
# fla's gated_deltanet and delta_net

FLA_DEFAULTS = {
    "gated_deltanet": dict(hidden_size=2048, expand_v=2.0, use_gate=True, use_short_conv=True,
                           allow_neg_eigval=False, conv_size=4, head_dim=256, num_heads=6,
                           num_v_heads=None, hidden_ratio=4, intermediate_size=None,
                           hidden_act="swish", num_hidden_layers=21, norm_eps=1e-6, attn=None,
                           tie_word_embeddings=False, vocab_size=32000, attnres_block_size=None),
    "delta_net": dict(hidden_size=2048, expand_k=1.0, expand_v=1.0, use_gate=False,
                      use_short_conv=True, allow_neg_eigval=False, conv_size=4, use_beta=True,
                      num_heads=16, qk_norm="l2", qk_activation="silu", hidden_ratio=4,
                      intermediate_size=None, hidden_act="swish", num_hidden_layers=24,
                      norm_eps=1e-6, attn=None, tie_word_embeddings=False, vocab_size=32000,
                      attnres_block_size=None),
}


def mlp_width(D, hidden_ratio, intermediate_size):
    """fla's GatedMLP: intermediate_size, else int(D * ratio * 2/3) rounded up to 256."""
    if intermediate_size is not None:
        return int(intermediate_size)
    width = int(D * (4 if hidden_ratio is None else hidden_ratio) * 2 / 3)
    return 256 * ((width + 255) // 256)


def attn_specs(attn, n_layers):
    """fla's `attn` block (a dict or a list of dicts) -> {layer: spec}."""
    if attn is None:
        return {}
    out = {}
    for s in ([attn] if isinstance(attn, dict) else list(attn)):
        for key in ("layers", "num_heads"):
            if key not in s:
                raise ValueError(f"attn: {key!r} is required")
        spec = {"num_heads": int(s["num_heads"]),
                "num_kv_heads": int(s.get("num_kv_heads") or s["num_heads"]),
                "qkv_bias": bool(s.get("qkv_bias", False)),
                "window_size": None if s.get("window_size") is None else int(s["window_size"]),
                "rope_theta": float(s.get("rope_theta", 10000.0))}
        for i in s["layers"]:
            if not 0 <= i < n_layers or i in out:
                raise ValueError(f"attn: layer {i} out of range or given twice")
            out[int(i)] = spec
    return out


def fla_dims(mt, c, D):
    """(Hk, Hv, dk, dv) of a gated_deltanet or delta_net config."""
    if mt == "gated_deltanet":
        Hk = int(c["num_heads"])
        Hv = int(c["num_v_heads"] or Hk)
        dk = int(c["head_dim"])
        dv = int(dk * float(c["expand_v"]))
        if dv != dk * float(c["expand_v"]) or Hv % Hk:
            raise ValueError(f"gated_deltanet: head_dim {dk} x expand_v {c['expand_v']}, "
                             f"num_v_heads {Hv} over num_heads {Hk}: not fla's shapes")
        return Hk, Hv, dk, dv
    H = int(c["num_heads"])
    kd, vd = int(D * float(c["expand_k"])), int(D * float(c["expand_v"]))
    if kd % H or vd % H:
        raise ValueError(f"delta_net: key dim {kd} / value dim {vd} not divisible by num_heads {H}")
    if c["qk_norm"] not in ("l2", "sum") or c["qk_activation"] not in ("silu", "relu", "elu", "identity"):
        raise ValueError(f"delta_net: qk_norm {c['qk_norm']!r} / qk_activation {c['qk_activation']!r}")
    return H, H, kd // H, vd // H


def fla_attention(t, a, s, D):
    H, KV = s["num_heads"], s["num_kv_heads"]
    hd = D // H
    lay = dict(kind="fla_attn", H=H, KV=KV, hd=hd, theta=s["rope_theta"], window=s["window_size"],
               q=t(a + "q_proj.weight", (D, D)), k=t(a + "k_proj.weight", (KV * hd, D)),
               v=t(a + "v_proj.weight", (KV * hd, D)), o=t(a + "o_proj.weight", (D, D)))
    if s["qkv_bias"]:
        lay.update(bq=t(a + "q_proj.bias", (D,)), bk=t(a + "k_proj.bias", (KV * hd,)),
                   bv=t(a + "v_proj.bias", (KV * hd,)))
    return lay


def fla_delta(t, a, mt, c, dims, D, eps):
    Hk, Hv, dk, dv = dims
    K = int(c["conv_size"])
    kd, vd = Hk * dk, Hv * dv
    gdn = mt == "gated_deltanet"
    lay = dict(kind="delta", Hk=Hk, Hv=Hv, dk=dk, dv=dv, K=K, decay=gdn, eps=eps,
               act="silu" if gdn else c["qk_activation"], qk_norm="l2" if gdn else c["qk_norm"],
               neg_eigval=bool(c["allow_neg_eigval"]),
               wq=t(a + "q_proj.weight", (kd, D)), wk=t(a + "k_proj.weight", (kd, D)),
               wv=t(a + "v_proj.weight", (vd, D)), o=t(a + "o_proj.weight", (D, vd)),
               onorm=t(a + "o_norm.weight", (dv,)))
    if gdn or c["use_beta"]:
        lay["b"] = t(a + "b_proj.weight", (Hv, D))
    if gdn:
        lay.update(a=t(a + "a_proj.weight", (Hv, D)), A_log=t(a + "A_log", (Hv,)), dt_bias=t(a + "dt_bias", (Hv,)))
        if t.has(a + "D"):  # fla before 12 Mar 2025 kept an unused D [num_heads]
            t(a + "D", (Hk,))
    if c["use_short_conv"]:
        lay["conv"] = torch.cat([t(a + "q_conv1d.weight", (kd, 1, K)), t(a + "k_conv1d.weight", (kd, 1, K)),
                                 t(a + "v_conv1d.weight", (vd, 1, K))], dim=0)[:, 0, :]
    if c["use_gate"]:
        lay["z"] = t(a + "g_proj.weight", (vd, D))
    return lay


def build_fla(config, sd):
    mt = config.get("model_type")
    c = dict(FLA_DEFAULTS[mt])
    c.update({k: v for k, v in config.items() if k in c})
    if c["attnres_block_size"] is not None:
        raise ValueError("attnres_block_size is not supported")
    if c["hidden_act"] != "swish":
        raise ValueError("fla's MLP takes hidden_act swish only")
    D, L, V = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
    eps = float(c["norm_eps"])
    I = mlp_width(D, c["hidden_ratio"], c["intermediate_size"])
    specs = attn_specs(c["attn"], L)
    dims = fla_dims(mt, c, D)
    t = Tensors(sd)
    m = Model(mt, D, V, eps, zero_centred=False)
    tie = bool(c["tie_word_embeddings"])
    embed_and_head(m, t, "model.embeddings.weight", "model.norm.weight", tie)
    for i in range(L):
        p = f"model.layers.{i}."
        lay = block(t, p, ("attn_norm", "mlp_norm"), D, I)
        if i in specs:
            lay.update(fla_attention(t, p + "attn.", specs[i], D))
        else:
            lay.update(fla_delta(t, p + "attn.", mt, c, dims, D, eps))
        m.layers.append(lay)
    m.skipped = t.finish()
    m.dtypes = t.dtypes
    m.rules = {"norms": "w (plain RMSNorm everywhere)", "eps": eps, "tied": tie,
               "kv_heads_map": "value head h reads key head h // (Hv / Hk)"}
    return m


# --------------------------------------------------------------------------------------------

def build_model(config, sd):
    mt = config.get("model_type")
    if mt in ("qwen3_5", "qwen3_5_text"):
        return build_qwen(config, sd)
    if mt in FLA_DEFAULTS:
        return build_fla(config, sd)
    raise ValueError(f"model_type {mt!r} is not qwen3_5, qwen3_5_text, gated_deltanet or delta_net")


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    sd, path = load_weights(model_dir)
    return build_model(config, sd), path
