"""``rlm-lab calibrate``: micro-benchmarks that write a hardware profile (data/hardware/<name>.json).

Measured, each as the median of repeated timings:

* matrix products: FLOP/s of ``F.linear`` across shapes (m tokens x k -> n), fp32 on CPU (bf16 and
  fp32 on CUDA), with the per-op dispatch time subtracted -> ``matmul_curve`` and ``matmul_flops``;
* memory bandwidth: copy of a large tensor (bytes read + written) / time;
* per-call overheads: a tiny op; forward, backward and ``generate`` steps of tiny Llama models with
  1 and 4 layers (hidden 16, so compute is negligible): the slope over layers is the per-layer
  overhead, the intercept the base; the optimizer step (grad clipping + fused AdamW + zero_grad,
  as transformers' Trainer runs it) over 8 and 64 small tensors: the slope is the per-tensor cost;
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


def bench_overheads(device, quick, budget) -> dict:
    """Per-call overheads from tiny models whose compute is negligible (module docstring)."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.randint(2, 50, (1, 4), device=device)
    new = 8 if quick else 32
    res = {}
    for L in (1, 4):
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
    fb, fl = _slope(1, res[("fwd", 1)], 4, res[("fwd", 4)])
    gfb, gfl = _slope(1, res[("fwdgrad", 1)], 4, res[("fwdgrad", 4)])
    bb, bl = _slope(1, res[("fwdbwd", 1)] - res[("fwdgrad", 1)], 4, res[("fwdbwd", 4)] - res[("fwdgrad", 4)])
    db, dl = _slope(1, res[("step", 1)], 4, res[("step", 4)])
    # generate's own setup (input checks, cache, logits processors) and its first sampling, beyond the prefill forward
    gb = max(min(res[("gen1", L)] - res[("fwd", L)] for L in (1, 4)), 0.0)  # setup + first sampling
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
    overhead = bench_overheads(device, quick, budget)
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
        "overhead": overhead, "overlap_overhead": device == "cuda",
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
    for op, fit in prof.collectives.get("ops", {}).items():
        print(f"  {op:<15} alpha {fit['alpha_s'] * 1e6:8.1f} us   1/beta {1 / fit['beta_s_per_byte'] / 1e9 if fit['beta_s_per_byte'] else float('inf'):.3g} GB/s")
    return 0
