"""The calibration's benchmarks of the kernels beyond the matrix products, each on its own synthetic
inputs: a decoder layer's elementwise work, the attention kernel (SDPA), TRL's fused log-prob head and
the streaming of weights that do not fit in the last-level cache (``hardware.py`` documents how the
time model uses each). Fits are non-negative least squares (``fitting.py``).
"""

from __future__ import annotations

import contextlib
import statistics
from pathlib import Path

from ..cost.fitting import fit_line, fit_nonneg
from .benchmarks import timeit as _timeit


def bench_elementwise(device, quick, budget) -> dict:
    """Seconds per element of the non-matmul work of one decoder layer, forward / with autograd / backward.

    Runs, on random (T x h) tensors, the elementwise ops of a Llama layer as transformers implements
    them: 2 RMSNorms (``LlamaRMSNorm``) and 2 residual adds on (T x h), rotary (``apply_rotary_pos_emb``)
    on q (T x h) and k (T x h), SiLU(gate) * up on (T x I), I = 4h: ``elementwise_elements`` counts
    4h + d_q + d_k + I elements per token for exactly these ops (timing.py). The slope of time against
    elements is the cost per element; the intercept (dispatch) is already in the per-layer overhead.
    """
    import torch
    from transformers.activations import ACT2FN
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    act = ACT2FN["silu"]
    pts = {"forward": [], "forward_grad": [], "backward": []}
    sizes = [(256, 64), (2048, 64), (1024, 256)] if quick else [(64, 64), (512, 64), (2048, 64), (512, 256),
                                                                 (2048, 256), (8192, 64), (2048, 512)]
    for T, h in sizes:
        heads, d = max(h // 32, 1), min(h, 32)
        n1, n2 = LlamaRMSNorm(h).to(device), LlamaRMSNorm(h).to(device)
        x = torch.randn(1, T, h, device=device)
        q, k = torch.randn(1, heads, T, d, device=device), torch.randn(1, heads, T, d, device=device)
        gate, up = torch.randn(1, T, 4 * h, device=device), torch.randn(1, T, 4 * h, device=device)
        cos, sin = torch.randn(1, T, d, device=device), torch.randn(1, T, d, device=device)
        leaves = (x, q, k, gate, up)

        def layer():
            a = n1(x)
            qr, kr = apply_rotary_pos_emb(q, k, cos, sin)
            r = x + a
            m = act(gate) * up
            return n2(r) + r, qr, kr, m

        elems = T * (4 * h + 2 * heads * d + 4 * h)
        with torch.no_grad():
            pts["forward"].append([elems, _timeit(layer, budget, sync)])
        for t_ in leaves:
            t_.requires_grad_(True)
        t_grad = _timeit(layer, budget, sync)

        def fwd_bwd():
            o, qr, kr, m = layer()
            torch.autograd.backward((o, qr, kr, m), (torch.ones_like(o), torch.ones_like(qr),
                                                      torch.ones_like(kr), torch.ones_like(m)))

        pts["forward_grad"].append([elems, t_grad])
        pts["backward"].append([elems, max(_timeit(fwd_bwd, budget, sync) - t_grad, 0.0)])
    # plain (not relative) least squares: the slope is set by the large sizes, where timing noise is
    # relatively small; intercept and slope >= 0 (non-negative least squares)
    return {kind: {"s_per_element": fit_line([x for x, _ in p], [t for _, t in p], relative=False)[1], "points": p}
            for kind, p in pts.items()}


def cache_bytes() -> int:
    """Size of the last-level cache (sysfs), 0 when unknown."""
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        txt = f.read_text().strip().upper()
        mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(txt[-1:], 1)
        try:
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except ValueError:
            pass
    return best


def bench_weight_stream(device, quick, budget) -> dict:
    """Bandwidth at which matrix-vector products stream weights that are NOT in the cache.

    The matmul curve is measured with one weight, cache-hot; a model whose weights exceed the
    last-level cache reads every layer's weights from memory at each call. Cycle ``F.linear``
    (m = 1) through distinct weights totalling > 3x the cache: bytes of one weight / seconds per call.
    """
    import torch
    import torch.nn.functional as Fn

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    llc = cache_bytes() or 32 * 2 ** 20
    rates = []
    for k, n in ([(512, 1408)] if quick else [(256, 704), (512, 512), (512, 1408), (1024, 2816)]):
        count = max(2, 3 * llc // (n * k * 4) + 1)
        ws = [torch.randn(n, k, device=device) for _ in range(count)]
        x, i = torch.randn(1, k, device=device), [0]

        def cold():
            i[0] = (i[0] + 1) % count
            Fn.linear(x, ws[i[0]])

        rates.append(n * k * 4 / _timeit(cold, budget, sync, min_reps=2 * count))
        del ws
    return {"bandwidth": statistics.median(rates), "cache_bytes": llc, "points": rates}


def bench_attention(device, quick, op_s, budget, autocast: bool = False) -> dict:
    """Achieved rate of torch SDPA with a boolean causal mask (as transformers calls it with padding);
    ``autocast``: fp32 inputs inside ``torch.autocast(device, bfloat16)`` (autocast_benchmarks.py).

    FLOPs counted as the time model counts them (4 b a q k d_h, QK^T + AV, mask ignored); prefill
    (q = k) and decode (q = 1) shapes. Returns ``{"curve": [[flops, FLOP/s], ...], "backward_curve":
    [[flops, FLOP/s], ...]}``: the backward's rate is its forward FLOPs over its own seconds (prefill shapes).
    """
    import torch
    import torch.nn.functional as Fn

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def sdpa(q, k, v, mask):
        with torch.autocast(device_type=device, dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            return Fn.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    shapes = ([(4, 2, 16, 16, 16), (16, 4, 64, 64, 16), (64, 2, 1, 64, 32)] if quick else
              [(1, 2, 16, 16, 16), (8, 2, 32, 32, 16), (64, 2, 24, 24, 16), (16, 4, 64, 64, 16), (32, 4, 128, 128, 32),
               (8, 8, 256, 256, 32), (1, 2, 1, 32, 16), (64, 2, 1, 64, 16), (256, 4, 1, 128, 32), (64, 8, 1, 512, 32)])
    points, back = {}, {}
    for b, a, sq, sk, d in shapes:
        q = torch.randn(b, a, sq, d, device=device)
        k, v = torch.randn(b, a, sk, d, device=device), torch.randn(b, a, sk, d, device=device)
        mask = torch.ones(b, 1, sq, sk, dtype=torch.bool, device=device).tril(sk - sq)
        flops = 4.0 * b * a * sq * sk * d
        with torch.no_grad():
            t = _timeit(lambda: sdpa(q, k, v, mask), budget, sync)
        points.setdefault(flops, []).append(flops / max(t - op_s, 0.1 * t))
        if sq > 1:
            for t_ in (q, k, v):
                t_.requires_grad_(True)
            t_g = _timeit(lambda: sdpa(q, k, v, mask), budget, sync)
            t_fb = _timeit(lambda: sdpa(q, k, v, mask).float().sum().backward(), budget, sync)
            t_b = max(t_fb - t_g, 0.1 * t_fb)
            back.setdefault(flops, []).append(flops / t_b)
    return {"curve": [[f, statistics.median(r)] for f, r in sorted(points.items())],
            "backward_curve": [[f, statistics.median(r)] for f, r in sorted(back.items())]}


def bench_logprob_head(device, quick, budget) -> dict:
    """TRL's fused log-prob head (``trl.kernels.ChunkedLogProbFunction``, what ``fused_lm_head=True``
    runs) on N positions x vocab V, beyond its own matrix product (a separately timed ``F.linear`` of
    the same shape is subtracted). Fit t = base + s_row * N + s_element * N * V (least squares,
    relative errors) for a no-grad pass (log-probs: old/ref log-probs), a grad pass (log-probs and
    entropy, as the GRPO loss asks) and that pass's backward.
    """
    import torch
    import torch.nn.functional as Fn
    from trl.kernels import ChunkedLogProbFunction

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    shapes = [(64, 64, 52), (1024, 64, 52), (1024, 256, 512)] if quick else \
        [(32, 64, 52), (256, 64, 52), (1024, 128, 52), (4096, 64, 52), (256, 128, 1024), (1024, 256, 512),
         (4096, 128, 1024)]
    pts = {"forward": [], "forward_grad": [], "backward": []}
    for n, h, v in shapes:
        x, w = torch.randn(n, h, device=device), torch.randn(v, h, device=device)
        y = torch.randint(0, v, (n,), device=device)

        def head(outputs, x=x, w=w, y=y):
            return ChunkedLogProbFunction.apply(x, w, None, y, 1.0, 32768, None, 1.0, outputs)

        with torch.no_grad():
            t_lin = _timeit(lambda: Fn.linear(x, w), budget, sync)
            pts["forward"].append([n, v, max(_timeit(lambda: head(("log_probs",)), budget, sync) - t_lin, 0.0)])
        x.requires_grad_(True), w.requires_grad_(True)
        t_g = _timeit(lambda: head(("log_probs", "entropy")), budget, sync)
        t_fb = _timeit(lambda: head(("log_probs", "entropy"))[0].sum().backward(), budget, sync)
        t_lin_g = _timeit(lambda: Fn.linear(x, w), budget, sync)
        t_lin_fb = _timeit(lambda: Fn.linear(x, w).sum().backward(), budget, sync)
        pts["forward_grad"].append([n, v, max(t_g - t_lin_g, 0.0)])
        pts["backward"].append([n, v, max((t_fb - t_g) - (t_lin_fb - t_lin_g), 0.0)])
    out = {}
    for kind, p in pts.items():
        base, row, elem = fit_nonneg([[1.0, n, n * v] for n, v, _ in p], [t for _, _, t in p])
        out[kind] = {"base_s": base, "s_per_row": row, "s_per_element": elem, "points": p}
    return out


