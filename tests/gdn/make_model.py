#!/usr/bin/env python3
"""Writes one random-weight Gated DeltaNet checkpoint: config.json + model.safetensors in
Qwen3.5's Hugging Face layout (model_type qwen3_5 with text_config and vision_config, or
qwen3_5_text) or in fla's (gated_deltanet, delta_net), from a spec (a JSON object; SPECS in
make_fixtures.py are the committed ones).

  /usr/bin/python3 tests/gdn/make_model.py OUT_DIR '{"kind": "qwen35", "layers": "LLLF", ...}'

Weights are drawn in float32 from a seeded torch.Generator in one fixed order (the order of the
modules, layer by layer) and then cast to the spec's dtype, so a spec and its bf16 copy are one
model rounded. Scales: every projection's output has about unit variance for unit-RMS input;
decays exp(-A softplus(a + dt_bias)) spread over about (0.2, 0.9995) with A in (0.5, 16) and
softplus(dt_bias) in (0.001, 0.1); betas sigmoid(N(0, 1.5^2)); norms' effective weights
1 +- 0.1; the logits' standard deviation about spec["logit_std"] (default 3); spec["gain"]
scales what each layer adds to the residual stream (tied fixtures use 3, or the model would
mostly predict its input token, whose embedding is also its head row).
"""

import collections
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import Draw, write_safetensors  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TORCH_DTYPE = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}

QWEN_DEFAULTS = dict(hidden=64, vocab=300, layers="LLLF", intermediate=64, Hk=2, Hv=4, dk=16, dv=16,
                     conv=4, heads=2, kv_heads=1, head_dim=32, rope_theta=10000000.0, prf=0.25,
                     eps=1e-6, tie=False, multimodal=True, extras=True, dtype="f32", seed=0,
                     logit_std=3.0, gain=1.0, f32_tensors=(), shards=1)
FLA_DEFAULTS = dict(hidden=64, vocab=300, layers=2, intermediate=64, heads=2, v_heads=None,
                    head_dim=16, expand_k=0.5, expand_v=1.0, use_gate=True, short_conv=True,
                    neg_eigval=False, with_D=False, old_config=False, qk_activation="silu",
                    qk_norm="l2", use_beta=True, attn=None, tie=False, eps=1e-6, dtype="f32",
                    seed=0, logit_std=3.0, gain=1.0, f32_tensors=(), shards=1)


def decay_params(r, n):
    """A_log, dt_bias for n value heads: A in (0.5, 16) and dt = softplus(dt_bias) in
    (0.001, 0.1), both log-uniform (fla's initialisation draws dt the same way)."""
    A_log = r.rand(n, lo=math.log(0.5), hi=math.log(16.0))
    dt = torch.exp(r.rand(n, lo=math.log(1e-3), hi=math.log(0.1)))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # the inverse of softplus
    return A_log, dt_bias


def head_scale(r, D, std, tie, zero_centred):
    """(final norm weight, head or None): logits of about std when the input is unit RMS."""
    target = std / D ** 0.5 if tie else std
    w = target * r.randn(D, std=0.1, mean=1.0)
    return (w - 1.0) if zero_centred else w


# --------------------------------------------------------------------------------------------
# Qwen3.5


def qwen_config(s):
    D, H = s["hidden"], s["heads"]
    types = ["full_attention" if c == "F" else "linear_attention" for c in s["layers"]]
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": s["head_dim"], "hidden_act": "silu", "hidden_size": D,
        "initializer_range": 0.02, "intermediate_size": s["intermediate"], "layer_types": types,
        "linear_conv_kernel_dim": s["conv"], "linear_key_head_dim": s["dk"],
        "linear_num_key_heads": s["Hk"], "linear_num_value_heads": s["Hv"],
        "linear_value_head_dim": s["dv"], "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 4096, "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1 if s["extras"] else 0, "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": H, "num_hidden_layers": len(types), "num_key_value_heads": s["kv_heads"],
        "partial_rotary_factor": s["prf"], "rms_norm_eps": s["eps"],
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [2, 1, 1],
                            "partial_rotary_factor": s["prf"], "rope_theta": s["rope_theta"],
                            "rope_type": "default"},
        "tie_word_embeddings": s["tie"], "use_cache": True, "vocab_size": s["vocab"],
        "dtype": TORCH_DTYPE[s["dtype"]],
    }
    for n in range(1, len(types) + 1):  # the interval the layer types follow, if they follow one
        if types == ["linear_attention" if (i + 1) % n else "full_attention" for i in range(len(types))]:
            text["full_attention_interval"] = n
            break
    if not s["multimodal"]:
        text["architectures"] = ["Qwen3_5ForCausalLM"]
        return dict(sorted(text.items()))
    vision = {"deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh",
              "hidden_size": 16, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 32,
              "model_type": "qwen3_5", "num_heads": 2, "num_position_embeddings": 16,
              "out_hidden_size": D, "patch_size": 2, "spatial_merge_size": 2, "temporal_patch_size": 2}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "image_token_id": 296,
            "model_type": "qwen3_5", "text_config": dict(sorted(text.items())),
            "tie_word_embeddings": s["tie"], "transformers_version": "5.0.0",
            "video_end_token_id": 299, "video_token_id": 297, "vision_config": vision,
            "vision_end_token_id": 295, "vision_start_token_id": 294}


def qwen_weights(s):
    r = Draw(s["seed"])
    D, V, I = s["hidden"], s["vocab"], s["intermediate"]
    Hk, Hv, dk, dv, K = s["Hk"], s["Hv"], s["dk"], s["dv"], s["conv"]
    H, KV, hd = s["heads"], s["kv_heads"], s["head_dim"]
    pre = "model.language_model." if s["multimodal"] else "model."
    w = collections.OrderedDict()
    w[pre + "embed_tokens.weight"] = r.randn(V, D)
    zc = lambda n: r.randn(n, std=0.1)  # noqa: E731  zero-centred: the effective weight is 1 + w
    for i, c in enumerate(s["layers"]):
        p = f"{pre}layers.{i}."
        w[p + "input_layernorm.weight"] = zc(D)
        if c == "F":
            a = p + "self_attn."
            w[a + "q_proj.weight"] = r.randn(2 * H * hd, D, std=D ** -0.5)
            w[a + "k_proj.weight"] = r.randn(KV * hd, D, std=D ** -0.5)
            w[a + "v_proj.weight"] = r.randn(KV * hd, D, std=D ** -0.5)
            w[a + "q_norm.weight"] = zc(hd)
            w[a + "k_norm.weight"] = zc(hd)
            w[a + "o_proj.weight"] = r.randn(D, H * hd, std=s["gain"] * (H * hd) ** -0.5)
        else:
            a = p + "linear_attn."
            kd, vd = Hk * dk, Hv * dv
            w[a + "in_proj_qkv.weight"] = r.randn(2 * kd + vd, D, std=D ** -0.5)
            w[a + "in_proj_z.weight"] = r.randn(vd, D, std=D ** -0.5)
            w[a + "in_proj_b.weight"] = r.randn(Hv, D, std=1.5 * D ** -0.5)
            w[a + "in_proj_a.weight"] = r.randn(Hv, D, std=0.5 * D ** -0.5)
            w[a + "conv1d.weight"] = r.randn(2 * kd + vd, 1, K, std=0.5)
            w[a + "A_log"], w[a + "dt_bias"] = decay_params(r, Hv)
            w[a + "norm.weight"] = r.randn(dv, std=0.1, mean=1.0)
            w[a + "out_proj.weight"] = r.randn(D, vd, std=s["gain"] * vd ** -0.5)
        w[p + "post_attention_layernorm.weight"] = zc(D)
        w[p + "mlp.gate_proj.weight"] = r.randn(I, D, std=D ** -0.5)
        w[p + "mlp.up_proj.weight"] = r.randn(I, D, std=D ** -0.5)
        w[p + "mlp.down_proj.weight"] = r.randn(D, I, std=s["gain"] * I ** -0.5)
    w[pre + "norm.weight"] = head_scale(r, D, s["logit_std"], s["tie"], True)
    if not s["tie"]:
        w["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    if s["extras"]:
        # A few of the tensors a real checkpoint carries beside the text model; readers skip them
        # by prefix (model.visual.* is the vision tower, mtp.* the multi-token-prediction head).
        w["model.visual.patch_embed.proj.weight"] = r.randn(16, 3, 2, 2, 2, std=0.02)
        w["model.visual.patch_embed.proj.bias"] = r.randn(16, std=0.02)
        w["model.visual.pos_embed.weight"] = r.randn(16, 16, std=0.02)
        w["model.visual.blocks.0.attn.qkv.weight"] = r.randn(48, 16, std=0.02)
        w["model.visual.merger.linear_fc2.weight"] = r.randn(D, 64, std=0.02)
        w["mtp.fc.weight"] = r.randn(D, 2 * D, std=0.02)
        w["mtp.pre_fc_norm_embedding.weight"] = zc(D)
        w["mtp.pre_fc_norm_hidden.weight"] = zc(D)
        w["mtp.layers.0.input_layernorm.weight"] = zc(D)
        w["mtp.norm.weight"] = zc(D)
    return w


# --------------------------------------------------------------------------------------------
# fla


def fla_config(s):
    gdn = s["kind"] == "gated_deltanet"
    c = {"architectures": ["GatedDeltaNetForCausalLM" if gdn else "DeltaNetForCausalLM"],
         "attn_mode": "chunk", "bos_token_id": 1, "conv_size": 4, "eos_token_id": 2,
         "fuse_cross_entropy": True, "fuse_norm": True, "fuse_swiglu": True, "hidden_act": "swish",
         "hidden_ratio": 4, "hidden_size": s["hidden"], "initializer_range": 0.02,
         "intermediate_size": s["intermediate"], "max_position_embeddings": 2048,
         "model_type": s["kind"], "norm_eps": s["eps"], "num_heads": s["heads"],
         "num_hidden_layers": s["layers"], "tie_word_embeddings": s["tie"],
         "torch_dtype": TORCH_DTYPE[s["dtype"]], "use_cache": True, "use_gate": s["use_gate"],
         "use_short_conv": s["short_conv"], "vocab_size": s["vocab"], "attn": s["attn"]}
    if gdn:
        c.update(expand_v=s["expand_v"], head_dim=s["head_dim"])
        if not s["old_config"]:  # fields fla added after its first gated_deltanet (Dec 2024)
            c.update(allow_neg_eigval=s["neg_eigval"], num_v_heads=s["v_heads"],
                     fuse_linear_cross_entropy=False, use_l2warp=False)
        elif s["neg_eigval"]:
            c["allow_neg_eigval"] = True
    else:
        c.update(expand_k=s["expand_k"], expand_v=s["expand_v"], allow_neg_eigval=s["neg_eigval"],
                 qk_activation=s["qk_activation"], qk_norm=s["qk_norm"], use_beta=s["use_beta"],
                 use_output_norm=True)
    return dict(sorted(c.items()))


def fla_weights(s):
    r = Draw(s["seed"])
    D, V, I = s["hidden"], s["vocab"], s["intermediate"]
    gdn = s["kind"] == "gated_deltanet"
    if gdn:
        Hk, Hv, dk = s["heads"], s["v_heads"] or s["heads"], s["head_dim"]
        dv = int(dk * s["expand_v"])
    else:
        Hk = Hv = s["heads"]
        dk, dv = int(D * s["expand_k"]) // Hk, int(D * s["expand_v"]) // Hk
    kd, vd = Hk * dk, Hv * dv
    attn_layers = set(s["attn"]["layers"]) if s["attn"] else set()
    w = collections.OrderedDict()
    w["model.embeddings.weight"] = r.randn(V, D)
    pn = lambda n: r.randn(n, std=0.1, mean=1.0)  # noqa: E731
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        w[p + "attn_norm.weight"] = pn(D)
        a = p + "attn."
        if i in attn_layers:
            Ha = s["attn"]["num_heads"]
            kv = s["attn"].get("num_kv_heads", Ha) * (D // Ha)
            w[a + "q_proj.weight"] = r.randn(D, D, std=D ** -0.5)
            w[a + "k_proj.weight"] = r.randn(kv, D, std=D ** -0.5)
            w[a + "v_proj.weight"] = r.randn(kv, D, std=D ** -0.5)
            w[a + "o_proj.weight"] = r.randn(D, D, std=s["gain"] * D ** -0.5)
        else:
            w[a + "q_proj.weight"] = r.randn(kd, D, std=D ** -0.5)
            w[a + "k_proj.weight"] = r.randn(kd, D, std=D ** -0.5)
            w[a + "v_proj.weight"] = r.randn(vd, D, std=D ** -0.5)
            if gdn:
                w[a + "a_proj.weight"] = r.randn(Hv, D, std=0.5 * D ** -0.5)
            if gdn or s["use_beta"]:
                w[a + "b_proj.weight"] = r.randn(Hv, D, std=1.5 * D ** -0.5)
            if gdn:
                w[a + "A_log"], w[a + "dt_bias"] = decay_params(r, Hv)
                if s["with_D"]:
                    w[a + "D"] = torch.ones(Hk)
            if s["short_conv"]:
                for n, ch in (("q", kd), ("k", kd), ("v", vd)):
                    w[a + f"{n}_conv1d.weight"] = r.randn(ch, 1, 4, std=0.5)
            if s["use_gate"]:
                w[a + "g_proj.weight"] = r.randn(vd, D, std=D ** -0.5)
            w[a + "o_norm.weight"] = pn(dv)
            w[a + "o_proj.weight"] = r.randn(D, vd, std=s["gain"] * vd ** -0.5)
        w[p + "mlp_norm.weight"] = pn(D)
        w[p + "mlp.gate_proj.weight"] = r.randn(I, D, std=D ** -0.5)
        w[p + "mlp.up_proj.weight"] = r.randn(I, D, std=D ** -0.5)
        w[p + "mlp.down_proj.weight"] = r.randn(D, I, std=s["gain"] * I ** -0.5)
    w["model.norm.weight"] = head_scale(r, D, s["logit_std"], s["tie"], False)
    if not s["tie"]:
        w["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    return w


def full_spec(spec):
    base = QWEN_DEFAULTS if spec["kind"] == "qwen35" else FLA_DEFAULTS
    unknown = set(spec) - set(base) - {"kind"}
    if unknown:
        raise ValueError(f"unknown spec fields {sorted(unknown)}")
    s = dict(base)
    s.update(spec)
    return s


def build(spec):
    """(config dict, float32 weights in draw order) for a spec."""
    s = full_spec(spec)
    if s["kind"] == "qwen35":
        return qwen_config(s), qwen_weights(s)
    return fla_config(s), fla_weights(s)


def write(out_dir, spec):
    s = full_spec(spec)
    cfg, w = build(spec)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    w = cast(s, w)
    if s["shards"] == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), w, {"format": "pt"})
        return
    # As transformers' save_pretrained shards: tensors in module order, a new file when the
    # running size passes total / shards; model.safetensors.index.json maps each name to its file.
    total = sum(t.numel() * t.element_size() for t in w.values())
    n = s["shards"]
    parts, size = [collections.OrderedDict()], 0
    for k, t in w.items():
        if size >= total * len(parts) / n and len(parts) < n:
            parts.append(collections.OrderedDict())
        parts[-1][k] = t
        size += t.numel() * t.element_size()
    weight_map = {}
    for j, part in enumerate(parts):
        fname = f"model-{j + 1:05d}-of-{n:05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fname), part, {"format": "pt"})
        weight_map.update({k: fname for k in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


def cast(s, w):
    """The weights in the spec's dtype, except those whose names end with one of
    spec["f32_tensors"] (Qwen3.5's published bf16 checkpoints keep linear_attn.A_log and
    linear_attn.norm.weight in float32)."""
    dt = DTYPES[s["dtype"]]
    keep = tuple(s["f32_tensors"])
    return collections.OrderedDict((k, v if keep and k.endswith(keep) else v.to(dt)) for k, v in w.items())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(sys.argv[1], json.loads(sys.argv[2]))
