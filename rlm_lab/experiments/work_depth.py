"""Chapter 3, "Work and depth": decode step time against batch size, the long tail, Brent's bounds.

Measured (each a recorded run, ``data/runs/<size>/ch03_*``):

* ``decode_knee``: seconds per decode step of transformers ``generate`` (sampling, KV cache, the engine
  TRL uses) for batch sizes 1, 2, 4, ...: t_step = (T(k1 new tokens) - T(k0)) / (k1 - k0), so the
  prefill cancels. Predicted with ``rlm_lab.cost.decode_step_time`` (a roofline, Williams et al., CACM 2009).
* ``long_tail``: one ``generate`` call over n sequences whose lengths are *forced* row by row
  (:class:`ForceLengths`: EOS banned before R_i, forced at R_i), for length distributions with the same
  mean and growing tails. A static batch runs until the longest row ends, so the time follows R_max,
  not the mean: predicted T = prefill + sum_{t < R_max} t_step(n, P + t), and the idle share of the
  decode slots is the bubble 1 - sum R_i / (n R_max).
* ``replicas``: the same n sequences split over p generation replicas (data parallel). Each replica's
  share runs on one core (1 thread). p = 1, 2 run as real processes (``rlm_lab.parallel.launch.spawn``,
  2 cores); p = 1..8 also run as a **sequential simulation**: every replica's share is generated one
  after another on the same core and T_p = the slowest replica. Brent's bounds use W = T_1 (all n on one
  replica, device-seconds) and D = the longest sequence alone: max(W/p, D) <= T_p <= W/p + D
  (Brent, JACM 1974, doi 10.1145/321812.321815; Blelloch, CACM 39(3) 1996).

Ignores: continuous batching (rows join and leave the batch: vLLM), which changes who fills the idle
slots, not the depth; prefix sharing; the weight sync a real disaggregated rollout would add.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import RlmLabError
from ..record import RunRecord, runs_root
from ..sizes import check_size
from .compare import reference_dir, relative_error, verdict

PROMPT_LEN = 8
EOS = 1

_SIZE = {
    "smoke": dict(models=("nano",), batches=(1, 4, 16), k0=2, k1=10, reps=2,
                  tail_model="nano", n=16, mean=8, replicas=(1, 2, 4), real=(2,)),
    "cpu": dict(models=("micro", "mini", "small"), batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), k0=2, k1=18,
                reps=3, tail_model="mini", n=64, mean=32, replicas=(1, 2, 4, 8), real=(1, 2)),
    "gpu": dict(models=("small", "base", "large"), batches=(1, 4, 16, 64, 256, 1024, 2048), k0=2, k1=66,
                reps=3, tail_model="base", n=512, mean=256, replicas=(1, 2, 4, 8), real=(1, 2)),
}


def params(size: str) -> dict:
    return dict(_SIZE[check_size(size)])


# ---- length distributions ------------------------------------------------------------------------

@dataclass(frozen=True)
class Lengths:
    """n response lengths with a given mean: fixed, uniform on [1, 2 mean - 1], or lognormal with
    spread ``sigma`` (clipped at ``cap``), at the quantiles (i + 0.5) / n, then shuffled (seeded)."""

    kind: str
    n: int
    mean: int
    sigma: float = 0.0
    cap: int = 0

    def values(self, seed: int = 0) -> list[int]:
        q = [(i + 0.5) / self.n for i in range(self.n)]
        if self.kind == "fixed":
            out = [self.mean] * self.n
        elif self.kind == "uniform":
            out = [max(1, round(1 + p * (2 * self.mean - 2))) for p in q]
        elif self.kind == "lognormal":
            z = statistics.NormalDist()
            mu = math.log(self.mean) - self.sigma ** 2 / 2  # so that E[R] = mean before clipping
            cap = self.cap or 8 * self.mean
            out = [min(cap, max(1, round(math.exp(mu + self.sigma * z.inv_cdf(p))))) for p in q]
        else:
            raise RlmLabError(f"length kind must be fixed, uniform or lognormal, got {self.kind!r}")
        random.Random(seed).shuffle(out)
        return out

    @property
    def label(self) -> str:
        return {"fixed": "fixed", "uniform": "uniform"}.get(self.kind, f"lognormal σ={self.sigma:g}")


def distributions(size: str) -> list[Lengths]:
    p = params(size)
    n, mean = p["n"], p["mean"]
    return [Lengths("fixed", n, mean), Lengths("uniform", n, mean), Lengths("lognormal", n, mean, 0.5),
            Lengths("lognormal", n, mean, 1.0)]


def bubble(lengths) -> float:
    """1 - sum R_i / (n R_max) (the cost model's ``tail_bubble``)."""
    from ..cost import tail_bubble

    return tail_bubble(lengths)


# ---- generation with forced lengths --------------------------------------------------------------

def _force_lengths_class():
    import torch
    from transformers import LogitsProcessor

    class ForceLengths(LogitsProcessor):
        """Row i emits exactly R_i tokens, the last one EOS: EOS is banned before step R_i and forced at it.

        Hand-written because transformers' min/max_new_tokens are per call, not per row."""

        def __init__(self, lengths, prompt_len: int, eos: int = EOS):
            self.lengths = torch.tensor(lengths)
            self.prompt_len, self.eos = prompt_len, eos

        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - self.prompt_len + 1  # the token being chosen is number ``step``
            early = self.lengths > step
            scores[early, self.eos] = float("-inf")
            last = self.lengths == step
            if last.any():
                scores[last] = float("-inf")
                scores[last, self.eos] = 0.0
            return scores

    return ForceLengths


def _prompts(n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 52, (n, PROMPT_LEN), generator=g)
    return ids, torch.ones_like(ids)


def generate_timed(model, lengths, seed: int = 0) -> tuple[float, list[int]]:
    """Seconds of one ``generate`` call whose rows have exactly ``lengths`` new tokens; the lengths it produced."""
    import torch
    from transformers import LogitsProcessorList

    ids, mask = _prompts(len(lengths), seed)
    proc = _force_lengths_class()(lengths, PROMPT_LEN)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max(lengths), do_sample=True, top_k=0,
                             top_p=1.0, temperature=1.0, logits_processor=LogitsProcessorList([proc]),
                             pad_token_id=0, eos_token_id=EOS)
    seconds = time.perf_counter() - t0
    new = out[:, PROMPT_LEN:]
    produced = [int((row == EOS).nonzero()[0]) + 1 if (row == EOS).any() else row.numel() for row in new]
    return seconds, produced


def _load(name: str, seed: int = 0):
    from ..models import build_model

    model, _ = build_model(name, seed=seed)
    model.eval()
    return model


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


def predicted_decode_steps(model_name: str, batches, k0: int, k1: int, profile) -> list[float]:
    """Mean predicted t_step(b, c) over the contexts the measurement spans (fp32, as measured)."""
    from ..cost import decode_step_time, load_profile, model_spec

    spec, prof = model_spec(model_name), load_profile(profile)
    ctx = range(PROMPT_LEN + k0, PROMPT_LEN + k1)
    return [statistics.mean(decode_step_time(spec, b, c, prof, "fp32", 4) for c in ctx) for b in batches]


def knee(batches, times, factor: float = 1.5) -> int | None:
    """The largest batch whose step time is within ``factor`` x the batch-1 time (below it, more
    sequences per step are almost free); None if even the largest batch is."""
    base = times[0]
    inside = [b for b, t in zip(batches, times) if t <= factor * base]
    return inside[-1] if len(inside) < len(batches) else None


def decode_knee(size: str, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    p = params(size)
    record = RunRecord(run_dir or runs_root(size) / "ch03_decode_knee",
                       {k: p[k] for k in ("models", "batches", "k0", "k1", "reps")} | {"prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.experiments.work_depth.decode_knee(size={size!r})", seed=seed)
    results = {}
    for name in p["models"]:
        model = _load(name, seed)
        generate_timed(model, [p["k0"]] * 2, seed)  # warm-up: first call allocates and dispatches lazily
        results[name] = measure_decode_steps(model, p["batches"], p["k0"], p["k1"], p["reps"], seed)
    record.complete(step_s=results, loadavg=_loadavg())
    return record


# ---- the long tail ---------------------------------------------------------------------------------

def long_tail(size: str, run_dir: Path | None = None, seed: int = 0, reps: int = 3) -> RunRecord:
    p = params(size)
    model = _load(p["tail_model"], seed)
    generate_timed(model, [4] * 4, seed)
    rows = []
    for dist in distributions(size):
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
                       command=f"rlm_lab.experiments.work_depth.long_tail(size={size!r})", seed=seed)
    record.complete(rows=rows, loadavg=_loadavg())
    return record


def predicted_generate(model_name: str, lengths, profile, batch: int | None = None) -> float:
    """The cost model's static ``generate`` of these rows (``rlm_lab.cost.timing.generate_time``, fp32)."""
    from ..cost.timing import generate_time

    return generate_time(model_name, profile, PROMPT_LEN, lengths, batch, "static", "fp32", 4)


# ---- replicas and Brent's bounds ---------------------------------------------------------------------

def assign(lengths, p: int, how: str = "round_robin") -> list[list[int]]:
    """Split sequences over p replicas: ``round_robin`` (arrival order, as a data-parallel sampler) or
    ``by_length`` (sorted, contiguous chunks: long sequences share a replica)."""
    if p < 1:
        raise RlmLabError(f"replicas must be >= 1, got {p}")
    if how == "round_robin":
        return [list(lengths[r::p]) for r in range(p)]
    if how == "by_length":
        s = sorted(lengths, reverse=True)
        k = math.ceil(len(s) / p)
        return [s[i * k:(i + 1) * k] for i in range(p)]
    raise RlmLabError(f"assignment must be round_robin or by_length, got {how!r}")


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

    from ..parallel.launch import spawn

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
                       command=f"rlm_lab.experiments.work_depth.replicas(size={size!r})", seed=seed)
    record.complete(lengths=lengths, depth_s=depth_s, simulated=_str_keys(sim), real=_str_keys(real), loadavg=_loadavg())
    return record


def brent_table(record: RunRecord, how: str = "round_robin", profile=None) -> list[dict]:
    """Per p: measured T_p (slowest replica, simulated and, where run, real), Brent's bounds from the
    measured W = T_1 and D, and (with ``profile``) the cost model's T_p for the same assignment."""
    res = record.results
    sim = res["simulated"][how]
    w = max(sim["1"])  # one replica holds everything: its time is the whole work (device-seconds)
    d = res["depth_s"]
    rows = []
    for p_str, times in sim.items():
        p = int(p_str)
        row = {"replicas": p, "measured_sim": max(times), "work_sim": sum(times), "lower": max(w / p, d),
               "upper": w / p + d}
        if p_str in res["real"]:
            row["measured_real"] = max(res["real"][p_str])
        if profile is not None:
            model = record.config["model"]
            shares = assign(res["lengths"], p, how)
            row["predicted"] = max(predicted_generate(model, s, profile) for s in shares if s)
        rows.append(row)
    return rows


# ---- compare: predicted against measured, one table per experiment ------------------------------------

def knee_table(record: RunRecord, profile) -> tuple[list[dict], list[dict]]:
    """Decode step time per (model, batch), predicted against measured, and per model the knee (the
    first batch whose step takes >= 1.5x the batch-1 step) measured and predicted side by side."""
    cfg = record.config
    rows, knees = [], []
    for model, meas in record.results["step_s"].items():
        pred = predicted_decode_steps(model, cfg["batches"], cfg["k0"], cfg["k1"], profile)
        rows += [{"model": model, "batch": b, "predicted": pt, "measured": mt, "rel_error": relative_error(pt, mt)}
                 for b, pt, mt in zip(cfg["batches"], pred, meas)]
        knees.append({"model": model, "knee_measured": knee(cfg["batches"], meas),
                      "knee_predicted": knee(cfg["batches"], pred)})
    return rows, knees


def tail_table(record: RunRecord, profile) -> list[dict]:
    """One static-batch ``generate`` per length distribution: predicted and measured seconds, the bubble,
    and the measured slowdown against the fixed-length row next to the static-batch law 1 / (1 - bubble)."""
    rows = []
    for r in record.results["rows"]:
        pred = predicted_generate(record.config["model"], r["lengths"], profile)
        rows.append({"lengths": r["label"], "mean_R": r["r_mean"], "max_R": r["r_max"], "bubble": r["bubble"],
                     "predicted": pred, "measured": r["seconds"], "rel_error": relative_error(pred, r["seconds"])})
    base = rows[0]["measured"]
    for r in rows:
        r["slowdown_measured"], r["slowdown_law"] = r["measured"] / base, 1 / (1 - r["bubble"])
    return rows


def replica_table(record: RunRecord, profile) -> list[dict]:
    """Both assignments: :func:`brent_table` rows with the error of the predicted T_p against the simulated
    one, and Brent's bounds from the *predicted* W and D (``pred_lower``, ``pred_upper``), so that the
    prediction is drawn between its own bounds and the measurement between the measured ones."""
    model, lengths = record.config["model"], record.results["lengths"]
    w_pred = predicted_generate(model, lengths, profile)
    d_pred = predicted_generate(model, [max(lengths)], profile)
    rows = []
    for how in ("round_robin", "by_length"):
        for r in brent_table(record, how, profile):
            p = r["replicas"]
            rows.append({"assignment": how, **r, "pred_lower": max(w_pred / p, d_pred),
                         "pred_upper": w_pred / p + d_pred, "rel_error": relative_error(r["predicted"], r["measured_sim"]),
                         "above_upper": r["measured_sim"] > r["upper"]})
    return rows


def headline(records: dict, profile) -> dict:
    """The chapter's comparison as its prose quotes it: whole generation times first (the long-tail batches
    and the replica T_p, each one whole ``generate``), then single decode steps, then all together; each
    median |error| with its verdict against the goals (``compare.BAR``, ``compare.GOAL``)."""
    knee_rows, knees = knee_table(records["decode_knee"], profile)
    tail_rows = tail_table(records["long_tail"], profile)
    rep_rows = replica_table(records["replicas"], profile)
    whole = statistics.median(abs(r["rel_error"]) for r in tail_rows + rep_rows)
    step = statistics.median(abs(r["rel_error"]) for r in knee_rows)
    every = statistics.median(abs(r["rel_error"]) for r in knee_rows + tail_rows + rep_rows)
    real = {r["replicas"]: r["measured_real"] / r["measured_sim"] for r in rep_rows
            if r["assignment"] == "round_robin" and "measured_real" in r}
    return {"knee_rows": knee_rows, "knees": knees, "tail_rows": tail_rows, "replica_rows": rep_rows,
            "whole_error": whole, "whole_verdict": verdict(whole), "step_error": step, "step_verdict": verdict(step),
            "all_error": every, "all_verdict": verdict(every),
            "above_upper": [(r["assignment"], r["replicas"]) for r in rep_rows if r["above_upper"]],
            "real_over_sim": real}


def load_reference(size: str = "cpu") -> dict[str, RunRecord]:
    """The committed records of this chapter at ``size`` (``data/runs/<size>/ch03_*``; empty if none)."""
    out = {}
    for name in ("decode_knee", "long_tail", "replicas"):
        d = reference_dir(size) / f"ch03_{name}"
        if (d / "record.json").exists():
            out[name] = RunRecord.load(d)
    return out


def _str_keys(d):
    if isinstance(d, dict):
        return {str(k): _str_keys(v) for k, v in d.items()}
    return d


def _loadavg():
    import os

    try:
        return os.getloadavg()
    except OSError:
        return None


def ensure_runs(size: str, force: bool = False) -> dict[str, RunRecord]:
    """The chapter's records: the committed reference run (``data/runs/<size>``) when there is one, else
    this build's own finished run (``_build/runs/<size>``), else measured now (an unfinished or damaged
    build run is moved aside by the new run, which says so). A committed reference record that is damaged
    or unfinished is an error naming it, not a silent re-measurement."""
    from ..record import load_record, reference_root

    out = {}
    for name, fn in (("decode_knee", decode_knee), ("long_tail", long_tail), ("replicas", replicas)):
        ref, own = reference_root(size) / f"ch03_{name}", runs_root(size) / f"ch03_{name}"
        if ref.exists() and not force:
            out[name] = load_record(ref)
        elif (own / "record.json").exists() and not force and _finished(own):
            out[name] = load_record(own)
        else:
            out[name] = fn(size)
    return out


def _finished(run_dir: Path) -> bool:
    from ..record import RecordError, load_record

    try:
        load_record(run_dir)
        return True
    except RecordError:
        return False


# ---- depth at scale (prediction only) -----------------------------------------------------------------

# Qwen2.5-1.5B's shape (its config.json on the Hugging Face Hub, Qwen/Qwen2.5-1.5B).
QWEN25_1_5B = {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "num_hidden_layers": 28,
               "num_attention_heads": 12, "num_key_value_heads": 2, "intermediate_size": 8960,
               "tie_word_embeddings": True, "_name_or_path": "Qwen2.5-1.5B (shape only)"}


def scaling(profile: str = "h200", devices=(1, 2, 4, 8, 16, 32, 64), model=None) -> list[dict]:
    """Predicted GRPO iteration time on p data-parallel devices against Brent's bounds from the
    one-device work and depth (a worked example: B = 32 prompts, G = 8, P = 256, lognormal
    lengths with median 690 and mean ~946, clipped at 4096; continuous-batching engine). Prediction only."""
    from ..cost import Workload, predict
    from ..cost.workload import ResponseLengths

    spec = model or QWEN25_1_5B
    resp = ResponseLengths("lognormal", median=690, sigma=0.794, max=4096)

    def wl(p):
        return Workload(prompts=32, group_size=8, prompt_len=256, response=resp, micro_batch=8, gen_batch=256,
                        recompute_old=True, precision="bf16-mixed", engine="continuous", devices=p)

    base = predict(spec, "grpo", wl(1), profile)
    rows = []
    for p in devices:
        pred = predict(spec, "grpo", wl(p), profile)
        lower, upper = base.brent(p)
        rows.append({"devices": p, "predicted_s": pred.total_time if pred.fits else float("nan"),
                     "lower_s": lower, "upper_s": upper, "work_s": base.work, "depth_s": base.depth,
                     "critical_path": " -> ".join(base.critical_path())})
    return rows


def main(argv=None) -> int:
    """``python -m rlm_lab.experiments.work_depth --size cpu [--force] [--only decode_knee ...]``."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--only", nargs="*", choices=("decode_knee", "long_tail", "replicas"))
    args = ap.parse_args(argv)
    size = check_size(args.size)
    if args.only:
        for name in args.only:
            {"decode_knee": decode_knee, "long_tail": long_tail, "replicas": replicas}[name](size)
            print("recorded", name, f"load {_loadavg()[0]:.1f}", flush=True)
        return 0
    ensure_runs(size, force=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
