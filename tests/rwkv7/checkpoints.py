"""Reading RWKV-7 checkpoints for the float64 reference: BlinkDL's .pth and fla-hub's Hugging Face
folder, both into one canonical Model (BlinkDL's names and orientation, float64), with the
numeric rules each publisher's own code implies. Imported by reference.py (which re-exports it),
check_layouts.py and make_fixtures.py; docs/rwkv7.md has the tensor tables this follows.
"""

import glob
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import read_safetensors  # noqa: E402

DT = torch.float64

# exp(-0.5) exactly (in float64). BlinkDL's RNN demo and rwkv.cpp / llama.cpp write it 0.606531;
# the GPT demo and the CUDA kernels get the same value as exp(-softplus(-z) - 0.5) (see decay()).
EXP_M05 = math.exp(-0.5)
BLINK_LNX_EPS = 64e-5    # nn.GroupNorm(H, C, eps=64e-5) in every BlinkDL v7 file
BLINK_LN_EPS = 1e-5      # nn.LayerNorm default
FLA_L2_EPS = 1e-6        # fla.modules.l2norm default, inside the square root
TORCH_NORMALIZE_EPS = 1e-12  # F.normalize's default, a floor on the norm


class Rules:
    """The numeric details a layout's own code fixes (module docstring)."""

    def __init__(self, ln_eps, lnx_eps, l2, decay_scale=EXP_M05):
        self.ln_eps = ln_eps
        self.lnx_eps = lnx_eps
        self.l2 = l2                    # "blink" or "fla"
        self.decay_scale = decay_scale

    def as_dict(self):
        return {"ln_eps": self.ln_eps, "lnx_eps": self.lnx_eps, "l2": self.l2,
                "decay_scale": self.decay_scale}


class Model:
    """Weights in one canonical form (BlinkDL's orientation: a projection W is [out, in] and used
    as x @ W.T; a LoRA factor w1 is [C, rank], w2 [rank, C], used as x @ w1 @ w2), float64."""

    def __init__(self):
        self.layout = None       # "pth" or "fla"
        self.dtype = None        # of the file's floating tensors
        self.n_layer = self.n_embd = self.n_head = self.head_size = self.vocab = self.ffn = 0
        self.ranks = {}          # "w", "a", "v", "g" -> rank
        self.emb = None          # [V, C]
        self.ln0 = None          # (weight [C], bias [C]); fla without pre_norm: identity affine
        self.layers = []         # list of dicts, keys below
        self.ln_out = None       # (weight, bias)
        self.head = None         # [V, C]
        self.rules = None
        self.notes = []          # what the loader ignored or derived against a config field
        # Deliberate misreadings, for make_fixtures.py --sensitivity only (empty in every real
        # use): "decay_on_value_index", "readout_transposed", "sa_after_decay",
        # "bonus_k_before_ka", "gate_sigmoid_outside", "ln_x_whole_width".
        self.variants = set()


LAYER_KEYS = ["ln1", "ln2",                                  # (weight, bias) pairs
              "x_r", "x_w", "x_k", "x_v", "x_a", "x_g",      # [C] token-shift lerps
              "w0", "w1", "w2", "a0", "a1", "a2", "v0", "v1", "v2", "g1", "g2",
              "k_k", "k_a", "r_k",                           # [C], [C], [H, N]
              "Wr", "Wk", "Wv", "Wo",                        # [C, C] each, [out, in]
              "lnx",                                         # (weight, bias) [C]
              "ffn_x_k", "ffn_Wk", "ffn_Wv"]                 # [C], [F, C], [C, F]


class FormatError(ValueError):
    pass

# --------------------------------------------------------------------------------------------
# Shared by both loaders

def _float_dtype(sd):
    kinds = sorted({str(t.dtype).replace("torch.", "") for t in sd.values()})
    return kinds[0] if len(kinds) == 1 else "+".join(kinds)


class _Tensors:
    """A checkpoint's tensors by name: each one taken once, with its shape checked, converted to
    float64; what was never taken is refused at the end."""

    def __init__(self, sd, where):
        self.sd, self.where, self.used = sd, where, set()

    def has(self, name):
        return name in self.sd

    def take(self, name):
        if name not in self.sd:
            raise FormatError(f"{self.where}: missing tensor {name}")
        self.used.add(name)
        return self.sd[name]

    def vec(self, name, C):
        """A per-channel vector: [1, 1, C] as BlinkDL stores it, or [C] (fla's k_k, k_a, x_k)."""
        t = self.take(name)
        if tuple(t.shape) not in ((1, 1, C), (C,)):
            raise FormatError(f"{name}: shape {list(t.shape)}, expected [1, 1, {C}] or [{C}]")
        return t.reshape(C).to(DT)

    def mat(self, name, shape):
        t = self.take(name)
        if tuple(t.shape) != tuple(shape):
            raise FormatError(f"{name}: shape {list(t.shape)}, expected {list(shape)}")
        return t.to(DT)

    def norm(self, prefix, C, bias=True):
        """(weight, bias) of a LayerNorm or GroupNorm; a zero bias when the layout has none."""
        b = self.vec(prefix + ".bias", C) if bias else torch.zeros(C, dtype=DT)
        return (self.vec(prefix + ".weight", C), b)

    def ignore(self, name):
        self.used.add(name)

    def finish(self):
        extra = sorted(set(self.sd) - self.used)
        if extra:
            raise FormatError(f"{self.where}: tensors no RWKV-7 reading uses: {extra[:8]}")


def _count_layers(sd, fmt):
    L = 0
    while fmt.format(L) in sd:
        L += 1
    return L


# --------------------------------------------------------------------------------------------
# BlinkDL's .pth

def find_pth(path):
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.pth")))
        if len(found) != 1:
            raise FormatError(f"{path}: expected exactly one .pth file, found {len(found)}")
        return found[0]
    return path


def load_pth(path):
    """BlinkDL's .pth. Sizes from the tensors, as rwkv_v7_demo_rnn.py does (n_head, head_size =
    r_k.shape) and as fla's converter does (layers counted by blocks.N.ffn.key.weight, ranks from
    w1/a1/g1 of layer 0 and v1 of layer 1, FFN width from ffn.key.weight)."""
    sd = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(sd, dict):
        raise FormatError(f"{path}: not a state dict")
    m, t = Model(), _Tensors(sd, path)
    m.layout, m.dtype = "pth", _float_dtype(sd)
    m.emb = t.take("emb.weight").to(DT)
    m.vocab, C = m.emb.shape
    m.n_embd = C
    m.n_head, m.head_size = t.take("blocks.0.att.r_k").shape
    if m.n_head * m.head_size != C:
        raise FormatError(f"blocks.0.att.r_k: {m.n_head} x {m.head_size} != n_embd {C}")
    m.n_layer = L = _count_layers(sd, "blocks.{}.ffn.key.weight")
    m.ffn = F = sd["blocks.0.ffn.key.weight"].shape[0]
    for k in "wag":
        m.ranks[k] = sd[f"blocks.0.att.{k}1"].shape[1]
    m.ranks["v"] = sd["blocks.1.att.v1"].shape[1] if L > 1 else 0
    m.ln0 = t.norm("blocks.0.ln0", C)
    for i in range(L):
        p, a, f = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        d = {"ln1": t.norm(p + "ln1", C), "ln2": t.norm(p + "ln2", C)}
        for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "k_k", "k_a"):
            d[n] = t.vec(a + n, C)
        for n in "wag":
            d[n + "1"] = t.mat(a + n + "1", (C, m.ranks[n]))
            d[n + "2"] = t.mat(a + n + "2", (m.ranks[n], C))
        if i > 0:
            d["v0"] = t.vec(a + "v0", C)
            d["v1"] = t.mat(a + "v1", (C, m.ranks["v"]))
            d["v2"] = t.mat(a + "v2", (m.ranks["v"], C))
        else:
            # Present in checkpoints saved by the training code, absent from some published
            # ones; never used (layer 0 only sets v_first). rwkv_v7_demo.py loads with
            # strict=False for them, the RNN demo overwrites them, fla's converter drops them.
            for n in ("v0", "v1", "v2"):
                if t.has(a + n):
                    t.ignore(a + n)
                    m.notes.append(f"{a + n} present and unused (layer 0)")
            d["v0"] = d["v1"] = d["v2"] = None
        d["r_k"] = t.mat(a + "r_k", (m.n_head, m.head_size))
        for n, key in (("Wr", "receptance"), ("Wk", "key"), ("Wv", "value"), ("Wo", "output")):
            d[n] = t.mat(a + key + ".weight", (C, C))
        d["lnx"] = t.norm(a + "ln_x", C)
        d["ffn_x_k"] = t.vec(f + "x_k", C)
        d["ffn_Wk"] = t.mat(f + "key.weight", (F, C))
        d["ffn_Wv"] = t.mat(f + "value.weight", (C, F))
        m.layers.append(d)
    m.ln_out = t.norm("ln_out", C)
    m.head = t.mat("head.weight", (m.vocab, C))
    t.finish()
    m.rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    return m


# --------------------------------------------------------------------------------------------
# fla-hub's Hugging Face folder

def load_safetensors_dir(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        sd = {}
        for s in shards:
            sd.update(read_safetensors(os.path.join(model_dir, s)))
        return sd
    raise FormatError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")


def _fla_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "rwkv7":
        raise FormatError(f"{model_dir}: model_type {cfg.get('model_type')!r}, expected 'rwkv7'")
    if cfg.get("attn"):
        raise FormatError("config.json: hybrid softmax-attention layers (attn) are not RWKV-7")
    if cfg.get("hidden_act", "sqrelu") != "sqrelu":
        raise FormatError(f"config.json: hidden_act {cfg['hidden_act']!r}, only 'sqrelu'")
    return cfg


def _fla_sizes(cfg, sd, m):
    """Sizes from the tensors, checked against what fla's layer derives from config.json; fields
    the layer does not read, or that the tensors contradict harmlessly, become notes."""
    C = m.n_embd
    if cfg.get("hidden_size", C) != C:
        raise FormatError(f"config.json: hidden_size {cfg['hidden_size']} but embeddings are {C} wide")
    if cfg.get("vocab_size", m.vocab) != m.vocab:
        m.notes.append(f"vocab_size {cfg['vocab_size']} in config.json, {m.vocab} embedding rows: rows win")
    value_dim = cfg.get("value_dim")
    if value_dim is not None and any(v != C for v in (value_dim if isinstance(value_dim, list) else [value_dim])):
        raise FormatError("config.json: value_dim other than hidden_size (fla's expanded state) "
                          "is not in any published RWKV-7")
    m.n_layer = L = _count_layers(sd, "model.layers.{}.ffn.key.weight")
    if cfg.get("num_hidden_layers", L) != L:
        raise FormatError(f"config.json: num_hidden_layers {cfg['num_hidden_layers']}, tensors for {L}")
    # Heads: fla's layer takes head_dim when it is set (num_heads = hidden_size // head_dim) and
    # ignores num_heads then, so a stale num_heads (fla's converter leaves the default config's
    # 2048 // 64 = 32 there) changes nothing; r_k's shape must agree with what the layer derives.
    H, N = sd["model.layers.0.attn.r_k"].shape
    head_dim, num_heads = cfg.get("head_dim", 64), cfg.get("num_heads")
    if head_dim is not None:
        derived = (C // head_dim, head_dim)
        if num_heads is not None and num_heads != C // head_dim:
            m.notes.append(f"num_heads {num_heads} in config.json is stale (head_dim {head_dim} wins)")
    elif num_heads is not None:
        derived = (num_heads, C // num_heads)
    else:
        raise FormatError("config.json: neither head_dim nor num_heads")
    if (H, N) != derived:
        raise FormatError(f"attn.r_k is {H} x {N}, config.json implies {derived[0]} x {derived[1]}")
    m.n_head, m.head_size = H, N
    m.ffn = sd["model.layers.0.ffn.key.weight"].shape[0]
    if cfg.get("intermediate_size") not in (None, m.ffn):
        m.notes.append(f"intermediate_size {cfg['intermediate_size']} in config.json, tensors {m.ffn}")
    for k, field in (("w", "decay_low_rank_dim"), ("a", "a_low_rank_dim"), ("g", "gate_low_rank_dim")):
        m.ranks[k] = sd[f"model.layers.0.attn.{k}_lora.lora.0.weight"].shape[0]
        if cfg.get(field) not in (None, m.ranks[k]):
            m.notes.append(f"{field} {cfg[field]} in config.json, tensors {m.ranks[k]}")
    m.ranks["v"] = sd["model.layers.1.attn.v_lora.lora.0.weight"].shape[0] if L > 1 else 0
    if L > 1 and cfg.get("v_low_rank_dim") not in (None, m.ranks["v"]):
        m.notes.append(f"v_low_rank_dim {cfg['v_low_rank_dim']} in config.json, tensors {m.ranks['v']}")


def _fla_layer(t, m, i, norm_bias):
    """One layer's tensors in fla's names, back in BlinkDL's form (LoRA factors transposed)."""
    C, F = m.n_embd, m.ffn
    p, a, f = f"model.layers.{i}.", f"model.layers.{i}.attn.", f"model.layers.{i}.ffn."
    d = {"ln1": t.norm(p + "attn_norm", C, norm_bias), "ln2": t.norm(p + "ffn_norm", C, norm_bias)}
    if t.has(a + "x_x"):
        # fla's first layout (20 Jan - 9 Apr 2025): one [6, C] tensor, rows r, w, k, v, a, g;
        # RWKV7Model.load_state_dict still migrates it.
        xx = t.take(a + "x_x")
        if tuple(xx.shape) not in ((6, C), (6, 1, 1, C)):
            raise FormatError(f"{a}x_x: shape {list(xx.shape)}, expected [6, {C}]")
        xx = xx.reshape(6, C).to(DT)
        for j, n in enumerate(("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")):
            d[n] = xx[j].clone()
    else:
        for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            d[n] = t.vec(a + n, C)
    for n in ("k_k", "k_a"):
        d[n] = t.vec(a + n, C)
    for k in "wavg":
        if k == "v" and i == 0:
            d["v0"] = d["v1"] = d["v2"] = None
            continue
        r, q = m.ranks[k], f"{a}{k}_lora.lora."
        d[k + "1"] = t.mat(q + "0.weight", (r, C)).T.contiguous()
        d[k + "2"] = t.mat(q + "2.weight", (C, r)).T.contiguous()
        if k != "g":
            d[k + "0"] = t.vec(q + "2.bias", C)
    d["r_k"] = t.mat(a + "r_k", (m.n_head, m.head_size))
    for n, key in (("Wr", "r_proj"), ("Wk", "k_proj"), ("Wv", "v_proj"), ("Wo", "o_proj")):
        d[n] = t.mat(a + key + ".weight", (C, C))
    d["lnx"] = t.norm(a + "g_norm", C)     # fla's g_norm always has a bias
    d["ffn_x_k"] = t.vec(f + "x_k", C)
    d["ffn_Wk"] = t.mat(f + "key.weight", (F, C))
    d["ffn_Wv"] = t.mat(f + "value.weight", (C, F))
    return d


def load_fla(model_dir):
    """fla's RWKV7ForCausalLM as fla/models/rwkv7 and fla/layers/rwkv7.py build it. The mapping
    from BlinkDL's names is utils/convert_from_rwkv7.py's: emb -> model.embeddings, ln0/ln1/ln2 ->
    pre_norm/attn_norm/ffn_norm, att -> attn with receptance/key/value/output/ln_x -> r_proj/
    k_proj/v_proj/o_proj/g_norm, X1 -> X_lora.lora.0.weight (transposed: [rank, C]),
    X2 -> X_lora.lora.2.weight (transposed: [C, rank]), X0 -> X_lora.lora.2.bias ([C]); g_lora
    has no bias; ln_out -> model.norm, head -> lm_head."""
    cfg = _fla_config(model_dir)
    sd = load_safetensors_dir(model_dir)
    m, t = Model(), _Tensors(sd, model_dir)
    m.layout, m.dtype = "fla", _float_dtype(sd)
    emb = t.take("model.embeddings.weight")
    m.vocab, m.n_embd = emb.shape
    m.emb = emb.to(DT)
    C = m.n_embd
    _fla_sizes(cfg, sd, m)
    norm_bias = cfg.get("norm_bias", True)
    norm_eps = cfg.get("norm_eps", 1e-5)
    if cfg.get("norm_first", True):
        if t.has("model.layers.0.pre_norm.weight"):
            m.ln0 = t.norm("model.layers.0.pre_norm", C, norm_bias)
        else:
            # convert_from_rwkv7.py lists pre_norm as possibly absent; the module still exists
            # and normalises, with LayerNorm's initial affine (weight 1, bias 0).
            m.ln0 = (torch.ones(C, dtype=DT), torch.zeros(C, dtype=DT))
            m.notes.append("model.layers.0.pre_norm absent: LayerNorm with weight 1, bias 0")
    for i in range(m.n_layer):
        m.layers.append(_fla_layer(t, m, i, norm_bias))
    m.ln_out = t.norm("model.norm", C, norm_bias)
    if t.has("lm_head.weight"):
        m.head = t.mat("lm_head.weight", (m.vocab, C))
    elif cfg.get("tie_word_embeddings", False):
        m.head = m.emb
    else:
        raise FormatError(f"{model_dir}: no lm_head.weight and tie_word_embeddings is false")
    t.finish()
    m.rules = Rules(norm_eps, m.head_size * norm_eps, "fla" if cfg.get("fuse_norm", True) else "blink")
    return m


def load(path):
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
        return load_fla(path)
    return load_pth(find_pth(path))
