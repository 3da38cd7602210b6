#!/usr/bin/env python3
"""Float64 reference of RWKV-7 "Goose" (x070), from BlinkDL's published math.

Our own code, written from reading BlinkDL/RWKV-LM's RWKV-v7 files (rwkv_v7_demo.py,
rwkv_v7_demo_rnn.py, rwkv_v7_demo_fast.py, rwkv_v7_numpy.py, train_temp/src/model.py) and
flash-linear-attention's RWKV-7 (fla/layers/rwkv7.py, fla/models/rwkv7/, utils/convert_from_rwkv7.py);
docs/rwkv7.md says what was read where and where the two disagree. Neither is imported. It is an
oracle, not fast: everything is torch.float64, the state update runs token by token.

It reads both published layouts:
  * BlinkDL's .pth (a bare state dict, names like blocks.0.att.w1), FILE.pth or a directory that
    holds exactly one .pth; every size is inferred from the tensors as BlinkDL's demos do;
  * fla-hub's Hugging Face folder (config.json with model_type "rwkv7", model.safetensors or
    shards, fla's names like model.layers.0.attn.w_lora.lora.0.weight).

  /usr/bin/python3 tests/rwkv7/reference.py MODEL --tokens-file ids.txt [--greedy 16]
        [--logits-out F.npy|F.txt] [--lnx-eps E] [--ln-eps E] [--l2 blink|fla] [--decay-scale S]
  /usr/bin/python3 tests/rwkv7/reference.py --self-test
  /usr/bin/python3 tests/rwkv7/reference.py --check-expected tests/rwkv7/expected.json

Output (JSON on stdout): mean_nll over the n-1 predictions of ids[1:] from ids[:-1]
(log-softmax over all vocab logits), the last position's top-5, the greedy continuation, the
sizes inferred and the numeric rules used (epsilons, normalisation form, decay constant).

The rules differ by layout only where the publishers' own code differs (docs/rwkv7.md):
  ln_x (per-head group norm) eps: .pth 64e-5 always (BlinkDL hard-codes it, whatever the head
      size); fla folder head_dim * norm_eps (fla's layer).
  kk normalisation: .pth x / max(|x|, 1e-12) (torch's F.normalize, as BlinkDL); fla folder the
      same when fuse_norm is false, x / sqrt(|x|^2 + 1e-6) (fla's fused l2_norm) when it is true.
  LayerNorm eps: .pth 1e-5 (nn.LayerNorm's default, BlinkDL); fla folder norm_eps.
The options override them (to measure what a reading changes).
"""

import argparse
import collections
import glob
import hashlib
import json
import math
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import dumps, parse_ids, read_safetensors, write_logits  # noqa: E402

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
# Loading: BlinkDL's .pth

def _vec(t, C, name):
    """A per-channel vector: [1, 1, C] as BlinkDL stores it, or [C] (fla's k_k, k_a, ffn.x_k)."""
    if tuple(t.shape) not in ((1, 1, C), (C,)):
        raise FormatError(f"{name}: shape {list(t.shape)}, expected [1, 1, {C}] or [{C}]")
    return t.reshape(C).to(DT)


def _mat(t, shape, name):
    if tuple(t.shape) != tuple(shape):
        raise FormatError(f"{name}: shape {list(t.shape)}, expected {list(shape)}")
    return t.to(DT)


def _float_dtype(sd):
    kinds = sorted({str(t.dtype).replace("torch.", "") for t in sd.values()})
    return kinds[0] if len(kinds) == 1 else "+".join(kinds)


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
    m = Model()
    m.layout, m.dtype = "pth", _float_dtype(sd)
    used = set()

    def take(name):
        if name not in sd:
            raise FormatError(f"{path}: missing tensor {name}")
        used.add(name)
        return sd[name]

    emb = take("emb.weight")
    m.vocab, C = emb.shape
    m.n_embd = C
    m.emb = emb.to(DT)
    m.n_head, m.head_size = take("blocks.0.att.r_k").shape
    if m.n_head * m.head_size != C:
        raise FormatError(f"blocks.0.att.r_k: {m.n_head} x {m.head_size} != n_embd {C}")
    L = 0
    while f"blocks.{L}.ffn.key.weight" in sd:
        L += 1
    m.n_layer = L
    m.ffn = sd["blocks.0.ffn.key.weight"].shape[0]
    for k in "wag":
        m.ranks[k] = sd[f"blocks.0.att.{k}1"].shape[1]
    m.ranks["v"] = sd["blocks.1.att.v1"].shape[1] if L > 1 else 0
    H, N, F = m.n_head, m.head_size, m.ffn

    def ln(prefix):
        return (_vec(take(prefix + ".weight"), C, prefix + ".weight"),
                _vec(take(prefix + ".bias"), C, prefix + ".bias"))

    m.ln0 = ln("blocks.0.ln0")
    for i in range(L):
        p, a = f"blocks.{i}.", f"blocks.{i}.att."
        d = {"ln1": ln(p + "ln1"), "ln2": ln(p + "ln2")}
        for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w0", "a0", "k_k", "k_a"):
            d[n] = _vec(take(a + n), C, a + n)
        for n in "wag":
            r = m.ranks[n]
            d[n + "1"] = _mat(take(a + n + "1"), (C, r), a + n + "1")
            d[n + "2"] = _mat(take(a + n + "2"), (r, C), a + n + "2")
        if i > 0:
            d["v0"] = _vec(take(a + "v0"), C, a + "v0")
            d["v1"] = _mat(take(a + "v1"), (C, m.ranks["v"]), a + "v1")
            d["v2"] = _mat(take(a + "v2"), (m.ranks["v"], C), a + "v2")
        else:
            # Present in checkpoints saved by the training code, absent from some published
            # ones; never used (layer 0 only sets v_first). rwkv_v7_demo.py loads with
            # strict=False for them, the RNN demo overwrites them, fla's converter drops them.
            for n in ("v0", "v1", "v2"):
                if a + n in sd:
                    used.add(a + n)
                    m.notes.append(f"{a + n} present and unused (layer 0)")
            d["v0"] = d["v1"] = d["v2"] = None
        d["r_k"] = _mat(take(a + "r_k"), (H, N), a + "r_k")
        for n, key in (("Wr", "receptance"), ("Wk", "key"), ("Wv", "value"), ("Wo", "output")):
            d[n] = _mat(take(a + key + ".weight"), (C, C), a + key + ".weight")
        d["lnx"] = ln(a + "ln_x")
        f = p + "ffn."
        d["ffn_x_k"] = _vec(take(f + "x_k"), C, f + "x_k")
        d["ffn_Wk"] = _mat(take(f + "key.weight"), (F, C), f + "key.weight")
        d["ffn_Wv"] = _mat(take(f + "value.weight"), (C, F), f + "value.weight")
        m.layers.append(d)
    m.ln_out = ln("ln_out")
    m.head = _mat(take("head.weight"), (m.vocab, C), "head.weight")
    extra = sorted(set(sd) - used)
    if extra:
        raise FormatError(f"{path}: tensors no RWKV-7 reading uses: {extra[:8]}")
    m.rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    return m


# --------------------------------------------------------------------------------------------
# Loading: fla-hub's Hugging Face folder

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


def load_fla(model_dir):
    """fla's RWKV7ForCausalLM as fla/models/rwkv7 and fla/layers/rwkv7.py build it. The mapping
    from BlinkDL's names is utils/convert_from_rwkv7.py's: emb -> model.embeddings, ln0/ln1/ln2 ->
    pre_norm/attn_norm/ffn_norm, att -> attn with receptance/key/value/output/ln_x -> r_proj/
    k_proj/v_proj/o_proj/g_norm, X1 -> X_lora.lora.0.weight (transposed: [rank, C]),
    X2 -> X_lora.lora.2.weight (transposed: [C, rank]), X0 -> X_lora.lora.2.bias ([C]); g_lora
    has no bias; ln_out -> model.norm, head -> lm_head."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "rwkv7":
        raise FormatError(f"{model_dir}: model_type {cfg.get('model_type')!r}, expected 'rwkv7'")
    if cfg.get("attn"):
        raise FormatError("config.json: hybrid softmax-attention layers (attn) are not RWKV-7")
    if cfg.get("hidden_act", "sqrelu") != "sqrelu":
        raise FormatError(f"config.json: hidden_act {cfg['hidden_act']!r}, only 'sqrelu'")
    sd = load_safetensors_dir(model_dir)
    m = Model()
    m.layout, m.dtype = "fla", _float_dtype(sd)
    used = set()

    def take(name):
        if name not in sd:
            raise FormatError(f"{model_dir}: missing tensor {name}")
        used.add(name)
        return sd[name]

    emb = take("model.embeddings.weight")
    m.vocab, C = emb.shape
    m.n_embd, m.emb = C, emb.to(DT)
    if cfg.get("hidden_size", C) != C:
        raise FormatError(f"config.json: hidden_size {cfg['hidden_size']} but embeddings are {C} wide")
    if cfg.get("vocab_size", m.vocab) != m.vocab:
        m.notes.append(f"vocab_size {cfg['vocab_size']} in config.json, {m.vocab} embedding rows: rows win")
    value_dim = cfg.get("value_dim")
    if value_dim is not None and any(v != C for v in (value_dim if isinstance(value_dim, list) else [value_dim])):
        raise FormatError("config.json: value_dim other than hidden_size (fla's expanded state) "
                          "is not in any published RWKV-7")
    L = 0
    while f"model.layers.{L}.ffn.key.weight" in sd:
        L += 1
    m.n_layer = L
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
    F = m.ffn
    norm_bias = cfg.get("norm_bias", True)
    norm_eps = cfg.get("norm_eps", 1e-5)

    def ln(prefix, bias=norm_bias):
        w = _vec(take(prefix + ".weight"), C, prefix + ".weight")
        b = _vec(take(prefix + ".bias"), C, prefix + ".bias") if bias else torch.zeros(C, dtype=DT)
        return (w, b)

    if cfg.get("norm_first", True):
        if "model.layers.0.pre_norm.weight" in sd:
            m.ln0 = ln("model.layers.0.pre_norm")
        else:
            # convert_from_rwkv7.py lists pre_norm as possibly absent; the module still exists
            # and normalises, with LayerNorm's initial affine (weight 1, bias 0).
            m.ln0 = (torch.ones(C, dtype=DT), torch.zeros(C, dtype=DT))
            m.notes.append("model.layers.0.pre_norm absent: LayerNorm with weight 1, bias 0")
    else:
        m.ln0 = None
    for i in range(L):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.attn."
        d = {"ln1": ln(p + "attn_norm"), "ln2": ln(p + "ffn_norm")}
        if a + "x_x" in sd:
            # fla's first layout (20 Jan - 9 Apr 2025): one [6, C] tensor, rows r, w, k, v, a, g;
            # RWKV7Model.load_state_dict still migrates it.
            xx = take(a + "x_x")
            if tuple(xx.shape) not in ((6, C), (6, 1, 1, C)):
                raise FormatError(f"{a}x_x: shape {list(xx.shape)}, expected [6, {C}]")
            xx = xx.reshape(6, C).to(DT)
            for j, n in enumerate(("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")):
                d[n] = xx[j].clone()
        else:
            for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
                d[n] = _vec(take(a + n), C, a + n)
        for n in ("k_k", "k_a"):
            d[n] = _vec(take(a + n), C, a + n)
        for k in "wavg":
            if k == "v" and i == 0:
                d["v0"] = d["v1"] = d["v2"] = None
                continue
            r, q = m.ranks[k], f"{a}{k}_lora.lora."
            d[k + "1"] = _mat(take(q + "0.weight"), (r, C), q + "0.weight").T.contiguous()
            d[k + "2"] = _mat(take(q + "2.weight"), (C, r), q + "2.weight").T.contiguous()
            if k != "g":
                d[k + "0"] = _vec(take(q + "2.bias"), C, q + "2.bias")
        d["r_k"] = _mat(take(a + "r_k"), (H, N), a + "r_k")
        for n, key in (("Wr", "r_proj"), ("Wk", "k_proj"), ("Wv", "v_proj"), ("Wo", "o_proj")):
            d[n] = _mat(take(a + key + ".weight"), (C, C), a + key + ".weight")
        d["lnx"] = ln(a + "g_norm", bias=True)   # fla's g_norm always has a bias
        f = p + "ffn."
        d["ffn_x_k"] = _vec(take(f + "x_k"), C, f + "x_k")
        d["ffn_Wk"] = _mat(take(f + "key.weight"), (F, C), f + "key.weight")
        d["ffn_Wv"] = _mat(take(f + "value.weight"), (C, F), f + "value.weight")
        m.layers.append(d)
    m.ln_out = ln("model.norm")
    if "lm_head.weight" in sd:
        m.head = _mat(take("lm_head.weight"), (m.vocab, C), "lm_head.weight")
    elif cfg.get("tie_word_embeddings", False):
        m.head = m.emb
    else:
        raise FormatError(f"{model_dir}: no lm_head.weight and tie_word_embeddings is false")
    extra = sorted(set(sd) - used)
    if extra:
        raise FormatError(f"{model_dir}: tensors no RWKV-7 reading uses: {extra[:8]}")
    m.rules = Rules(norm_eps, N * norm_eps, "fla" if cfg.get("fuse_norm", True) else "blink")
    return m


def load(path):
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
        return load_fla(path)
    return load_pth(find_pth(path))


# --------------------------------------------------------------------------------------------
# Pieces (float64; sequences are [T, ...])

def layer_norm(x, wb, eps):
    """nn.LayerNorm: biased variance over the last axis."""
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * wb[0] + wb[1]


def group_norm(y, wb, eps):
    """ln_x: nn.GroupNorm(H, C) on y [T, H, N]: each head normalised on its own (biased
    variance), then the per-channel affine."""
    T, H, N = y.shape
    mu = y.mean(dim=-1, keepdim=True)
    var = ((y - mu) ** 2).mean(dim=-1, keepdim=True)
    return ((y - mu) / torch.sqrt(var + eps)).reshape(T, H * N) * wb[0] + wb[1]


def l2_normalize(x, rules):
    """x [..., N] per head. BlinkDL: F.normalize (x / max(|x|, 1e-12)); fla with fuse_norm:
    x / sqrt(|x|^2 + 1e-6)."""
    ss = (x * x).sum(dim=-1, keepdim=True)
    if rules.l2 == "fla":
        return x / torch.sqrt(ss + FLA_L2_EPS)
    return x / torch.clamp(torch.sqrt(ss), min=TORCH_NORMALIZE_EPS)


def decay(z, rules):
    """The per-channel decay in (exp(-e^-0.5), 1) from the LoRA output z = w0 + tanh(xw@w1)@w2.
    Published as w = exp(-exp(-softplus(-z) - 0.5)) (GPT demo, CUDA kernel: the soft clamp to
    (-inf, -0.5)) and as exp(-e^-0.5 * sigmoid(z)) (RNN demo, numpy reference, fla with the
    log-decay -e^-0.5 * sigmoid(z)); the two are equal since exp(-softplus(-z)) = sigmoid(z)."""
    return torch.exp(-rules.decay_scale * torch.sigmoid(z))


def new_state(m):
    """Per layer: the time mix's previous normed input [C], the H matrices S[h] [N (value),
    N (key)] (BlinkDL's orientation; fla keeps the transpose, [K, V]), the channel mix's
    previous normed input [C]."""
    C, H, N = m.n_embd, m.n_head, m.head_size
    return [{"att_x": torch.zeros(C, dtype=DT), "S": torch.zeros(H, N, N, dtype=DT),
             "ffn_x": torch.zeros(C, dtype=DT)} for _ in range(m.n_layer)]


def shifted(x, prev):
    """The previous token's row for every row of x [T, C]; prev for the first."""
    return torch.cat([prev.unsqueeze(0), x[:-1]], dim=0)


def time_mix(m, i, d, x, st, v_first):
    """One layer's attention over x [T, C] (already ln1-normed). Returns the output [T, C] and
    v_first; updates st."""
    T, C = x.shape
    H, N, rules = m.n_head, m.head_size, m.rules
    xx = shifted(x, st["att_x"]) - x                     # token shift: x_{t-1} - x_t
    xr, xw, xk, xv, xa, xg = (x + xx * d[n] for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"))
    r = xr @ d["Wr"].T
    w = decay(d["w0"] + torch.tanh(xw @ d["w1"]) @ d["w2"], rules)
    k = xk @ d["Wk"].T
    v = xv @ d["Wv"].T
    if i == 0:
        v_first = v                                      # layer 0 stores its v
    else:                                                # value residual, layers > 0
        v = v + (v_first - v) * torch.sigmoid(d["v0"] + (xv @ d["v1"]) @ d["v2"])
    a = torch.sigmoid(d["a0"] + (xa @ d["a1"]) @ d["a2"])   # in-context learning rate
    g = torch.sigmoid(xg @ d["g1"]) @ d["g2"]               # output gate: sigmoid in the middle
    var = m.variants
    if "gate_sigmoid_outside" in var:
        g = torch.sigmoid((xg @ d["g1"]) @ d["g2"])
    kk = l2_normalize((k * d["k_k"]).reshape(T, H, N), rules)
    k_raw = k
    k = k * (1 + (a - 1) * d["k_a"])
    r3, w3, k3, v3, a3 = (t.reshape(T, H, N) for t in (r, w, k, v, a))
    S = st["S"]
    y = torch.empty(T, H, N, dtype=DT)
    wshape = (slice(None), slice(None), None) if "decay_on_value_index" in var else (slice(None), None, slice(None))
    readout = "hji,hj->hi" if "readout_transposed" in var else "hij,hj->hi"
    for t in range(T):
        # S = S diag(w) + (S (-kk)) (kk * a)^T + v k^T, per head; both terms use the old S.
        sa = torch.einsum("hij,hj->hi", S * w3[t][:, None, :] if "sa_after_decay" in var else S, -kk[t])
        S = (S * w3[t][wshape] + sa[:, :, None] * (kk[t] * a3[t])[:, None, :]
             + v3[t][:, :, None] * k3[t][:, None, :])
        y[t] = torch.einsum(readout, S, r3[t])           # y = S r
    st["S"] = S
    st["att_x"] = x[-1].clone()
    if "ln_x_whole_width" in var:
        out = group_norm(y.reshape(T, 1, C), d["lnx"], rules.lnx_eps)
    else:
        out = group_norm(y, d["lnx"], rules.lnx_eps)
    kb = k_raw.reshape(T, H, N) if "bonus_k_before_ka" in var else k3
    bonus = (r3 * kb * d["r_k"]).sum(dim=-1, keepdim=True) * v3     # per head, times v
    out = out + bonus.reshape(T, C)
    return (out * g) @ d["Wo"].T, v_first


def channel_mix(d, x, st):
    xx = shifted(x, st["ffn_x"]) - x
    st["ffn_x"] = x[-1].clone()
    k = torch.relu((x + xx * d["ffn_x_k"]) @ d["ffn_Wk"].T) ** 2
    return k @ d["ffn_Wv"].T


def forward(m, ids, state=None):
    """Logits [T, V] for ids, continuing from state (a fresh zero state when None); the state
    after the last id is returned too (the input state is not modified)."""
    st = [dict(s) for s in state] if state is not None else new_state(m)
    x = m.emb[torch.tensor(ids, dtype=torch.long)]
    if m.ln0 is not None:
        x = layer_norm(x, m.ln0, m.rules.ln_eps)         # ln0: layer 0's, on the embeddings
    v_first = None
    for i, d in enumerate(m.layers):
        dx, v_first = time_mix(m, i, d, layer_norm(x, d["ln1"], m.rules.ln_eps), st[i], v_first)
        x = x + dx
        x = x + channel_mix(d, layer_norm(x, d["ln2"], m.rules.ln_eps), st[i])
    x = layer_norm(x, m.ln_out, m.rules.ln_eps)
    return x @ m.head.T, st


def mean_nll(logits, ids):
    lp = torch.log_softmax(logits[:-1], dim=-1)
    tgt = torch.tensor(ids[1:], dtype=torch.long)
    return float(-lp.gather(1, tgt[:, None]).mean())


def greedy(m, ids, n, state=None):
    """n greedy tokens after ids; also the margin (top-1 minus top-2 logit) of each choice."""
    logits, st = forward(m, ids, state)
    out, margins, last = [], [], logits[-1]
    for _ in range(n):
        top = torch.topk(last, 2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        logits, st = forward(m, [out[-1]], st)
        last = logits[-1]
    return out, margins


def state_digest(st):
    """sha256 of the state as float64 little-endian: per layer att_x, S (h, i, j), ffn_x."""
    h = hashlib.sha256()
    for s in st:
        for key in ("att_x", "S", "ffn_x"):
            h.update(s[key].contiguous().numpy().astype("<f8").tobytes())
    return h.hexdigest()


def describe(m):
    return {"layout": m.layout, "dtype": m.dtype, "n_layer": m.n_layer, "n_embd": m.n_embd,
            "n_head": m.n_head, "head_size": m.head_size, "vocab": m.vocab, "ffn": m.ffn,
            "lora_ranks": dict(m.ranks), "rules": m.rules.as_dict(), "notes": m.notes}


def evaluate(m, ids, n_greedy=16, prefixes=(2, 17, 64, 200)):
    logits, st = forward(m, ids)
    top = torch.topk(logits[-1], 5)
    cont, margins = greedy(m, ids, n_greedy)
    return {
        "mean_nll": mean_nll(logits, ids),
        "prefix_nll": {str(p): mean_nll(logits[:p], ids[:p]) for p in prefixes if p <= len(ids)},
        "top5_ids": [int(i) for i in top.indices],
        "top5_logits": [float(v) for v in top.values],
        "greedy": cont,
        "greedy_min_margin": min(margins) if margins else None,
        "state_sha256": state_digest(st),
    }, logits


def apply_overrides(m, a):
    if a.lnx_eps is not None:
        m.rules.lnx_eps = a.lnx_eps
    if a.ln_eps is not None:
        m.rules.ln_eps = a.ln_eps
    if a.l2 is not None:
        m.rules.l2 = a.l2
    if a.decay_scale is not None:
        m.rules.decay_scale = a.decay_scale


# --------------------------------------------------------------------------------------------
# Self-test: the pieces against independent forms, the model against itself

def _random_model(seed, C=32, H=2, L=3, V=40, F=48, ranks=(5, 3, 4, 7), layout="pth"):
    g = torch.Generator().manual_seed(seed)

    def rn(*s, std=1.0, mean=0.0):
        return (torch.randn(*s, generator=g, dtype=DT) * std + mean)

    m = Model()
    m.layout, m.dtype = layout, "float64"
    m.n_layer, m.n_embd, m.n_head, m.head_size, m.vocab, m.ffn = L, C, H, C // H, V, F
    m.ranks = dict(zip("wavg", ranks))
    m.emb = rn(V, C)
    m.ln0 = (rn(C, std=0.1, mean=1), rn(C, std=0.1))
    for i in range(L):
        d = {"ln1": (rn(C, std=0.1, mean=1), rn(C, std=0.1)),
             "ln2": (rn(C, std=0.1, mean=1), rn(C, std=0.1)),
             "lnx": (rn(C, std=0.1, mean=1), rn(C, std=0.1))}
        for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            d[n] = torch.rand(C, generator=g, dtype=DT)
        d["w0"], d["a0"] = rn(C, std=2, mean=-2), rn(C, std=0.5)
        d["v0"] = rn(C, std=0.5, mean=0.5) if i else None
        for k, r in zip("wavg", ranks):
            if k == "v" and i == 0:
                d["v1"] = d["v2"] = None
                continue
            d[k + "1"], d[k + "2"] = rn(C, r, std=C ** -0.5), rn(r, C, std=0.3 * r ** -0.5)
        d["k_k"], d["k_a"] = rn(C, std=0.1, mean=0.7), rn(C, std=0.1, mean=1.0)
        d["r_k"] = rn(H, C // H, std=0.2)
        for n in ("Wr", "Wk", "Wv", "Wo"):
            d[n] = rn(C, C, std=C ** -0.5)
        d["ffn_x_k"] = torch.rand(C, generator=g, dtype=DT)
        d["ffn_Wk"], d["ffn_Wv"] = rn(F, C, std=C ** -0.5), rn(C, F, std=F ** -0.5)
        m.layers.append(d)
    m.ln_out = (rn(C, std=0.1, mean=1), rn(C, std=0.1))
    m.head = rn(V, C, std=2 * C ** -0.5)
    m.rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    return m


def _rel(a, b):
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-300))


def self_test():
    fails = []

    def check(name, err, tol):
        ok = err <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3g} (tolerance {tol:g})")
        if not ok:
            fails.append(name)

    g = torch.Generator().manual_seed(7)
    z = torch.randn(1000, generator=g, dtype=DT) * 6
    rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    soft = torch.exp(-torch.exp(-torch.nn.functional.softplus(-z) - 0.5))
    check("decay: exp(-e^-0.5 sigmoid(z)) == exp(-exp(-softplus(-z) - 0.5))", _rel(decay(z, rules), soft), 1e-14)
    y = torch.randn(5, 3, 8, generator=g, dtype=DT) * 0.1
    wb = (torch.randn(24, generator=g, dtype=DT), torch.randn(24, generator=g, dtype=DT))
    ref = torch.nn.functional.group_norm(y.reshape(5, 24), 3, wb[0], wb[1], eps=64e-5)
    check("group_norm == torch group_norm (eps 64e-5)", _rel(group_norm(y, wb, 64e-5), ref), 1e-13)
    x = torch.randn(5, 24, generator=g, dtype=DT)
    ref = torch.nn.functional.layer_norm(x, (24,), wb[0], wb[1], eps=1e-5)
    check("layer_norm == torch layer_norm", _rel(layer_norm(x, wb, 1e-5), ref), 1e-13)
    ref = torch.nn.functional.normalize(y, dim=-1, p=2.0)
    check("l2 (blink) == F.normalize", _rel(l2_normalize(y, rules), ref), 1e-14)

    m = _random_model(1)
    ids = [int(t) for t in torch.randint(0, m.vocab, (40,), generator=g)]
    full, st_full = forward(m, ids)
    # Token by token (RNN mode) through the state == the whole sequence at once (GPT mode).
    st, rows = None, []
    for t in ids:
        lg, st = forward(m, [t], st)
        rows.append(lg[0])
    check("RNN mode == GPT mode (logits)", _rel(torch.stack(rows), full), 1e-12)
    check("RNN mode == GPT mode (final S)", _rel(st[-1]["S"], st_full[-1]["S"]), 1e-12)
    a, st = forward(m, ids[:17])
    b, _ = forward(m, ids[17:], st)
    check("prefix then continuation from the state == whole", _rel(torch.cat([a, b]), full), 1e-12)
    # Causality: changing a later id leaves earlier logits alone.
    ids2 = list(ids)
    ids2[30] = (ids2[30] + 1) % m.vocab
    lg2, _ = forward(m, ids2)
    check("causal: logits before the change are equal", _rel(lg2[:30], full[:30]), 0.0)
    check("causal: logits after the change differ", 1.0 if _rel(lg2[30:], full[30:]) == 0 else 0.0, 0.0)
    # Layer 0's v0/v1/v2 are never read: garbage there changes nothing.
    m.layers[0]["v0"] = torch.full((m.n_embd,), float("nan"), dtype=DT)
    lg3, _ = forward(m, ids)
    check("layer 0 ignores v0/v1/v2", _rel(lg3, full), 0.0)
    # The state update against its closed form for a single head, one step from a random S.
    N = 6
    S = torch.randn(1, N, N, generator=g, dtype=DT)
    w, kk, a_, v, k, r = (torch.rand(N, generator=g, dtype=DT) for _ in range(6))
    kk = kk / kk.norm()
    closed = S[0] @ (torch.diag(w) - torch.outer(kk, kk * a_)) + torch.outer(v, k)
    sa = torch.einsum("hij,hj->hi", S, -kk[None])
    step = S * w[None, None, :] + sa[:, :, None] * (kk * a_)[None, None, :] + v[None, :, None] * k[None, None, :]
    check("state update == S (diag(w) - kk (kk*a)^T) + v k^T", _rel(step[0], closed), 1e-14)
    # The loaders: a random model written in both layouts reads back to the same NLL.
    import tempfile
    sys.path.insert(0, HERE)
    import make_fixtures
    with tempfile.TemporaryDirectory() as tmp:
        spec = dict(make_fixtures.SELF_TEST_SPEC)
        sd = make_fixtures.make_pth_state_dict(spec, seed=3)
        pth = os.path.join(tmp, "m.pth")
        torch.save(sd, pth)
        fla = os.path.join(tmp, "fla")
        make_fixtures.write_fla(sd, fla, fuse_norm=False)
        mp, mf = load(pth), load(fla)
        mp.rules = Rules(1e-5, mf.rules.lnx_eps, "blink")
        ids = [(7 * i + 3) % mp.vocab for i in range(30)]
        ref = forward(mp, ids)[0]
        check("pth and fla layouts of one model: same logits", _rel(forward(mf, ids)[0], ref), 1e-12)
        # fla's first layout: the six lerps as one x_x [6, C] (rows r, w, k, v, a, g).
        from pyref import read_safetensors, write_safetensors
        st = read_safetensors(os.path.join(fla, "model.safetensors"))
        for i in range(mp.n_layer):
            a = f"model.layers.{i}.attn."
            st[a + "x_x"] = torch.cat([st.pop(a + n).reshape(1, -1) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")])
        write_safetensors(os.path.join(fla, "model.safetensors"), st)
        check("fla's x_x [6, C] layout reads as the six x_*", _rel(forward(load(fla), ids)[0], ref), 1e-12)
    print("self-test:", "FAILED " + ", ".join(fails) if fails else "passed")
    return 1 if fails else 0


# --------------------------------------------------------------------------------------------

def check_expected(path, tol=1e-12):
    """Recompute every fixture in expected.json; exit 1 unless each mean NLL is within tol
    relative and the greedy ids equal."""
    with open(path) as f:
        exp = json.load(f)
    root = os.path.dirname(os.path.abspath(path))
    ids = parse_ids(open(os.path.join(root, exp["prompt_file"])).read())
    bad = 0
    for name, e in exp["fixtures"].items():
        m = load(os.path.join(root, e["path"]))
        got, _ = evaluate(m, ids, n_greedy=len(e["greedy"]))
        rel = abs(got["mean_nll"] - e["mean_nll"]) / abs(e["mean_nll"])
        ok = rel <= tol and got["greedy"] == e["greedy"]
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: mean_nll {got['mean_nll']:.17g} "
              f"(expected {e['mean_nll']:.17g}, rel {rel:.2g}), greedy {'equal' if got['greedy'] == e['greedy'] else 'DIFFERENT'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", help="comma-separated ids")
    ap.add_argument("--tokens-file")
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--logits-out", help="last position's logits (.npy float64 or text)")
    ap.add_argument("--lnx-eps", type=float)
    ap.add_argument("--ln-eps", type=float)
    ap.add_argument("--l2", choices=("blink", "fla"))
    ap.add_argument("--decay-scale", type=float, help="e.g. 0.606531 as the RNN demo writes it")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check-expected")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.check_expected:
        return check_expected(a.check_expected)
    if not a.model:
        ap.error("MODEL is required")
    ids = parse_ids(open(a.tokens_file).read() if a.tokens_file else a.tokens.replace(",", " "))
    m = load(a.model)
    apply_overrides(m, a)
    if max(ids) >= m.vocab or min(ids) < 0:
        raise SystemExit(f"token ids must be in [0, {m.vocab})")
    res, logits = evaluate(m, ids, a.greedy)
    if a.logits_out:
        write_logits(a.logits_out, logits[-1])
    out = collections.OrderedDict(model=describe(m))
    out.update(res)
    print(dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
