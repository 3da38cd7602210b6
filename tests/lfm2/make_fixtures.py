#!/usr/bin/env python3
"""Writes the LFM2 fixtures: random-weight checkpoints (config.json as each config form has it,
model.safetensors), then expected.json and expected_nll.txt from reference.py.

    make_fixtures.py            write everything here
    make_fixtures.py --check    write into a temporary directory and compare byte for byte
Run with Debian's torch: /usr/bin/python3.
"""

import filecmp
import json
import math
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import dumps, parse_ids, write_safetensors  # noqa: E402

import reference  # noqa: E402

PROMPT = "prompt_ids.txt"

# The first form, as Liquid published LFM2 (LFM2-1.2B's keys, the training code's block_* and
# conv_* beside transformers' own; no tie_word_embeddings: tied by default).
FIRST = {
    "architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": True, "block_dim": 64,
    "block_ff_dim": 192, "block_ffn_dim_multiplier": 1.0, "block_mlp_init_scale": 1.0,
    "block_multiple_of": 16, "block_norm_eps": 1e-05, "block_out_init_scale": 1.0,
    "block_use_swiglu": True, "block_use_xavier_init": True, "bos_token_id": 1,
    "conv_L_cache": 3, "conv_bias": False, "conv_dim": 64, "conv_dim_out": 64,
    "conv_use_xavier_init": True, "eos_token_id": 7, "full_attn_idxs": [1, 3],
    "hidden_size": 64, "initializer_range": 0.02, "max_position_embeddings": 128000,
    "model_type": "lfm2", "norm_eps": 1e-05, "num_attention_heads": 4, "num_heads": 4,
    "num_hidden_layers": 4, "num_key_value_heads": 2, "pad_token_id": 0, "rope_theta": 1000000.0,
    "torch_dtype": "float32", "use_cache": True, "use_pos_enc": True, "vocab_size": 256}

# The later form, as LFM2.5 has it (layer_types, intermediate_size, rope_parameters,
# full_attn_idxs null), with every option away from its default: untied, biases, 4 taps, a
# head_dim that is not hidden / heads, one kv head, a multiplier of 1.5, eps 1e-6; bfloat16.
LATER = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 200, "num_hidden_layers": 5,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
    "layer_types": ["conv", "conv", "full_attention", "conv", "full_attention"],
    "full_attn_idxs": None, "conv_L_cache": 4, "conv_bias": True,
    "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 16,
    "norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "tie_word_embeddings": False, "max_position_embeddings": 128000, "dtype": "bfloat16",
    "eos_token_id": 7, "pad_token_id": 0, "bos_token_id": 1, "use_cache": True}

# transformers' aliases: tie_embedding, theta; a null multiplier (the width not rounded); the
# first layer attention, MHA.
ALIASES = {
    "model_type": "lfm2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 100,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 2,
    "full_attn_idxs": [0], "block_ffn_dim_multiplier": None, "tie_embedding": True,
    "theta": 500000.0}

FIXTURES = {
    "lfm2-first": ("the first config form (full_attn_idxs, block_ff_dim, top-level rope_theta, "
                   "the training code's keys), tied by default, GQA 4 over 2, multiplier 1.0 "
                   "rounded to 16; float32", FIRST, torch.float32, 1),
    "lfm2.5-later": ("the later form (layer_types, intermediate_size, rope_parameters, "
                     "full_attn_idxs null), untied, conv_bias, 4 taps, head_dim 8 beside hidden "
                     "64, 4 heads over 1 kv head, multiplier 1.5, eps 1e-6; bfloat16",
                     LATER, torch.bfloat16, 2),
    "lfm2-aliases": ("tie_embedding and theta (transformers' aliases), a null multiplier, "
                     "attention first, MHA; float32", ALIASES, torch.float32, 3),
}


def weights(cfg, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", D // H)
    I, L = reference.mlp_width(cfg), cfg.get("conv_L_cache", 3)
    bias = cfg.get("conv_bias", False)

    def mat(n, k):
        return torch.randn(n, k, generator=g, dtype=torch.float64) / math.sqrt(k)

    def norm(n):
        return 1 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)

    def small(*shape):
        return 0.1 * torch.randn(*shape, generator=g, dtype=torch.float64)

    # std 0.3: a tied head of std-1 rows would make logits of std 8 (an NLL near 30).
    t = {"model.embed_tokens.weight": 0.3 * torch.randn(V, D, generator=g, dtype=torch.float64)}
    for i, kind in enumerate(reference.layer_types(cfg)):
        p = f"model.layers.{i}."
        t[p + "operator_norm.weight"] = norm(D)
        if kind == "full_attention":
            a = p + "self_attn."
            t[a + "q_proj.weight"] = mat(H * d, D)
            t[a + "k_proj.weight"] = mat(Hkv * d, D)
            t[a + "v_proj.weight"] = mat(Hkv * d, D)
            t[a + "out_proj.weight"] = mat(D, H * d)
            t[a + "q_layernorm.weight"] = norm(d)
            t[a + "k_layernorm.weight"] = norm(d)
        else:
            a = p + "conv."
            t[a + "in_proj.weight"] = mat(3 * D, D)
            t[a + "conv.weight"] = torch.randn(D, 1, L, generator=g, dtype=torch.float64) / math.sqrt(L)
            t[a + "out_proj.weight"] = mat(D, D)
            if bias:
                t[a + "in_proj.bias"] = small(3 * D)
                t[a + "conv.bias"] = small(D)
                t[a + "out_proj.bias"] = small(D)
        t[p + "ffn_norm.weight"] = norm(D)
        t[p + "feed_forward.w1.weight"] = mat(I, D)
        t[p + "feed_forward.w3.weight"] = mat(I, D)
        t[p + "feed_forward.w2.weight"] = mat(D, I)
    t["model.embedding_norm.weight"] = norm(D)
    if not cfg.get("tie_embedding", cfg.get("tie_word_embeddings", True)):
        t["lm_head.weight"] = mat(V, D)
    return {k: v.to(dtype) for k, v in t.items()}


def write_all(out):
    ids = parse_ids(open(os.path.join(HERE, PROMPT)).read())
    exp = {"about": "LFM2 fixtures: reference.py (float64) on each directory; mean_nll over the "
                    "n-1 predictions of ids[1:] from ids[:-1]; logits: every logit at the listed "
                    "positions; greedy_ids: 16 argmax ids fed back after the prompt, "
                    "greedy_min_margin the smallest top-1/top-2 gap among them",
           "torch": torch.__version__, "prompt_file": PROMPT, "fixtures": {}}
    nll_lines = []
    for name, (what, cfg, dtype, seed) in FIXTURES.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), weights(cfg, dtype, seed))
        r = reference.evaluate(reference.load(d), ids)
        exp["fixtures"][name] = {"what": what, "layers": "".join(
            "A" if k == "full_attention" else "C" for k in reference.layer_types(cfg)),
            "mlp_width": reference.mlp_width(cfg), **r}
        nll_lines.append(f"{name} {r['mean_nll']!r}\n")
    with open(os.path.join(out, "expected.json"), "w") as f:
        f.write(dumps(exp) + "\n")
    with open(os.path.join(out, "expected_nll.txt"), "w") as f:
        f.writelines(nll_lines)


def main(argv):
    if argv[:1] == ["--check"]:
        tmp = tempfile.mkdtemp()
        try:
            shutil.copy(os.path.join(HERE, PROMPT), tmp)
            write_all(tmp)
            bad = [os.path.relpath(os.path.join(r, f), tmp) for r, _, fs in os.walk(tmp) for f in fs
                   if not filecmp.cmp(os.path.join(r, f),
                                      os.path.join(HERE, os.path.relpath(os.path.join(r, f), tmp)),
                                      shallow=False)]
        finally:
            shutil.rmtree(tmp)
        if bad:
            sys.exit(f"differ from the committed files: {bad}")
        print("make_fixtures: every file regenerates byte for byte")
        return
    write_all(HERE)


if __name__ == "__main__":
    main(sys.argv[1:])
