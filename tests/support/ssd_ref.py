"""The Mamba-2 (SSD) layer in float64, as the references of the families built on it share it
(tests/mamba2 for Mamba-2 and Granite 4.0-H, tests/nemotron_h, tests/falcon_h1): its random
weights, the two scans (token by token, as transformers' cached step; the paper's chunked "SSD
minimal" form as a second source summing in another order), the middle of the mixer, the
gated norm and the whole mixer; and the figures each of those references writes for a fixture.

Imported by path, as pyref: each script puts tests/support on sys.path first.
"""

import math

import torch

from pyref import dense, greedy, mean_nll

# Positions and ids whose logits expected.json keeps (recur's test compares every one).
PROBE_IDS = [0, 10, 32, 65, 101, 116, 200, 299]


def draw_ssd(r, t, q, heads, conv_dim, conv, conv_bias):
    """The convolution's and the scan's random weights of the mixer under the prefix q, in the
    order the fixtures were drawn in: dt = softplus(dt_bias) log-uniform in (0.001, 0.1) and A
    in (1, 16), mamba_ssm's init."""
    t[q + "conv1d.weight"] = r.randn(conv_dim, 1, conv, std=conv ** -0.5)
    if conv_bias:
        t[q + "conv1d.bias"] = r.randn(conv_dim, std=0.1)
    dt = torch.exp(r.rand(heads, lo=math.log(1e-3), hi=math.log(0.1)))
    t[q + "dt_bias"] = dt + torch.log(-torch.expm1(-dt))
    t[q + "A_log"] = r.rand(heads, lo=0.0, hi=math.log(16.0))
    t[q + "D"] = r.randn(heads, std=0.1, mean=1.0)


def gated_norm(y, z, w, groups, eps, before_gate):
    """mamba_ssm's rms_norm_ref with group_size = width / groups: y * silu(z) normed per group
    (or y normed, then times silu(z)). groups = 1 is transformers' MambaRMSNormGated."""
    silu_z = z * torch.sigmoid(z)
    if not before_gate:
        y = y * silu_z
    T, W = y.shape
    yg = y.reshape(T, groups, W // groups)
    out = (yg * torch.rsqrt((yg * yg).mean(-1, keepdim=True) + eps)).reshape(T, W) * w
    return out * silu_z if before_gate else out


def scan_recurrent(x, dt, A, B, C, Dskip):
    """Token by token, as transformers' cached step (and mamba_ssm's selective_state_update):
    S = S exp(dt A) + (dt x) B^T, y = S C + D x. x (T, H, P), dt (T, H), B, C (T, H, N)."""
    T, H, P = x.shape
    N = B.shape[-1]
    S = torch.zeros(H, P, N, dtype=x.dtype)
    ys = []
    for t in range(T):
        dA = torch.exp(dt[t] * A)                                   # (H)
        dBx = (dt[t][:, None] * x[t])[:, :, None] * B[t][:, None, :]  # (H, P, N)
        S = S * dA[:, None, None] + dBx
        ys.append(torch.einsum("hpn,hn->hp", S, C[t]) + Dskip[:, None] * x[t])
    return torch.stack(ys), S


def segsum(a):
    """(..., L) -> (..., L, L): sum of a over (j, i] below the diagonal, -inf above."""
    L = a.shape[-1]
    c = torch.cumsum(a, -1)
    s = c[..., :, None] - c[..., None, :]
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    return s.masked_fill(~mask, -math.inf)


def scan_chunked(x, dt, A, B, C, Dskip, block=8):
    """The paper's SSD minimal form (chunks of `block`: the intra-chunk quadratic part, the
    states passed between chunks): the second source, summing in another order."""
    T, H, P = x.shape
    pad = (-T) % block
    if pad:  # dt = 0 and x = 0 after the end: no decay, nothing added
        z = lambda t: torch.cat([t, torch.zeros((pad,) + t.shape[1:], dtype=t.dtype)])
        x, dt, B, C = z(x), z(dt), z(B), z(C)
    n = x.shape[0] // block
    X = (x * dt[..., None]).reshape(n, block, H, P)
    Ad = (dt * A).reshape(n, block, H).permute(2, 0, 1)          # (H, n, L)
    Bc, Cc = B.reshape(n, block, H, -1), C.reshape(n, block, H, -1)
    Acum = torch.cumsum(Ad, -1)
    Ldec = torch.exp(segsum(Ad))                                 # (H, n, L, L)
    Y_diag = torch.einsum("clhn,cshn,hcls,cshp->clhp", Cc, Bc, Ldec, X)
    decay_states = torch.exp(Acum[..., -1:] - Acum)              # (H, n, L)
    states = torch.einsum("clhn,hcl,clhp->chpn", Bc, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:1]), states])
    chunk_decay = torch.exp(segsum(torch.nn.functional.pad(Acum[..., -1], (1, 0))))  # (H, n+1, n+1)
    new_states = torch.einsum("hzc,chpn->zhpn", chunk_decay, states)
    states, final = new_states[:-1], new_states[-1]
    Y_off = torch.einsum("clhn,chpn,hcl->clhp", Cc, states, torch.exp(Acum))
    y = (Y_diag + Y_off).reshape(n * block, H, P)[:T]
    return y + Dskip[None, :, None] * x[:T], final


def ssd(t, q, xBC, dt_raw, H, P, N, G, limit, scan):
    """The middle of a Mamba-2 mixer (tensors under the prefix q): the causal convolution of
    xBC and its silu, dt, the scan and the D skip; y (T, H P)."""
    T = xBC.shape[0]
    inner = H * P
    w = t[q + "conv1d.weight"][:, 0, :]                       # (C, K)
    K = w.shape[1]
    padded = torch.cat([torch.zeros(K - 1, xBC.shape[1], dtype=xBC.dtype), xBC])
    conv = sum(padded[k:k + T] * w[:, k] for k in range(K))
    if q + "conv1d.bias" in t:
        conv = conv + t[q + "conv1d.bias"]
    conv = conv * torch.sigmoid(conv)
    xs = conv[:, :inner].reshape(T, H, P)
    B = conv[:, inner:inner + G * N].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    C = conv[:, inner + G * N:].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    dt = torch.nn.functional.softplus(dt_raw + t[q + "dt_bias"])
    dt = torch.clamp(dt, limit[0], limit[1])
    A = -torch.exp(t[q + "A_log"])
    y, _ = scan(xs, dt, A, B, C, t[q + "D"])
    return y.reshape(T, inner)


def mixer(m, q, h, scan=scan_recurrent, norm_groups=None):
    """One Mamba-2 mixer (tensors under the prefix q) over the normed rows h (T, D), as
    transformers' Mamba2Mixer and NemotronHMamba2Mixer compute it: m holds its tensors "t" and
    sizes "H", "P", "N", "G", the clamp "limit", the gated norm's "eps" and "norm_before_gate"
    (norm_groups: other groups than G for the norm)."""
    t, H, P, N, G = m["t"], m["H"], m["P"], m["N"], m["G"]
    inner = H * P
    proj = dense(t, q + "in_proj", h)
    z, xBC, dt_raw = proj[:, :inner], proj[:, inner:-H], proj[:, -H:]
    y = ssd(t, q, xBC, dt_raw, H, P, N, G, m["limit"], scan)
    y = gated_norm(y, z, t[q + "norm.weight"],
                   G if norm_groups is None else norm_groups, m["eps"], m["norm_before_gate"])
    return dense(t, q + "out_proj", y)


def in_float32(m):
    """The same model computed in float32 (torch's own kernels): how far float32's rounding
    alone takes the logits from float64. m holds its tensors as "t" and its head as "head"."""
    out = dict(m)
    out["t"] = {k: v.float() for k, v in m["t"].items()}
    out["head"] = m["head"].float()
    return out


def normwise(got, want, probe):
    """max over positions of max_j |got - want| over the probe ids / max |want| of the position."""
    d = (got[:, probe] - want[:, probe]).abs().max(-1).values
    return float((d / want.abs().max(-1).values).max())


def figures(m, forward, ids):
    """A fixture's figures for expected.json, from forward(m, ids, scan=...) (logits (T, V) in
    float64): mean NLL, 8 greedy ids, the probes' logits, each position's largest |logit|, how
    far the chunked scan and float32 are from the token-by-token scan in float64."""
    logits = forward(m, ids)
    chunked = forward(m, ids, scan=scan_chunked)
    f32 = forward(in_float32(m), ids).double()
    return {
        "mean_nll": mean_nll(logits, ids),
        "greedy_ids": greedy(forward, m, ids, 8),
        "probe_ids": PROBE_IDS,
        "probe_logits": [[float(logits[t, i]) for i in PROBE_IDS] for t in range(len(ids))],
        "logit_max_abs": [float(logits[t].abs().max()) for t in range(len(ids))],
        "chunked_scan_max_relative_difference": float((logits - chunked).abs().max() / logits.abs().max()),
        "float32_reference_normwise_error": normwise(f32, logits, PROBE_IDS),
    }
