"""Chapter 3's runs: generation with forced lengths, decode step times, the long tail and the replicas
(simulated and real), each a RunRecord; the committed ones are loaded instead of re-measured."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from ...compare import reference_dir
from ...device import pick_device, synchronize
from ...errors import RlmLabError
from ...host import load_average
from ...models import build_model
from ...models.generation import force_lengths_class
from ...parallel.launch import spawn
from ...record import RunRecord, finished, load_record, reference_root, runs_root
from ...sizes import check_size
from .cases import EOS, PROMPT_LEN, assign, bubble, distributions, params

# ---- generation with forced lengths --------------------------------------------------------------


def _prompts(n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 52, (n, PROMPT_LEN), generator=g)
    return ids, torch.ones_like(ids)


def generate_timed(model, lengths, seed: int = 0) -> tuple[float, list[int]]:
    """Seconds of one ``generate`` call whose rows have exactly ``lengths`` new tokens; the lengths it produced."""
    import torch
    from transformers import LogitsProcessorList

    device = next(model.parameters()).device
    ids, mask = (t.to(device) for t in _prompts(len(lengths), seed))
    proc = force_lengths_class()(lengths, PROMPT_LEN, EOS)
    torch.manual_seed(seed)
    synchronize(device.type)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max(lengths), do_sample=True, top_k=0,
                             top_p=1.0, temperature=1.0, logits_processor=LogitsProcessorList([proc]),
                             pad_token_id=0, eos_token_id=EOS)
    synchronize(device.type)  # a GPU's generate returns before its last kernels finish
    seconds = time.perf_counter() - t0
    new = out[:, PROMPT_LEN:]
    produced = [int((row == EOS).nonzero()[0]) + 1 if (row == EOS).any() else row.numel() for row in new]
    return seconds, produced


def _load(name: str, seed: int = 0):
    model, _ = build_model(name, seed=seed)
    model.eval()
    return model.to(pick_device())


# ---- decode step time against batch size -----------------------------------------------------------

def measure_decode_steps(model, batches, k0: int, k1: int, reps: int, seed: int = 0) -> list[float]:
    """Median seconds per decode step at each batch size (difference of two forced generation lengths)."""
    out = []
    for b in batches:
        times = []
        for r in range(reps):
            t_short, _ = generate_timed(model, [k0] * b, seed + r)
            t_long, _ = generate_timed(model, [k1] * b, seed + r)
            times.append((t_long - t_short) / (k1 - k0))
        out.append(statistics.median(times))
    return out


def sweep(size: str, overrides: dict | None = None) -> dict:
    """The size's sweep with ``overrides`` (keys it already has; a time-boxed run, e.g. the GPU archive)."""
    p = params(size)
    unknown_keys = sorted(set(overrides or {}) - set(p))
    if unknown_keys:
        raise RlmLabError(f"unknown work-depth parameter(s) {unknown_keys}; known: {', '.join(sorted(p))}")
    return p | dict(overrides or {})


def decode_knee(size: str, run_dir: Path | None = None, seed: int = 0, overrides: dict | None = None) -> RunRecord:
    p = sweep(size, overrides)
    record = RunRecord(run_dir or runs_root(size) / "ch03_decode_knee",
                       {k: p[k] for k in ("models", "batches", "k0", "k1", "reps")} | {"prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.chapters.ch03_work_depth.decode_knee(size={size!r}"
                               + (f", overrides={overrides!r})" if overrides else ")"), seed=seed)
    results = {}
    for name in p["models"]:
        model = _load(name, seed)
        generate_timed(model, [p["k0"]] * 2, seed)  # warm-up: first call allocates and dispatches lazily
        results[name] = measure_decode_steps(model, p["batches"], p["k0"], p["k1"], p["reps"], seed)
    record.complete(step_s=results, loadavg=load_average())
    return record


# ---- the long tail ---------------------------------------------------------------------------------

def long_tail(size: str, run_dir: Path | None = None, seed: int = 0, reps: int = 3,
              overrides: dict | None = None) -> RunRecord:
    p = sweep(size, overrides)
    model = _load(p["tail_model"], seed)
    generate_timed(model, [4] * 4, seed)
    rows = []
    for dist in distributions(size, p):
        lengths = dist.values(seed)
        times, produced = [], None
        for r in range(reps):
            t, produced = generate_timed(model, lengths, seed + r)
            times.append(t)
        if produced != lengths:
            raise RlmLabError(f"forced lengths were not honoured for {dist.label}; the experiment is not exact")
        rows.append({"dist": asdict(dist), "label": dist.label, "lengths": lengths, "seconds": statistics.median(times),
                     "bubble": bubble(lengths), "r_max": max(lengths), "r_mean": sum(lengths) / len(lengths)})
    record = RunRecord(run_dir or runs_root(size) / "ch03_long_tail",
                       {"model": p["tail_model"], "n": p["n"], "mean": p["mean"], "reps": reps, "prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.chapters.ch03_work_depth.long_tail(size={size!r}"
                               + (f", overrides={overrides!r})" if overrides else ")"), seed=seed)
    record.complete(rows=rows, loadavg=load_average())
    return record


def _replica_rank(rank: int, world: int, model_name: str, shares, seed: int) -> float:
    """One generation replica (a spawned process, 1 thread): generate its share, return its seconds."""
    import torch.distributed as dist

    model = _load(model_name, seed)
    generate_timed(model, [4] * 4, seed)
    dist.barrier()
    share = shares[rank]
    return generate_timed(model, share, seed + rank)[0] if share else 0.0


def replicas(size: str, run_dir: Path | None = None, seed: int = 0, dist_index: int = -1) -> RunRecord:
    """T_p for p replicas, simulated (sequential, 1 thread) and real (processes) where the cores allow."""
    import torch

    p = params(size)
    dist = distributions(size)[dist_index]
    lengths = dist.values(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one replica = one core, in the simulation as in the processes
    try:
        model = _load(p["tail_model"], seed)
        generate_timed(model, [4] * 4, seed)
        depth_s = statistics.median(generate_timed(model, [max(lengths)], seed + r)[0] for r in range(3))
        sim = {}
        for how in ("round_robin", "by_length"):
            sim[how] = {}
            for reps in p["replicas"]:
                shares = assign(lengths, reps, how)
                sim[how][reps] = [generate_timed(model, s, seed + i)[0] if s else 0.0 for i, s in enumerate(shares)]
    finally:
        torch.set_num_threads(threads)
    real = {}
    for reps in p["real"]:
        shares = assign(lengths, reps, "round_robin")
        real[reps] = spawn(_replica_rank, reps, args=(p["tail_model"], shares, seed), threads=1, timeout_s=600)
    record = RunRecord(run_dir or runs_root(size) / "ch03_replicas",
                       {"model": p["tail_model"], "dist": asdict(dist), "replicas": p["replicas"], "real": p["real"],
                        "prompt_len": PROMPT_LEN, "threads_per_replica": 1},
                       command=f"rlm_lab.chapters.ch03_work_depth.replicas(size={size!r})", seed=seed)
    record.complete(lengths=lengths, depth_s=depth_s, simulated=_str_keys(sim), real=_str_keys(real), loadavg=load_average())
    return record


def load_reference(size: str = "cpu") -> dict[str, RunRecord]:
    """The committed records of this chapter at ``size`` (``data/runs/<size>/ch03_*``; empty if none were
    committed). A run folder that is there must hold a completed run: a missing record.json, a damaged or an
    unfinished record is a RecordError naming the folder, not a record silently left out."""
    out = {}
    for name in ("decode_knee", "long_tail", "replicas"):
        d = reference_dir(size) / f"ch03_{name}"
        if d.exists():
            out[name] = RunRecord.load(d)
    return out


def _str_keys(d):
    if isinstance(d, dict):
        return {str(k): _str_keys(v) for k, v in d.items()}
    return d


def ensure_runs(size: str, force: bool = False) -> dict[str, RunRecord]:
    """The chapter's records: the committed reference run (``data/runs/<size>``) when there is one, else
    this build's own finished run (``_build/runs/<size>``), else measured now (an unfinished or damaged
    build run is moved aside by the new run, which says so). A committed reference record that is damaged
    or unfinished is an error naming it, not a silent re-measurement."""
    out = {}
    for name, fn in (("decode_knee", decode_knee), ("long_tail", long_tail), ("replicas", replicas)):
        ref, own = reference_root(size) / f"ch03_{name}", runs_root(size) / f"ch03_{name}"
        if ref.exists() and not force:
            out[name] = load_record(ref)
        elif not force and finished(own):
            out[name] = load_record(own)
        else:
            out[name] = fn(size)
    return out


def main(argv=None) -> int:
    """``rlm-lab chapter 3 run --size cpu [--force] [--only decode_knee ...]``."""
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 3 run", description=main.__doc__)
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--only", nargs="*", choices=("decode_knee", "long_tail", "replicas"))
    args = ap.parse_args(argv)
    size = check_size(args.size)
    if args.only:
        for name in args.only:
            {"decode_knee": decode_knee, "long_tail": long_tail, "replicas": replicas}[name](size)
            print("recorded", name, f"load {load_average()[0]:.1f}", flush=True)
        return 0
    ensure_runs(size, force=args.force)
    return 0
