"""``rlm-lab calibrate``: micro-benchmarks that write a hardware profile (data/hardware/<name>.json).

Measured, each as the median of repeated timings:

* matrix products: FLOP/s of ``F.linear`` across shapes (m tokens x k -> n), fp32 on CPU (bf16 and
  fp32 on CUDA), with the per-op dispatch time subtracted -> ``matmul_curve`` and ``matmul_flops``;
* memory bandwidth: copy of a large tensor (bytes read + written) / time;
* per-call overheads: a tiny op; forward, backward and ``generate`` steps of tiny Llama models with
  1 and 8 layers (hidden 16, so compute is negligible): the slope over layers is the per-layer
  overhead, the intercept the base; the optimizer step (grad clipping + fused AdamW + zero_grad,
  as transformers' Trainer runs it) over 8 and 64 small tensors: the slope is the per-tensor cost;
* kernels beyond the matrix products, each on synthetic tensors of several sizes (``kernels``):
  the elementwise ops of a decoder layer (RMSNorm, rotary, SiLU * up, residual adds; seconds per
  element, forward / with autograd / backward), the attention kernel (torch SDPA with a causal mask:
  FLOP/s vs size, forward and backward) and TRL's fused log-prob head (beyond its matrix product:
  base + per row + per logit);
* collectives (gloo on CPU, NCCL on CUDA with >= 2 GPUs), 2 processes: time vs message size,
  least-squares fit of t = alpha + beta * bytes_per_rank (comm.py) per op.

These benchmarks are the ONLY inputs fitted to measurements; runs that predictions are judged
against are never used here (calibration and validation stay separate).
Run the real calibration on a quiet machine: ``flock -x /tmp/rlm_cpu.lock rlm-lab calibrate``.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

from ..errors import RlmLabError
from .comm import OPS, bytes_per_rank
from .hardware import HARDWARE_DIR, profile_from_dict, save_profile

REPO = HARDWARE_DIR.parents[1]


# ---- timing helpers -------------------------------------------------------------------------------

def _timeit(fn, budget_s: float, sync=lambda: None, min_reps: int = 3, max_reps: int = 10_000) -> float:
    """Median seconds of ``fn()`` over repetitions filling about ``budget_s`` (after one warm-up)."""
    fn(), sync()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _slope(x0, y0, x1, y1) -> tuple[float, float]:
    """(intercept, slope) of the line through two points, slope clamped at 0 (noise)."""
    slope = max((y1 - y0) / (x1 - x0), 0.0)
    return max(y0 - slope * x0, 0.0), slope


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def default_name(device: str) -> str:
    """A profile name from the hardware: cpu-<cores>core-<model words>, or the GPU's name."""
    if device == "cuda":
        import torch

        return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-") + "-calibrated"
    words = [w for w in re.split(r"[^a-z0-9]+", cpu_name().lower())
             if w and w not in {"amd", "intel", "r", "tm", "cpu", "processor", "core", "with", "radeon", "graphics"}]
    return f"cpu-{os.cpu_count()}core-{'-'.join(words[:2]) or 'unknown'}"


# ---- benchmarks ---------------------------------------------------------------------------------

def bench_op(device, budget) -> float:
    import torch

    a = torch.ones(1, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return _timeit(lambda: a.add(a), budget, sync)


def bench_matmul(device, dtype_name, quick, op_s, budget) -> list[list[float]]:
    """[[gemm_flops, FLOP/s], ...] over transformer-like shapes (m tokens, k in, n out)."""
    import torch
    import torch.nn.functional as Fn

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ms = (1, 32, 512) if quick else (1, 8, 64, 512, 2048)
    ks = (64, 512) if quick else (16, 64, 256, 1024)
    shapes = [(m, k, 4 * k if k <= 256 else k) for m in ms for k in ks]
    shapes.append((1024, 1024, 1024) if quick else (2048, 2048, 2048))
    if device == "cuda":
        shapes.append((8192, 8192, 8192))
    points = {}
    for m, k, n in shapes:
        x = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        t = _timeit(lambda: Fn.linear(x, w), budget, sync)
        flops = 2.0 * m * k * n
        # subtract the dispatch time: the time model charges it once per call in the overheads
        points.setdefault(flops, []).append(flops / max(t - op_s, 0.1 * t))
    return [[f, statistics.median(r)] for f, r in sorted(points.items())]


def bench_bandwidth(device, quick, budget) -> float:
    import torch

    n = (16 if quick else 64) * 2 ** 20  # floats: 64 MiB / 256 MiB, far beyond the caches
    x = torch.ones(n, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t = _timeit(lambda: y.copy_(x), budget, sync)
    return 2 * x.numel() * x.element_size() / t


def _tiny_lm(layers: int, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=52, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device)


LAYERS_HI = 8  # tiny models of 1 and 8 layers: the long lever arm keeps the per-layer slope out of the noise


def bench_overheads(device, quick, budget) -> dict:
    """Per-call overheads from tiny models whose compute is negligible (module docstring)."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.randint(2, 50, (1, 4), device=device)
    new = 8 if quick else 32
    res = {}
    for L in (1, LAYERS_HI):
        model = _tiny_lm(L, device)
        with torch.no_grad():
            res[("fwd", L)] = _timeit(lambda: model(x), budget, sync)

        def fwd_bwd():
            model(x, labels=x).loss.backward()

        res[("fwdbwd", L)] = _timeit(fwd_bwd, budget, sync)
        with torch.enable_grad():
            res[("fwdgrad", L)] = _timeit(lambda: model(x, labels=x), budget, sync)
        model.generation_config.pad_token_id = 0
        gen = dict(do_sample=True, top_k=0, top_p=1.0, temperature=1.0)
        with torch.no_grad():
            t1 = _timeit(lambda: model.generate(x, max_new_tokens=1, min_new_tokens=1, **gen), budget, sync)
            tn = _timeit(lambda: model.generate(x, max_new_tokens=new + 1, min_new_tokens=new + 1, **gen),
                         budget, sync)
        res[("step", L)] = (tn - t1) / new
        res[("gen1", L)] = t1
    H = LAYERS_HI
    fb, fl = _slope(1, res[("fwd", 1)], H, res[("fwd", H)])
    gfb, gfl = _slope(1, res[("fwdgrad", 1)], H, res[("fwdgrad", H)])
    bb, bl = _slope(1, res[("fwdbwd", 1)] - res[("fwdgrad", 1)], H, res[("fwdbwd", H)] - res[("fwdgrad", H)])
    db, dl = _slope(1, res[("step", 1)], H, res[("step", H)])
    # generate's own setup (input checks, cache, logits processors) and its first sampling, beyond the prefill forward
    gb = max(min(res[("gen1", L)] - res[("fwd", L)] for L in (1, LAYERS_HI)), 0.0)  # setup + first sampling
    ob, ot = bench_optimizer(device, budget)
    return {"op_s": bench_op(device, budget), "forward_base_s": fb, "forward_layer_s": fl,
            "forward_grad_base_s": gfb, "forward_grad_layer_s": gfl,
            "backward_base_s": bb, "backward_layer_s": bl, "decode_step_base_s": db, "decode_step_layer_s": dl,
            "generate_base_s": gb,
            "optimizer_base_s": ob, "optimizer_tensor_s": ot}


def bench_optimizer(device, budget) -> tuple[float, float]:
    """(base, per tensor) of clip_grad_norm_ + fused AdamW step + zero_grad, as the Trainer runs it."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    for k in (8, 64):
        params = [torch.nn.Parameter(torch.randn(16, device=device)) for _ in range(k)]
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)

        def step():
            for p in params:
                p.grad = torch.ones_like(p)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        out[k] = _timeit(step, budget, sync)
    return _slope(8, out[8], 64, out[64])


def _collective_rank(rank, world, sizes, reps, device):
    """Runs in each spawned process: median time per op and message size (bytes of the full tensor)."""
    import torch
    import torch.distributed as dist

    dev = f"cuda:{rank}" if device == "cuda" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    for op in OPS:
        for nbytes in sizes:
            n = max(world, nbytes // 4 // world * world)
            x = torch.ones(n, device=dev)
            shard = torch.empty(n // world, device=dev)
            full = torch.empty(n, device=dev)
            if op == "all_reduce":
                fn = lambda: dist.all_reduce(x)  # noqa: E731
            elif op == "all_gather":
                gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
                fn = lambda: gather(full, shard)  # noqa: E731
            elif op == "reduce_scatter":
                fn = lambda: dist.reduce_scatter_tensor(shard, x)  # noqa: E731
            elif op == "all_to_all":
                fn = lambda: dist.all_to_all_single(full, x)  # noqa: E731
            elif op == "broadcast":
                fn = lambda: dist.broadcast(x, src=0)  # noqa: E731
            else:  # send_recv: ping-pong between ranks 0 and 1, half the round trip
                def fn():
                    if rank == 0:
                        dist.send(x, 1), dist.recv(x, 1)
                    elif rank == 1:
                        dist.recv(x, 0), dist.send(x, 0)
            dist.barrier()
            # a fixed repetition count: every rank must issue the same number of collectives
            t = _timeit(fn, 0.0, sync, min_reps=reps, max_reps=reps)
            out[(op, n * 4)] = t / 2 if op == "send_recv" else t
    return out


def bench_collectives(device, quick) -> dict:
    """alpha-beta fit per op from 2 processes; the slowest rank's time counts."""
    from ..parallel.launch import spawn

    backend = "nccl" if device == "cuda" else "gloo"
    world = 2
    sizes = [1024, 65536, 1 << 20] if quick else [256, 4096, 65536, 1 << 20, 8 << 20]
    reps = 5 if quick else 25
    per_rank = spawn(_collective_rank, world, args=(sizes, reps, device), backend=backend, timeout_s=120)
    points = {op: [[nb, max(r[(op, nb)] for r in per_rank)] for (o, nb) in sorted(per_rank[0]) if o == op]
              for op in OPS}
    ops = fit_collectives(points, world, backend)
    return {"backend": backend, "world": world, "ops": ops, "points": points}


def _least_squares(xs, ys) -> tuple[float, float]:
    """(slope, intercept) of t = alpha + beta * x minimizing the squared RELATIVE error (weights 1/t^2),
    so microsecond latencies and millisecond transfers count alike; both clamped >= 0."""
    w = [1.0 / max(y, 1e-12) ** 2 for y in ys]
    sw = sum(w)
    mx = sum(wi * x for wi, x in zip(w, xs)) / sw
    my = sum(wi * y for wi, y in zip(w, ys)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs))
    slope = max(sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys)) / sxx, 0.0) if sxx else 0.0
    return slope, max(my - slope * mx, 0.0) or min(ys)


def fit_collectives(points: dict, world: int, backend: str) -> dict:
    """alpha-beta per op from measured {op: [[full tensor bytes, seconds], ...]}."""
    ops = {}
    for op, pts in points.items():
        xs = [bytes_per_rank(op, nb, world, backend) for nb, _ in pts]
        beta, alpha = _least_squares(xs, [t for _, t in pts])
        ops[op] = {"alpha_s": alpha, "beta_s_per_byte": beta}
    return ops


# ---- kernels beyond the matrix products (calibrated each on its own synthetic inputs) ------------

def _fit_slope(points) -> tuple[float, float]:
    """(intercept, slope) of t = a + s * x over [[x, t], ...], relative-error weights, both >= 0."""
    slope, intercept = _least_squares([x for x, _ in points], [t for _, t in points])
    return intercept, slope


def _fit_linear(rows, ys) -> list[float]:
    """Least squares of t = sum_j c_j x_j with relative-error weights (1/t^2), coefficients clamped >= 0."""
    import numpy as np

    a, y = np.asarray(rows, dtype=float), np.asarray(ys, dtype=float)
    w = 1.0 / np.maximum(y, 1e-9)
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    return [max(float(c), 0.0) for c in coef]


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
    # plain least squares: the slope is set by the large sizes, where timing noise is relatively small
    return {kind: {"s_per_element": max(_fit_linear_plain(p), 0.0), "points": p} for kind, p in pts.items()}


def _fit_linear_plain(points) -> float:
    """Slope of t = a + s x by ordinary least squares."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(t for _, t in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (t - my) for x, t in points) / sxx if sxx else 0.0


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


def bench_attention(device, quick, op_s, budget) -> dict:
    """Achieved rate of torch SDPA with a boolean causal mask (as transformers calls it with padding).

    FLOPs counted as the time model counts them (4 b a q k d_h, QK^T + AV, mask ignored); prefill
    (q = k) and decode (q = 1) shapes. Returns ``{"curve": [[flops, FLOP/s], ...], "backward_curve":
    [[flops, FLOP/s], ...]}``: the backward's rate is its forward FLOPs over its own seconds (prefill shapes).
    """
    import torch
    import torch.nn.functional as Fn

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
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
            t = _timeit(lambda: Fn.scaled_dot_product_attention(q, k, v, attn_mask=mask), budget, sync)
        points.setdefault(flops, []).append(flops / max(t - op_s, 0.1 * t))
        if sq > 1:
            for t_ in (q, k, v):
                t_.requires_grad_(True)
            t_g = _timeit(lambda: Fn.scaled_dot_product_attention(q, k, v, attn_mask=mask), budget, sync)
            t_fb = _timeit(lambda: Fn.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward(),
                           budget, sync)
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
        base, row, elem = _fit_linear([[1.0, n, n * v] for n, v, _ in p], [t for _, _, t in p])
        out[kind] = {"base_s": base, "s_per_row": row, "s_per_element": elem, "points": p}
    return out


# ---- the command ----------------------------------------------------------------------------------

def calibrate(out: str | Path | None = None, quick: bool = False, device: str = "cpu",
              collectives: bool = True, name: str | None = None) -> Path:
    """Run the micro-benchmarks and write the profile; returns its path."""
    import torch

    from ..record import provenance

    if device == "cuda" and not torch.cuda.is_available():
        raise RlmLabError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
    budget = 0.05 if quick else 0.5
    name = name or default_name(device) + ("-quick" if quick else "")
    if out is None:
        out = (REPO / "_build" / "hardware" if quick else HARDWARE_DIR) / f"{name}.json"
    op_s = bench_op(device, budget)
    dtypes = ("fp32",) if device == "cpu" else ("bf16", "fp32")
    curve = {dt: bench_matmul(device, dt, quick, op_s, budget) for dt in dtypes}
    bw = bench_bandwidth(device, quick, budget)
    # the per-call overheads are the noisiest terms (differences of small times): the median of
    # independent repetitions of the whole benchmark, key by key
    reps = [bench_overheads(device, quick, budget) for _ in range(1 if quick else 3)]
    overhead = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
    kb = 0.4 * budget  # many shapes: a shorter budget each keeps the whole calibration within minutes
    kernels = {"elementwise": bench_elementwise(device, quick, kb),
               "attention": bench_attention(device, quick, op_s, kb),
               "logprob_head": bench_logprob_head(device, quick, kb),
               "weight_stream": bench_weight_stream(device, quick, kb)}
    if collectives and (device == "cpu" or torch.cuda.device_count() >= 2):
        coll = bench_collectives(device, quick)
    else:
        coll = {"backend": "gloo" if device == "cpu" else "nccl", "world": 2, "ops": {}, "points": {},
                "note": "not measured (needs 2 devices or --collectives)"}
    if device == "cuda":
        mem, dev_name = torch.cuda.get_device_properties(0).total_memory, torch.cuda.get_device_name(0)
    else:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        dev_name = f"{cpu_name()} ({os.cpu_count()} cores)"
    p2p = coll["ops"].get("send_recv", {}).get("beta_s_per_byte")
    profile = {
        "name": name, "kind": "calibrated", "device": dev_name, "source": "rlm-lab calibrate" + (" --quick" if quick else ""),
        "memory_bytes": mem, "matmul_flops": {dt: max(r for _, r in pts) for dt, pts in curve.items()},
        "matmul_curve": curve, "memory_bandwidth": bw, "efficiency": {"matmul": 1.0, "memory": 1.0},
        "overhead": overhead, "kernels": kernels, "overlap_overhead": device == "cuda",
        "link_bandwidth": 1.0 / p2p if p2p else 0.0, "collectives": coll, "threads": torch.get_num_threads(),
        "provenance": provenance(), "notes": "measured numbers; efficiencies are 1 because rates are achieved rates",
    }
    profile_from_dict(profile, where=name)
    return save_profile(profile, out)


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure this machine and write a hardware profile",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="profile path (default data/hardware/<name>.json; --quick: _build/hardware/)")
    p.add_argument("--name", help="profile name (default from the CPU/GPU model)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke calibration (for tests)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--no-collectives", action="store_true", help="skip the 2-process collective benchmarks")
    p.set_defaults(func=_run)


def _run(args) -> int:
    path = calibrate(args.out, args.quick, args.device, not args.no_collectives, args.name)
    from .hardware import load_profile

    prof = load_profile(path)
    o = prof.overhead
    print(f"wrote {path}")
    print(f"  matmul peak {max(prof.matmul_flops.values()) / 1e9:.3g} GFLOP/s, memory {prof.memory_bandwidth / 1e9:.3g} GB/s, "
          f"op {o['op_s'] * 1e6:.3g} us, forward {o['forward_base_s'] * 1e3:.3g} ms + {o['forward_layer_s'] * 1e3:.3g} ms/layer, "
          f"decode step {o['decode_step_base_s'] * 1e3:.3g} ms + {o['decode_step_layer_s'] * 1e3:.3g} ms/layer")
    k = prof.kernels
    print(f"  elementwise {k['elementwise']['forward']['s_per_element'] * 1e9:.3g} ns/element (backward "
          f"{k['elementwise']['backward']['s_per_element'] * 1e9:.3g}), log-prob head {k['logprob_head']['forward']['base_s'] * 1e6:.3g} us "
          f"+ {k['logprob_head']['forward']['s_per_row'] * 1e6:.3g} us/row + {k['logprob_head']['forward']['s_per_element'] * 1e9:.3g} ns/logit")
    for op, fit in prof.collectives.get("ops", {}).items():
        print(f"  {op:<15} alpha {fit['alpha_s'] * 1e6:8.1f} us   1/beta {1 / fit['beta_s_per_byte'] / 1e9 if fit['beta_s_per_byte'] else float('inf'):.3g} GB/s")
    return 0
