"""The calibration's micro-benchmarks of one device: matrix products, memory bandwidth, per-call overheads,
the optimizer step and the collectives (``kernel_benchmarks`` holds the kernels beyond the products).

Each function times one quantity with :func:`timeit` (median over repetitions filling a time budget) and
returns measured numbers; fitting (``fitting.py``, non-negative least squares) and the repeats, load checks
and profile writing (``profile.py``) are elsewhere. Torch is imported inside the functions.
"""

from __future__ import annotations

import statistics
import time

from ..cost.comm import OPS, bytes_per_rank
from ..cost.fitting import fit_line
from ..parallel.launch import spawn

# ---- timing helper ----------------------------------------------------------------------------------

def timeit(fn, budget_s: float, sync=lambda: None, min_reps: int = 3, max_reps: int = 10_000,
           clock=time.perf_counter) -> float:
    """Median seconds of ``fn()`` over repetitions filling about ``budget_s`` (after one warm-up).

    ``clock`` is the timer (``time.perf_counter``; a test passes a fake one with known noise).
    """
    fn(), sync()
    times = []
    start = clock()
    while len(times) < max_reps and (len(times) < min_reps or clock() - start < budget_s):
        t0 = clock()
        fn()
        sync()
        times.append(clock() - t0)
    return statistics.median(times)


_timeit = timeit


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
    # two points, (1 layer, H layers): both coefficients >= 0 by non-negative least squares
    fb, fl = fit_line((1, H), (res[("fwd", 1)], res[("fwd", H)]))
    gfb, gfl = fit_line((1, H), (res[("fwdgrad", 1)], res[("fwdgrad", H)]))
    bb, bl = fit_line((1, H), (res[("fwdbwd", 1)] - res[("fwdgrad", 1)], res[("fwdbwd", H)] - res[("fwdgrad", H)]))
    db, dl = fit_line((1, H), (res[("step", 1)], res[("step", H)]))
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
    return fit_line((8, 64), (out[8], out[64]))


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
    backend = "nccl" if device == "cuda" else "gloo"
    world = 2
    sizes = [1024, 65536, 1 << 20] if quick else [256, 4096, 65536, 1 << 20, 8 << 20]
    reps = 5 if quick else 25
    per_rank = spawn(_collective_rank, world, args=(sizes, reps, device), backend=backend, timeout_s=120)
    points = {op: [[nb, max(r[(op, nb)] for r in per_rank)] for (o, nb) in sorted(per_rank[0]) if o == op]
              for op in OPS}
    ops = fit_collectives(points, world, backend)
    return {"backend": backend, "world": world, "ops": ops, "points": points}


def fit_collectives(points: dict, world: int, backend: str) -> dict:
    """alpha-beta per op from measured {op: [[full tensor bytes, seconds], ...]}."""
    ops = {}
    for op, pts in points.items():
        xs = [bytes_per_rank(op, nb, world, backend) for nb, _ in pts]
        alpha, beta = fit_line(xs, [t for _, t in pts])  # relative errors, alpha, beta >= 0
        ops[op] = {"alpha_s": alpha, "beta_s_per_byte": beta}
    return ops


