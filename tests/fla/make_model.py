#!/usr/bin/env python3
"""Writes a random-weight checkpoint in flash-linear-attention's layout: config.json as fla's
save_pretrained writes it (model_type gla, retnet or hgrn2; an optional `attn` block for hybrid
softmax-attention layers, as a dict or as the newer list) and model.safetensors with fla's
tensor names and shapes (docs/fla-models.md).

  /usr/bin/python3 tests/fla/make_model.py OUT --type gla --hidden 64 --layers 2 [--dtype bf16] ...

Weights are drawn in float32 from a seeded torch.Generator and then cast to --dtype, so one seed
and shape give a model and its bf16 rounding. The scales keep the NLL well away from ln(vocab):
the logits have a standard deviation of about --logit-std, GLA's decays spread over (0.6, 1),
HGRN2's forget gates over (0, 1).
"""

import argparse
import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import int_list, write_safetensors  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import mlp_width  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TORCH_DTYPE = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
ARCH = {"gla": "GLAForCausalLM", "retnet": "RetNetForCausalLM", "hgrn2": "HGRN2ForCausalLM"}

def make_config(a):
    common = {
        "architectures": [ARCH[a.type]],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "fuse_cross_entropy": True,
        "fuse_norm": not a.no_fuse_norm,
        "fuse_swiglu": True,
        "hidden_act": "swish",
        "hidden_ratio": a.hidden_ratio,
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "intermediate_size": a.intermediate_size,
        "max_position_embeddings": 2048,
        "model_type": a.type,
        "num_hidden_layers": a.layers,
        "tie_word_embeddings": a.tie,
        "torch_dtype": TORCH_DTYPE[a.dtype],
        "use_cache": True,
        "vocab_size": a.vocab,
    }
    if not a.old_config:
        common.update({"attn_mode": "chunk", "elementwise_affine": not a.no_affine, "norm_eps": 1e-6})
    attn_layers = int_list(a.attn_layers)
    if attn_layers:
        spec = {"layers": attn_layers, "num_heads": a.attn_heads}
        if a.attn_kv_heads:
            spec["num_kv_heads"] = a.attn_kv_heads
        if a.qkv_bias:
            spec["qkv_bias"] = True
        if a.attn_window:
            spec["window_size"] = a.attn_window
        if a.attn_rope_theta is not None:
            spec["rope_theta"] = a.attn_rope_theta
        common["attn"] = [spec] if a.attn_list else spec
    elif not a.old_config:
        common["attn"] = None
    if a.type == "gla":
        c = {"clamp_min": a.clamp_min, "conv_size": a.conv_size, "expand_k": a.expand_k,
             "expand_v": a.expand_v, "num_heads": a.heads, "share_conv_kernel": True,
             "use_gk": True, "use_gv": False, "use_short_conv": a.short_conv}
        if a.old_config:  # as gla-1.3B-100B's file: rms_norm_eps, and fields left to defaults
            c.update({"attn_mode": "fused_chunk", "rms_norm_eps": 1e-6})
        else:
            c.update({"feature_map": a.feature_map, "num_kv_heads": a.kv_heads or None,
                      "use_output_gate": not a.no_output_gate})
    elif a.type == "retnet":
        c = {"conv_size": 4, "expand_k": a.expand_k, "expand_v": a.expand_v,
             "feature_map": a.feature_map, "num_heads": a.heads, "num_kv_heads": a.kv_heads or None,
             "share_conv_kernel": True, "use_output_gate": not a.no_output_gate,
             "use_short_conv": False, "rms_norm_eps": 1e-6}
    else:
        c = {"conv_size": a.conv_size, "expand_ratio": a.expand_ratio, "num_heads": None,
             "use_lower_bound": not a.no_lower_bound, "use_short_conv": a.short_conv}
    common.update(c)
    return dict(sorted(common.items()))


def make_weights(a, cfg):
    """Ordered dict of name -> float32 tensor (the modules' order)."""
    g = torch.Generator().manual_seed(a.seed)

    def randn(*shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean

    def norm(n):
        return randn(n, std=0.1, mean=1.0)

    D, V = a.hidden, a.vocab
    I = mlp_width(D, a.hidden_ratio, a.intermediate_size)
    attn = set(int_list(a.attn_layers))
    w = collections.OrderedDict()
    w["model.embeddings.weight"] = randn(V, D)
    if a.type == "hgrn2" and not a.no_lower_bound:
        w["model.lower_bounds"] = randn(a.layers, D)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        w[p + "attn_norm.weight"] = norm(D)
        m = p + "attn."
        if i in attn:
            hd = D // a.attn_heads
            kv = (a.attn_kv_heads or a.attn_heads) * hd
            for n, rows in (("q", D), ("k", kv), ("v", kv)):
                w[m + f"{n}_proj.weight"] = randn(rows, D, std=D ** -0.5)
                if a.qkv_bias:
                    w[m + f"{n}_proj.bias"] = randn(rows, std=0.1)
            w[m + "o_proj.weight"] = randn(D, D, std=D ** -0.5)
        elif a.type in ("gla", "retnet"):
            H = a.heads
            G = H // (a.kv_heads or H)
            kd, vd = int(D * a.expand_k), int(D * a.expand_v)
            w[m + "q_proj.weight"] = randn(kd, D, std=D ** -0.5)
            w[m + "k_proj.weight"] = randn(kd // G, D, std=D ** -0.5)
            w[m + "v_proj.weight"] = randn(vd // G, D, std=D ** -0.5)
            gated = not a.no_output_gate
            if gated:
                w[m + "g_proj.weight"] = randn(vd, D, std=D ** -0.5)
            if a.type == "gla" and a.short_conv:
                for n, ch in (("q", kd), ("k", kd // G), ("v", vd // G)):
                    w[m + f"{n}_conv1d.weight"] = randn(ch, 1, a.conv_size, std=0.5)
            if a.type == "gla":
                # The gate logits spread over about N(1, 2.5^2): decays exp(logsigmoid/16) in (0.6, 1).
                w[m + "gk_proj.0.weight"] = randn(16, D, std=D ** -0.5)
                w[m + "gk_proj.1.weight"] = randn(kd // G, 16, std=0.5)
                w[m + "gk_proj.1.bias"] = randn(kd // G, std=2.0, mean=1.0)
            w[m + "o_proj.weight"] = randn(D, vd, std=vd ** -0.5)
            if not a.no_affine:
                fused = gated and not a.no_fuse_norm
                w[m + ("g_norm_swish_gate.weight" if fused else "g_norm.weight")] = norm(vd // H)
        else:
            e = a.expand_ratio
            fd = (D // e) * e
            w[m + "q_proj.weight"] = randn(fd, D, std=D ** -0.5)
            w[m + "f_proj.weight"] = randn(fd, D, std=2 * D ** -0.5)
            w[m + "i_proj.weight"] = randn(D, D, std=D ** -0.5)
            if a.short_conv:
                for n, ch in (("q", fd), ("f", fd), ("i", D)):
                    w[m + f"{n}_conv1d.weight"] = randn(ch, 1, a.conv_size, std=0.5)
            if not a.no_affine:
                w[m + "g_norm.weight"] = norm(D)
            w[m + "o_proj.weight"] = randn(D, D, std=D ** -0.5)
        w[p + "mlp_norm.weight"] = norm(D)
        w[p + "mlp.gate_proj.weight"] = randn(I, D, std=D ** -0.5)
        w[p + "mlp.up_proj.weight"] = randn(I, D, std=D ** -0.5)
        w[p + "mlp.down_proj.weight"] = randn(D, I, std=I ** -0.5)
    # The logits' standard deviation is about |norm weight| * |head row| = logit_std.
    if a.tie:
        w["model.norm.weight"] = norm(D) * (a.logit_std / D ** 0.5)
    else:
        w["model.norm.weight"] = norm(D) * a.logit_std
        w["lm_head.weight"] = randn(V, D, std=D ** -0.5)
    return w

def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--type", choices=sorted(ARCH), default="gla")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--heads", type=int, default=2, help="GLA/RetNet num_heads")
    ap.add_argument("--kv-heads", type=int, default=0, help="GLA/RetNet num_kv_heads (0: null)")
    ap.add_argument("--expand-k", type=float, default=None, help="default: 0.5 GLA, 1 RetNet")
    ap.add_argument("--expand-v", type=float, default=None, help="default: 1 GLA, 2 RetNet")
    ap.add_argument("--expand-ratio", type=int, default=16, help="HGRN2 expand_ratio")
    ap.add_argument("--short-conv", action="store_true", help="use_short_conv (GLA, HGRN2)")
    ap.add_argument("--conv-size", type=int, default=4)
    ap.add_argument("--no-output-gate", action="store_true", help="use_output_gate false")
    ap.add_argument("--clamp-min", type=float, default=None)
    ap.add_argument("--feature-map", default=None)
    ap.add_argument("--no-lower-bound", action="store_true", help="HGRN2 use_lower_bound false")
    ap.add_argument("--no-affine", action="store_true", help="elementwise_affine false")
    ap.add_argument("--no-fuse-norm", action="store_true", help="fuse_norm false (g_norm.weight)")
    ap.add_argument("--hidden-ratio", type=int, default=None, help="default: 4, RetNet 2")
    ap.add_argument("--intermediate-size", type=int, default=None)
    ap.add_argument("--tie", action="store_true", help="tie_word_embeddings (no lm_head.weight)")
    ap.add_argument("--attn-layers", default="", help="hybrid softmax-attention layers, e.g. 1")
    ap.add_argument("--attn-heads", type=int, default=4)
    ap.add_argument("--attn-kv-heads", type=int, default=0)
    ap.add_argument("--attn-window", type=int, default=0, help="window_size (0: full attention)")
    ap.add_argument("--attn-rope-theta", type=float, default=None)
    ap.add_argument("--qkv-bias", action="store_true")
    ap.add_argument("--attn-list", action="store_true", help="the attn block as a list of dicts")
    ap.add_argument("--old-config", action="store_true",
                    help="GLA: config fields as gla-1.3B-100B's file (rms_norm_eps, no norm_eps, ...)")
    ap.add_argument("--logit-std", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    return ap


def finish_args(a):
    defaults = {"gla": (0.5, 1.0, 4), "retnet": (1.0, 2.0, 2), "hgrn2": (None, None, 4)}[a.type]
    if a.expand_k is None:
        a.expand_k = defaults[0]
    if a.expand_v is None:
        a.expand_v = defaults[1]
    if a.hidden_ratio is None:
        a.hidden_ratio = defaults[2]
    return a


def build(argv):
    """(config dict, float32 weights) for make_model's arguments, without files."""
    a = finish_args(parser().parse_args(["-"] + list(argv)))
    cfg = make_config(a)
    return cfg, make_weights(a, cfg)


def main():
    a = finish_args(parser().parse_args())
    os.makedirs(a.out_dir, exist_ok=True)
    cfg = make_config(a)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    dt = DTYPES[a.dtype]
    w = collections.OrderedDict((k, v.to(dt)) for k, v in make_weights(a, cfg).items())
    write_safetensors(os.path.join(a.out_dir, "model.safetensors"), w, {"format": "pt"})


if __name__ == "__main__":
    main()
