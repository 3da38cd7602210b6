#!/usr/bin/env python3
"""Writes a random-weight Based checkpoint in the released (hazyresearch/based-360m) layout.

  python3 tests/based/make_model.py OUT_DIR [--d-model 64 --layers 6 --heads 4 ...]

OUT_DIR/config.json        GPT2Config-style json as the hub's (model_type "gpt2", hydra
                           "_target_" dicts for the three mixers)
OUT_DIR/pytorch_model.bin  torch.save of a Lightning-style state dict: keys prefixed "model.",
                           the tied embedding under both transformer.embeddings.word_embeddings.weight
                           and lm_head.weight (one shared storage), plus a 0-d dummy
                           "model.train_metrics.num-tokens.count" buffer
OUT_DIR/model.safetensors  (--safetensors) the same tensors without the prefix and without the
                           metrics buffer; the tied matrix only as lm_head.weight (as candle's
                           refs/pr/1 files), no transformer.embeddings.word_embeddings.weight

Weights are drawn in float32 from a seeded torch.Generator and then cast to --dtype, so the
same seed and shape at f32 and bf16 give the bf16 rounding of the same model.
"""

import argparse
import collections
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import int_list, write_safetensors  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
def make_config(a):
    D = a.d_model
    n_inner = a.n_inner or 2 * D
    eos = a.vocab - 1
    return {
        "_name_or_path": "hazyresearch/based-360m (random weights: recur tests/based/make_model.py)",
        "activation_function": "swiglu",
        "alt_mixer": {
            "_target_": "based.models.mixers.linear_attention.LinearAttention",
            "feature_dim": a.feature_dim,
            "feature_map": {
                "_target_": "based.models.mixers.linear_attention.TaylorExp",
                "input_dim": a.feature_dim,
            },
            "l_max": 2048,
            "num_heads": a.la_heads or a.heads,
            "parallel_implementation": "fla_parallel",
        },
        "alt_mixer_2": {
            "_target_": "based.models.mixers.slide_attention.SlidingAttention",
            "causal": True,
            "num_heads": a.heads,
            "window_size": a.window_size,
        },
        "alt_mixer_2_layers": int_list(a.swa_layers),
        "alt_mixer_layers": int_list(a.la_layers),
        "architectures": ["GPTLMHeadModel"],
        "attn_pdrop": 0,
        "bos_token_id": eos,
        "embd_pdrop": 0,
        "eos_token_id": eos,
        "fused_bias_fc": True,
        "fused_dropout_add_ln": True,
        "fused_mlp": False,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "max_position_embeddings": 0,
        "mixer": {
            "_target_": "based.models.mixers.convolution.BaseConv",
            "expand_proj": 4,
            "kernel_sizes": 3,
            "l_max": 2048,
            "use_bias": True,
        },
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "model_type": "gpt2",
        "n_embd": D,
        "n_head": a.heads,
        "n_inner": n_inner,
        "n_layer": a.layers,
        "n_positions": 2048,
        "out_proj_bias": False,
        "pad_vocab_size_multiple": a.pad_multiple,
        "qkv_proj_bias": False,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0,
        "residual_in_fp32": True,
        "rms_norm": True,
        "rotary_emb_fraction": 1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "special_initializer": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "tie_word_embeddings": True,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[a.dtype],
        "use_cache": True,
        "use_flash_attn": True,
        "vocab_size": a.vocab,
    }


def make_weights(a, cfg):
    """Ordered dict of unprefixed name -> float32 tensor (the model's state_dict order)."""
    g = torch.Generator().manual_seed(a.seed)

    def randn(*shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean

    D = a.d_model
    V_pad = math.ceil(a.vocab / a.pad_multiple) * a.pad_multiple
    Hm = (cfg["n_inner"] + 255) // 256 * 256 if a.round_inner else cfg["n_inner"]
    H_la = cfg["alt_mixer"]["num_heads"]
    F = a.feature_dim
    Di = 2 * D
    la, swa = set(cfg["alt_mixer_layers"]), set(cfg["alt_mixer_2_layers"])
    w = collections.OrderedDict()
    E = randn(V_pad, D, std=1.0)
    w["transformer.embeddings.word_embeddings.weight"] = E
    for i in range(a.layers):
        p = f"transformer.layers.{i}."
        m = p + "mixer."
        if i in swa:
            w[m + "Wqkv.weight"] = randn(3 * D, D, std=D ** -0.5)
            w[m + "out_proj.weight"] = randn(D, D, std=D ** -0.5)
        elif i in la:
            w[m + "proj_q.weight"] = randn(H_la * F, D, std=D ** -0.5)
            w[m + "proj_k.weight"] = randn(H_la * F, D, std=D ** -0.5)
            w[m + "proj_v.weight"] = randn(D, D, std=D ** -0.5)
            w[m + "out_proj.weight"] = randn(D, D, std=D ** -0.5)
        else:
            w[m + "in_proj.weight"] = randn(2 * Di, D, std=D ** -0.5)
            w[m + "in_proj.bias"] = randn(2 * Di, std=0.1)
            w[m + "out_proj.weight"] = randn(D, Di, std=Di ** -0.5)
            w[m + "out_proj.bias"] = randn(D, std=0.1)
            w[m + "conv.conv.weight"] = randn(Di, 1, 3, std=0.3)
            if a.conv_bias:
                w[m + "conv.conv.bias"] = randn(Di, std=0.1)
        w[p + "norm1.weight"] = randn(D, std=0.1, mean=1.0)
        w[p + "norm2.weight"] = randn(D, std=0.1, mean=1.0)
        w[p + "mlp.fc1.weight"] = randn(2 * Hm, D, std=D ** -0.5)
        w[p + "mlp.fc2.weight"] = randn(D, Hm, std=Hm ** -0.5)
    # ln_f scaled so that logits = rms(x) @ E^T (E std 1) have std ~ lnf_scale * ... ~ 2:
    # the logit std is |ln_f| * 1, so ln_f ~ 2/sqrt(D) keeps the NLL a few nats above ln(V).
    scale = a.logit_std / math.sqrt(D)
    w["transformer.ln_f.weight"] = randn(D, std=0.1, mean=1.0) * scale
    w["lm_head.weight"] = E  # tied: the same tensor object
    return w

def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4, help="n_head: the window layers' heads")
    ap.add_argument("--la-heads", type=int, default=0, help="Taylor layers' num_heads (default --heads)")
    ap.add_argument("--feature-dim", type=int, default=8, help="Taylor feature_dim = input_dim")
    ap.add_argument("--window-size", type=int, default=16, help="keys seen: window_size//2 + 1")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--pad-multiple", type=int, default=8)
    ap.add_argument("--n-inner", type=int, default=0, help="default 2*d_model")
    ap.add_argument("--round-inner", action="store_true",
                    help="round the MLP width up to a multiple of 256 as GatedMlp does")
    ap.add_argument("--la-layers", default="1,4")
    ap.add_argument("--swa-layers", default="2,5")
    ap.add_argument("--conv-bias", action="store_true", help="add conv.conv.bias (not in the releases)")
    ap.add_argument("--logit-std", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--safetensors", action="store_true")
    return ap


def build(argv):
    """(config dict, float32 weights) for make_model's command-line arguments, without files."""
    a = parser().parse_args(["-"] + list(argv))
    cfg = make_config(a)
    return cfg, make_weights(a, cfg)


def main():
    ap = parser()
    a = ap.parse_args()
    if a.d_model % a.heads or a.d_model % (a.la_heads or a.heads):
        ap.error("d_model must be a multiple of the head counts")
    os.makedirs(a.out_dir, exist_ok=True)
    cfg = make_config(a)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    dt = DTYPES[a.dtype]
    w32 = make_weights(a, cfg)
    w = collections.OrderedDict()
    E = w32["transformer.embeddings.word_embeddings.weight"].to(dt)
    for k, v in w32.items():
        w[k] = E if v is w32["transformer.embeddings.word_embeddings.weight"] else v.to(dt)
    assert w["lm_head.weight"] is w["transformer.embeddings.word_embeddings.weight"]
    sd = collections.OrderedDict(("model." + k, v) for k, v in w.items())
    sd["model.train_metrics.num-tokens.count"] = torch.tensor(123456.0)  # 0-d float32 buffer
    meta = collections.OrderedDict()
    meta[""] = {"version": 1}
    meta["model"] = {"version": 1}
    meta["train_metrics"] = {"version": 1}
    sd._metadata = meta
    torch.save(sd, os.path.join(a.out_dir, "pytorch_model.bin"))
    if a.safetensors:
        st = collections.OrderedDict((k, v) for k, v in w.items()
                                     if k != "transformer.embeddings.word_embeddings.weight")
        write_safetensors(os.path.join(a.out_dir, "model.safetensors"), st, {"format": "pt"})


if __name__ == "__main__":
    main()
