#!/usr/bin/env python3
"""Checks that BlinkDL's .pth and fla-hub's folder of one model are the same model.

  /usr/bin/python3 tests/rwkv7/check_layouts.py                 (the committed pairs)
  /usr/bin/python3 tests/rwkv7/check_layouts.py FILE.pth FLA_DIR

For each pair (the fla folder converted from the .pth by make_fixtures.py, with the mapping of
fla's utils/convert_from_rwkv7.py):
  1. reference.py's two loaders, which share no name mapping, must give the same weights bit for
     bit (every tensor, after the LoRA transposes and [1, 1, C] squeezes are undone);
  2. the float64 mean NLL over prompt_ids.txt must agree to 1e-12 relative, and the greedy
     continuation exactly, when the .pth is run under the rules the fla folder implies (ln_x eps
     head_dim * norm_eps, LayerNorm eps norm_eps, fla's l2_norm when fuse_norm is true);
  3. a negative control: the fla model with x_r and x_w swapped in one layer must miss (2) by
     more than 1e-9, so the comparison can see one misread tensor.
It also prints each layout's NLL under its own rules and their difference: that difference is
what the publishers' code disagrees on (docs/rwkv7.md), not an error.
Exit status 1 on any mismatch.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import reference  # noqa: E402
from pyref import parse_ids  # noqa: E402

TOL = 1e-12
N_GREEDY = 8


def committed_pairs():
    import make_fixtures
    return [(os.path.join(HERE, opt["from"]), os.path.join(HERE, name))
            for name, (kind, _s, _seed, _d, opt) in make_fixtures.FIXTURES.items() if kind == "fla"]


def weights(m):
    """(name, tensor) of every weight the model computes with, in a fixed order."""
    out = [("emb", m.emb), ("ln0.w", m.ln0[0]), ("ln0.b", m.ln0[1]),
           ("ln_out.w", m.ln_out[0]), ("ln_out.b", m.ln_out[1]), ("head", m.head)]
    for i, d in enumerate(m.layers):
        for k in reference.LAYER_KEYS:
            v = d[k]
            if v is None:
                continue
            if isinstance(v, tuple):
                out += [(f"{i}.{k}.w", v[0]), (f"{i}.{k}.b", v[1])]
            else:
                out.append((f"{i}.{k}", v))
    return out


def rel(a, b):
    return abs(a - b) / abs(b)


def check_pair(pth, fla, ids):
    bad = []
    mp, mf = reference.load(pth), reference.load(fla)
    name = f"{os.path.basename(pth)} vs {os.path.basename(fla)}"
    # 1. The same weights, bit for bit.
    wp, wf = weights(mp), weights(mf)
    if [n for n, _ in wp] != [n for n, _ in wf]:
        bad.append("the two loaders give different sets of weights")
    else:
        differ = [n for (n, a), (_, b) in zip(wp, wf) if a.shape != b.shape or not torch.equal(a, b)]
        if differ:
            bad.append(f"weights differ: {differ[:6]}")
    print(f"{name}: {len(wp)} weight tensors, {'identical' if not bad else 'DIFFERENT'}")
    # 2. The same NLL and greedy tokens under one set of rules.
    native_p, native_f = reference.evaluate(mp, ids, N_GREEDY)[0], reference.evaluate(mf, ids, N_GREEDY)[0]
    mp.rules = reference.Rules(mf.rules.ln_eps, mf.rules.lnx_eps, mf.rules.l2, mf.rules.decay_scale)
    same_rules = reference.evaluate(mp, ids, N_GREEDY)[0]
    r = rel(same_rules["mean_nll"], native_f["mean_nll"])
    ok = r <= TOL and same_rules["greedy"] == native_f["greedy"]
    print(f"  under fla's rules {mf.rules.as_dict()}: .pth {same_rules['mean_nll']:.17g}, "
          f"fla {native_f['mean_nll']:.17g}, rel {r:.3g}, greedy {'equal' if same_rules['greedy'] == native_f['greedy'] else 'DIFFERENT'}"
          f" -> {'ok' if ok else 'FAIL'}")
    if not ok:
        bad.append(f"NLL or greedy differ under the same rules (rel {r:.3g})")
    print(f"  each under its own rules: .pth {native_p['mean_nll']:.17g}, fla {native_f['mean_nll']:.17g}, "
          f"rel {rel(native_p['mean_nll'], native_f['mean_nll']):.3g} (the publishers' disagreement)")
    # 3. Negative control.
    d = mf.layers[-1]
    d["x_r"], d["x_w"] = d["x_w"], d["x_r"]
    swapped = reference.mean_nll(reference.forward(mf, ids)[0], ids)
    r = rel(swapped, same_rules["mean_nll"])
    print(f"  negative control (x_r <-> x_w in the last layer): rel {r:.3g} -> {'ok' if r > 1e-9 else 'FAIL'}")
    if r <= 1e-9:
        bad.append("the comparison does not see a swapped tensor")
    return bad


def main():
    with open(os.path.join(HERE, "prompt_ids.txt")) as f:
        ids = parse_ids(f.read())
    pairs = [tuple(sys.argv[1:3])] if len(sys.argv) == 3 else committed_pairs()
    if len(sys.argv) not in (1, 3):
        raise SystemExit(__doc__)
    failures = []
    for pth, fla in pairs:
        failures += check_pair(pth, fla, ids)
    print("check_layouts:", "FAILED: " + "; ".join(failures) if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
