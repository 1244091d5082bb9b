"""Chapter 9's "run": nothing is trained here. It reads the evidence from the committed records, asks the cost
model and the placement advisor for predictions at scale, and prices the decision map's grid, all at build time,
so the chapter follows whatever records and predictor the checkout holds.

* :func:`evidence`: a guideline's measured quantity, its interval (:mod:`rlm_lab.evidence`) and its basis. Only
  repeats across runs decide (seeds, fresh runs, paired repeats) or exact counts: the measurement protocol
  (``rlm_lab.protocol``) was built because fresh processes of one workload differ far more than the steps inside
  one process, so an interval over the steps of one run says nothing about the next run and never decides;
* :data:`SCALE`: predictions at 8, 64 and 512 GPUs (a 7B GRPO step, 64 prompts x 8, 256 + 1024 tokens, bf16 on
  H100s, the workload of chapter 8), from :func:`rlm_lab.cost.advise.advise` and :mod:`rlm_lab.cost`;
* :func:`decision_grid`: for each model size, device count and response-length distribution, the advisor's
  fastest placement, and for a split placement its mode, staleness bound eta and device split;
* :func:`item_row`: one taxonomy item of the results page, every number a :class:`Cell` that names its record.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import random
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from ...errors import RlmLabError
from ...evidence import EXACT, Interval, bar_word, error_interval, mean_interval, repeat_interval, steps_interval
from ...record import RunRecord, load_record, reference_root, repo_root
from ...records.files import read_jsonl
from ...reference_report import arm_values
from ...supersession import superseded, superseded_by
from . import upstream as U
from .cases import DEVICES, MAP_LENGTHS, MAP_MODELS, REPO, Guideline, Item

PROFILE = "h100-sxm"    # the GPU profile every prediction at scale uses (chapter 8's)
DECIDING = ("seeds", "runs", "paired repeats", "exact count", "pre-registered test")


# ---- reading records ----------------------------------------------------------------------------------------

def records_root(size: str = "cpu") -> Path:
    return reference_root(size)


def plain(e: Exception) -> str:
    """An error's message as a page may show it: no machine path (the repository's own prefix is cut)."""
    return str(e).replace(f"{REPO}/", "").replace(str(REPO), ".")


def rel(path) -> str:
    """A record's path as the page shows it: relative to the repository."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else p.name


def folders(glob: str, root: Path) -> list[Path]:
    """The run folders under ``root`` whose names match ``glob`` (one level, never a path outside root)."""
    root = Path(root)
    if not root.is_dir():
        raise RlmLabError(f"no run records at {rel(root)}: the folder does not exist")
    out = sorted(p for p in root.iterdir() if p.is_dir() and fnmatch.fnmatchcase(p.name, glob))
    for p in out:
        if not p.resolve().is_relative_to(root.resolve()):
            raise RlmLabError(f"{rel(p)} leaves the records folder {rel(root)}")
    return out


def runs_of(folder: Path) -> list:
    """Every completed run of a folder, oldest first: the folder's own record.json, else its timestamped runs
    (one that did not complete is skipped, as chapter 5 reads them); none at all is an error naming the folder."""
    folder = Path(folder)
    if (folder / "record.json").exists():
        return [load_record(folder)]
    runs = []
    for d in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "record.json").exists()):
        try:
            runs.append(load_record(d))
        except RlmLabError:
            continue
    if not runs:
        raise RlmLabError(f"no completed run under {rel(folder)}")
    return runs


def seed_of(name: str) -> int:
    """The ``seed<k>`` suffix of a folder's name (a folder without one is seed 0)."""
    m = re.search(r"seed(\d+)$", name)
    return int(m.group(1)) if m else 0


def generation_share(r: dict) -> float:
    """The rollout worker's mean generation time per batch over the synchronous step (chapter 6's records keep
    the per-batch generation times their predictions were made from)."""
    return statistics.fmean(r["prediction"]["inputs"]["gen_s"]) / r["step_seconds_median"]


def sync_share(r: dict) -> float:
    """Seconds of one weight push over the step."""
    return r["sync"]["seconds_mean"] / r["step_seconds_median"]


def wire_bytes(r: dict) -> float:
    """Bytes a rank sent on the wire in one step, every collective counted (chapter 4's records)."""
    return float(sum(v["wire_bytes"] for v in r["comm"].values()))


METRICS = {"final_accuracy": U.final_accuracy, "tokens_per_s": U.tokens_per_s, "generation_share": generation_share,
           "sync_share": sync_share, "wire_bytes": wire_bytes}


def metric(rec, key: str) -> float:
    """``key`` of a record's results (dotted) or ``@name`` of :data:`METRICS`, as a finite number."""
    res = rec.results
    try:
        if key.startswith("@"):
            if key[1:] not in METRICS:
                raise RlmLabError(f"unknown metric {key}; known: {', '.join('@' + k for k in METRICS)}")
            v = METRICS[key[1:]](res)
        else:
            v = res
            for part in key.split("."):
                v = v[part]
    except (KeyError, TypeError, IndexError, ZeroDivisionError):
        raise RlmLabError(f"{rel(rec.dir)}: the record has no {key}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RlmLabError(f"{rel(rec.dir)}: {key} is {v!r}, not a finite number")
    return float(v)


def ref_value(ref: str, root: Path) -> tuple[float, str]:
    """``folder:metric`` read from the folder's newest completed run: (value, its record's path)."""
    folder, key = ref.split(":")
    (path,) = folders(folder, root) or [None]
    if path is None:
        raise RlmLabError(f"no record folder {folder} under {rel(root)}")
    rec = runs_of(path)[-1]
    return metric(rec, key), rel(rec.dir)


def target_value(target, root: Path) -> tuple[float, tuple]:
    """A test's target: a number, or ``ref`` / ``ref / ref`` read from records (value, the records read)."""
    if not isinstance(target, str):
        return float(target), ()
    parts = [ref_value(p.strip(), root) for p in target.split("/")]
    value = parts[0][0] / parts[1][0] if len(parts) == 2 else parts[0][0]
    return value, tuple(p[1] for p in parts)


# ---- evidence ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evidence:
    """A measured quantity: its interval (None: not testable), the basis of the interval, whether that basis may
    decide a verdict, the per-run (or per-pair) values, and every record read."""

    interval: Interval | None
    basis: str
    values: tuple = ()
    sources: tuple = ()
    note: str = ""
    decision: str | None = None   # a pre-registered test's own word (for | undecided), which decides instead

    @property
    def decides(self) -> bool:
        return self.interval is not None and self.basis in DECIDING and self.interval.decided


def _pairs(ev: dict, root: Path):
    a = {seed_of(p.name): p for p in folders(ev["a"], root)}
    b = {seed_of(p.name): p for p in folders(ev["b"], root)}
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise RlmLabError(f"no seed has records of both {ev['a']} and {ev['b']} under {rel(root)}")
    ma, mb = ev.get("metric_a", ev.get("metric")), ev.get("metric_b", ev.get("metric"))
    values, sources = [], []
    for s in seeds:
        ra, rb = runs_of(a[s])[-1], runs_of(b[s])[-1]
        x, y = metric(ra, ma), metric(rb, mb)
        if ev["stat"] == "ratio":
            if y <= 0:
                raise RlmLabError(f"{rel(rb.dir)}: {mb} is {y}, a ratio needs it positive")
            values.append(x / y)
        else:
            values.append(x - y)
        sources += [rel(ra.dir), rel(rb.dir)]
    return values, sources


def evidence(g: Guideline, root: Path | None = None) -> Evidence:
    """The guideline's evidence from the records under ``root`` (default: the committed cpu records). Evidence
    that reads a record a committed window replaces (:mod:`rlm_lab.supersession`) is never current: it decides
    nothing and says which window replaced it. An exact count (bytes on the wire) is not a timing: a window
    re-measures times, and a count read from a folder whose times it replaced stays current (the note says so)."""
    root = records_root() if root is None else Path(root)
    out = _evidence(g, root)
    replaced = superseded(root.name, root / "reference")
    hits = [(s, superseded_by(s, replaced)) for s in out.sources]
    hits = [(s, r) for s, r in hits if r is not None]
    if not hits:
        return out
    s, r = hits[0]
    if out.basis == "exact count":
        return Evidence(out.interval, out.basis, out.values, out.sources,
                        f"an exact count; the window {r.window} re-measured this folder's times, not its counts")
    note = f"reads {s}, which the window {r.window} replaces (its reference {r.reference}): not current"
    iv = out.interval
    return Evidence(Interval(iv.estimate, None, None, iv.n, iv.method), "superseded", out.values, out.sources, note)


def window_values(reference: str, stat: str, root: Path) -> tuple[list[float], str, float | None]:
    """The paired values of ``reference`` in the newest committed window that measured it, as ``a/b`` or
    ``b/a`` per pair, with the window's folder and its predicted ratio in the same orientation (None if none)."""
    base = root / "reference"
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            rec = RunRecord.load(d)
        except RlmLabError:
            continue
        ref = next((r for r in rec.results.get("references", []) if r.get("name") == reference), None)
        if ref is None:
            continue
        asked = next(c for c in rec.config["references"] if c["name"] == reference)
        a, b = asked["arms"]
        va, vb = ref["summary"]["values"][a], ref["summary"]["values"][b]
        vals = [x / y for x, y in zip(va, vb)] if stat == "a/b" else [y / x for x, y in zip(va, vb)]
        preds = {p["arm"]: p.get("predicted") for p in rec.results.get("predictions", []) if p.get("name") == reference}
        pred = None
        if preds.get(a) and preds.get(b):
            pred = preds[a] / preds[b] if stat == "a/b" else preds[b] / preds[a]
        return vals, rel(rec.dir), pred
    raise RlmLabError(f"no committed window under {rel(base)} measured the reference {reference}")


def pretest(name: str, sign: int) -> Evidence:
    """Chapter 6's pre-registered accuracy test ``name``: its word decides (``for`` when the Holm-adjusted exact
    sign-flip test rejects at its alpha, else ``undecided``); the interval shown is the mean paired difference's
    Student-t interval (times ``sign``), for its size."""
    A = U.accuracy_test
    finals, dirs = A.load_finals(repo_root() / A.ROOT)
    result = A.decide(finals)
    row = next((r for r in result["tests"] if r["test"] == name), None)
    if row is None or not row["diffs"]:
        raise RlmLabError(f"chapter 6's pre-registered test {name!r} has no paired runs under {A.ROOT}")
    iv = mean_interval([sign * d for d in row["diffs"]])
    word = "for" if result["status"] == "complete" and row["word"] == "decided" else "undecided"
    note = (f"chapter 6's pre-registered test {name}: exact one-sided sign-flip, Holm p = {row['p_holm']:.3f} at "
            f"alpha {result['alpha']:g} ({result['status']})")
    return Evidence(iv, "pre-registered test", tuple(row["diffs"]),
                    tuple(f"{A.ROOT}/{d}" for d in sorted(dirs.values())), note, word)


def _evidence(g: Guideline, root: Path) -> Evidence:
    ev = g.evidence
    kind = ev["kind"]
    if kind == "none":
        return Evidence(None, "not testable here", note=ev["why"])
    if kind == "paired":
        values, sources = _pairs(ev, root)
        return Evidence(repeat_interval(values), "seeds", tuple(values), tuple(sources))
    if kind == "per_run":
        values, sources = [], []
        for f in folders(ev["runs"], root):
            rec = runs_of(f)[-1]
            v = metric(rec, ev["value"]) / (metric(rec, ev["over"]) if "over" in ev else 1.0)
            values.append(v)
            sources.append(rel(rec.dir))
        if not values:
            raise RlmLabError(f"no record folder matches {ev['runs']} under {rel(root)}")
        return Evidence(repeat_interval(values), "seeds" if all("seed" in s for s in sources) else "runs",
                        tuple(values), tuple(sources))
    if kind == "runs":
        return _runs_ratio(ev, root)
    if kind == "window":
        vals, src, _ = window_values(ev["reference"], ev["stat"], root)
        return Evidence(repeat_interval(vals), "paired repeats", tuple(vals), (src,),
                        "fresh processes, interleaved, in one window (the measurement protocol)")
    if kind == "pretest":
        return pretest(ev["test"], ev["sign"])
    if kind in ("repeats", "protocol"):
        folder, key = ev["reps"].split(":") if kind == "repeats" else (ev["record"], "summary.ratios")
        (path,) = folders(folder, root) or [None]
        if path is None:
            raise RlmLabError(f"no record folder {folder} under {rel(root)}")
        rec = runs_of(path)[-1]
        reps = _list(rec, key)
        return Evidence(repeat_interval(reps), "paired repeats" if len(reps) > 1 else "one run", tuple(reps),
                        (rel(rec.dir),), "fresh processes, interleaved (the measurement protocol)"
                        if kind == "protocol" else "")
    v, src = ref_value(ev["value"], root)
    sources = [src]
    if "over" in ev:
        o, src_o = ref_value(ev["over"], root)
        v, sources = v / o, sources + [src_o]
    if kind == "exact":
        return Evidence(Interval(v, v, v, 1, EXACT), "exact count", (v,), tuple(sources))
    return Evidence(Interval(v, None, None, 1), "one run", (v,), tuple(sources))


def _list(rec, key: str) -> list[float]:
    v = rec.results
    try:
        for part in key.split("."):
            v = v[part]
    except (KeyError, TypeError):
        raise RlmLabError(f"{rel(rec.dir)}: the record has no {key}") from None
    if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v):
        raise RlmLabError(f"{rel(rec.dir)}: {key} is not a list of finite numbers")
    return [float(x) for x in v]


def _runs_ratio(ev: dict, root: Path) -> Evidence:
    """a / b over every completed run of two sides (a side: one folder, or a list whose runs are pooled). Enough
    runs each for an interval (:func:`rlm_lab.evidence.repeat_interval`): the ratio of their estimates with the
    conservative interval [lo_a / hi_b, hi_a / lo_b] of two independent intervals; fewer: no interval."""
    sides = []
    for k in ("a", "b"):
        runs = []
        for name in ev[k] if isinstance(ev[k], list) else [ev[k]]:
            (path,) = folders(name, root) or [None]
            if path is None:
                raise RlmLabError(f"no record folder {name} under {rel(root)}")
            runs += runs_of(path)
        sides.append(([metric(r, ev["metric"]) for r in runs], [rel(r.dir) for r in runs]))
    (va, sa), (vb, sb) = sides
    ia, ib = repeat_interval(va), repeat_interval(vb)
    est = ia.estimate / ib.estimate
    if ia.decided and ib.decided and ib.lo > 0:
        iv = Interval(est, ia.lo / ib.hi, ia.hi / ib.lo, min(len(va), len(vb)), ia.method)
        return Evidence(iv, "runs", (est,), tuple(sa + sb))
    return Evidence(Interval(est, None, None, min(len(va), len(vb))), "one run each" if max(len(va), len(vb)) == 1
                    else "too few runs", (est,), tuple(sa + sb),
                    note=f"{len(va)} and {len(vb)} completed run(s): fewer than 3 have no interval")


# ---- predictions at scale -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    """A prediction at one device count: the value (None: the predictor cannot price it) and what it is."""

    devices: int
    value: float | None
    note: str = ""


def workload(lengths: str | None = None):
    """Chapter 8's 7B GRPO workload, with the response lengths of :data:`MAP_LENGTHS` ``lengths`` if given."""
    wl = U.workload_7b()
    if lengths is None:
        return wl

    return replace(wl, response=U.ResponseLengths(**MAP_LENGTHS[lengths]))


@dataclass(frozen=True)
class Advised:
    """The advisor's answer for one point: the fastest placement overall, on one set, and with a separate
    rollout set (the last two may be None when nothing of that kind fits)."""

    best: object
    one_set: object
    split: object
    considered: int


@functools.lru_cache(maxsize=None)
def bare_profile():
    """:data:`PROFILE` with every assumed overhead at 0 (the per-call overheads of ``rlm_lab.cost.assumed``'s
    groups and TRL's per-step bookkeeping: round figures, not measured on the device): what a row of the map
    is without them."""
    prof = U.load_profile(PROFILE)
    keys = [k for group in U.OVERHEAD_GROUPS.values() for k in group] + list(U.ASSUMED_TRL_STEP)
    d = prof.to_dict()
    d["overhead"] = dict(prof.overhead) | {k: 0.0 for k in keys}
    d["name"] = prof.name + "-no-assumed-overheads"
    return U.load_profile(d)


@functools.lru_cache(maxsize=None)
def advised(devices: int, model: str = "qwen2.5-7b", lengths: str | None = None, bare: bool = False) -> Advised:
    """:func:`rlm_lab.cost.advise.advise` for a GRPO step (beta 0) of ``model`` on ``devices`` H100s (cached: the
    guidelines, the results page and the map ask the same points); ``bare``: on :func:`bare_profile`."""
    path = MAP_MODELS.get(model, U.MODEL_7B)
    adv = U.advise(str(REPO / path), U.algorithm("grpo", 0), workload(lengths), U.Cluster(devices, "gpu"),
                   bare_profile() if bare else PROFILE)
    one = next((p for p in adv.ranked if not p.placement.rollout_separate), None)
    split = next((p for p in adv.ranked if p.placement.rollout_separate), None)
    return Advised(adv.ranked[0], one, split, adv.considered)


def sides(pp) -> tuple[float, float, float]:
    """(g, t, s) of a placement prediction: reshard + generation, the trainer's phases, the weight sync."""
    ph = {p: t for p, (t, _) in pp.phases.items()}
    return ph["reshard"] + ph["generation"], ph["preparation"] + ph["advantage"] + ph["training"], ph["sync"]


def _split(n: int):
    d = advised(n).split
    if d is None:
        raise RlmLabError(f"no split placement fits {n} GPUs")
    return d


def one_step_off_speedup(n: int) -> Point:
    d = _split(n)
    return Point(n, d.step_s / U.mode_step(d, "one_step_off"), f"best split {d.placement.describe()}")


def split_balance(n: int) -> Point:
    g, t, s = sides(_split(n))
    return Point(n, abs(g - (t + s)) / max(g, t + s), "|g - (t + s)| / max on the advisor's best split")


def split_over_colocated(n: int) -> Point:
    a = advised(n)
    if a.split is None or a.one_set is None:
        return Point(n, None, "one of the two kinds does not fit")
    return Point(n, a.split.step_s / a.one_set.step_s, f"{a.split.placement.describe()} / {a.one_set.placement.describe()}")


def generation_share_at(n: int) -> Point:
    b = advised(n).best
    return Point(n, b.phases["generation"][0] / b.step_s, f"generation / step on {b.placement.describe()}")


def _lora_pair(n: int):
    d = _split(n)
    alg, c = U.algorithm("grpo", 0), U.Cluster(n, "gpu")
    full = U.predict_placement(d.placement, str(REPO / U.MODEL_7B), alg, workload(), PROFILE, c)
    lora = U.predict_placement(d.placement, str(REPO / U.MODEL_7B), alg, workload(), PROFILE, c, lora=U.Lora())
    return full, lora


def lora_sync_bytes(n: int) -> Point:
    full, lora = _lora_pair(n)
    spec = U.model_spec(str(REPO / U.MODEL_7B))
    ratio = spec.params / U.lora_params(spec, U.Lora())
    return Point(n, (full.sync_bytes / lora.sync_bytes) / ratio, "predicted bytes ratio / parameter ratio")


def lora_sync_time(n: int) -> Point:
    full, lora = _lora_pair(n)
    return Point(n, (full.phases["sync"][0] / lora.phases["sync"][0]) / (full.sync_bytes / lora.sync_bytes),
                 "predicted sync-time ratio / bytes ratio")


def async_speedup(n: int, eta: int = 4) -> Point:
    a = advised(n)
    d = _split(n)
    return Point(n, a.best.step_s / U.mode_step(d, "async", eta),
                 f"fastest synchronous step / eta = {eta} on {d.placement.describe()}")


def capacity_bound(n: int, eta: int = 2) -> Point:
    g, t, s = sides(_split(n))
    tight = U.simulate([g] * 64, [t] * 64, eta, s, replicas=eta + 1)
    loose = U.simulate([g] * 64, [t] * 64, eta, s, replicas=2 * (eta + 1))
    return Point(n, tight.step_s / loose.step_s, f"eta {eta}: {eta + 1} rollout replicas against {2 * (eta + 1)}")


def sync_share_at(n: int) -> Point:
    d = _split(n)
    return Point(n, d.phases["sync"][0] / d.step_s, f"exposed sync / step on {d.placement.describe()}")


def _hybrid(n: int, gen_tp: int):
    p = U.get_placement("hybrid", U.Cluster(n, "gpu"), U.algorithm("grpo", 0), gen_tp=gen_tp)
    return U.predict_placement(p, str(REPO / U.MODEL_7B), U.algorithm("grpo", 0), workload(), PROFILE,
                               U.Cluster(n, "gpu"))


def reshard_share(n: int) -> Point:
    pp = _hybrid(n, 2)
    return Point(n, pp.phases["reshard"][0] / pp.step_s, "reshard / step, hybrid engine with t_g = 2")


def rollout_tp(n: int) -> Point:
    """Qwen2.5-7B's 28 attention heads allow tensor-parallel sizes 1, 2, 4 (7 and 14 do not divide the GPUs)."""
    wide, narrow = _hybrid(n, 4), _hybrid(n, 1)
    if not (wide.fits and narrow.fits):
        return Point(n, None, "a layout does not fit")
    return Point(n, wide.phases["generation"][0] / narrow.phases["generation"][0],
                 "generation with t_g = 4 / with t_g = 1 (hybrid engine)")


def zero3_volume(n: int) -> Point:
    m = U.model_spec(str(REPO / U.MODEL_7B)).params * 2
    return Point(n, U.comm.zero3_bytes(m, n) / U.comm.dp_allreduce_bytes(m, n), "ZeRO-3 / DDP bytes per rank")


def pp_bubble_at(n: int, stages: int = 8, micro: int = 8) -> Point:
    """8 pipeline stages; the step's sequences over n / 8 data-parallel replicas, micro-batches of 8."""
    seqs = workload().n // max(1, n // stages)
    m = max(1, seqs // micro)
    return Point(n, U.comm.pp_bubble(stages, m), f"{stages} stages, {m} micro-batches per replica")


@functools.lru_cache(maxsize=None)
def tail_lengths(n: int = 512) -> tuple:
    """``n`` response lengths drawn (seeded) from the map's long-tail distribution."""
    d = MAP_LENGTHS["long tail (median 256, cap 4096)"]
    rng = random.Random(0)
    return tuple(min(d["max"], max(d["min"], round(math.exp(math.log(d["median"]) + d["sigma"] * rng.gauss(0, 1)))))
                 for _ in range(n))


@functools.lru_cache(maxsize=None)
def _device_free_gains() -> dict:
    """The long-tail techniques' predicted gains on the long-tail lengths: they do not depend on the devices."""
    lengths = list(tail_lengths())
    return {"packing": 1 / U.cost_longtail.padded_fraction(lengths, 8),
            "overprovision": U.cost_longtail.overprovision(lengths, 16, 24)["speedup"],
            "tail_batching": U.cost_longtail.tail_batching(lengths, 64)["speedup"]}


def packing_gain(n: int) -> Point:
    return Point(n, _device_free_gains()["packing"],
                 "padded / useful token slots, micro-batches of 8, long-tail lengths (independent of devices)")


def overprovision_gain(n: int) -> Point:
    return Point(n, _device_free_gains()["overprovision"],
                 "E[X(16:16)] / E[X(16:24)], long-tail lengths (independent of devices)")


def tail_batching_gain(n: int) -> Point:
    return Point(n, _device_free_gains()["tail_batching"],
                 "rounds of 64, the longest quarter apart (independent of devices)")


def dispatch_gain(n: int) -> Point:
    workers = max(2, n // 8)
    rr = U.cost_longtail.dispatch_makespan(list(tail_lengths()), workers, "round_robin")
    lpt = U.cost_longtail.dispatch_makespan(list(tail_lengths()), workers, "lpt")
    return Point(n, rr / lpt, f"512 long-tail requests over {workers} rollout replicas")


def kv_headroom(n: int, fraction: float = 0.5) -> Point:
    """The cost model's KV-cache-limited engine (:func:`rlm_lab.cost.engine.kv_capacity`): at a memory fraction
    of 0.5, the KV-cache tokens of one tensor-parallel-1 replica per H100 over the tokens its share of the step's
    sequences holds at their longest (prompt + response each; the step's sequences spread over ``n`` replicas, as
    colocated on ``n`` GPUs). Above 1: the cache holds the whole share, so the lower end of the range costs no
    preemption at this workload."""
    prof = U.load_profile(PROFILE)
    spec = U.model_spec(str(REPO / U.MODEL_7B))
    seqs, chunk = U.vllm_defaults(prof)
    k, _, _ = U.kv_capacity(spec, 2, fraction * float(prof.memory_bytes), seqs, chunk)
    wl = workload()
    need = (wl.n / n) * (wl.prompt_len + max(wl.lengths()))
    return Point(n, k / need, f"KV tokens at memory fraction {fraction:g} / tokens of the replica's sequences")


SCALE = {"one_step_off_speedup": one_step_off_speedup, "split_balance": split_balance,
         "split_over_colocated": split_over_colocated, "generation_share": generation_share_at,
         "lora_sync_bytes": lora_sync_bytes, "lora_sync_time": lora_sync_time, "async_speedup": async_speedup,
         "capacity_bound": capacity_bound, "sync_share": sync_share_at, "reshard_share": reshard_share,
         "rollout_tp": rollout_tp, "zero3_volume": zero3_volume, "pp_bubble": pp_bubble_at,
         "packing_gain": packing_gain, "overprovision_gain": overprovision_gain,
         "tail_batching_gain": tail_batching_gain, "dispatch_gain": dispatch_gain, "kv_headroom": kv_headroom}


def predict_at_scale(g: Guideline, devices=DEVICES) -> list[Point]:
    """The guideline's prediction at each device count ([] when it has none)."""
    if g.predict is None:
        return []
    out = []
    for n in devices:
        try:
            out.append(SCALE[g.predict](n))
        except RlmLabError as e:
            out.append(Point(n, None, plain(e)))
    return out


# ---- the decision map ------------------------------------------------------------------------------------------

def batch_gen_times(g: float, lengths: str, n: int, batches: int = 64) -> list[float]:
    """Per-batch generation seconds around the predicted ``g``: a static batch runs until its longest response,
    so batch i costs g x max_i / mean(max) with max_i the longest of ``n`` lengths drawn (seeded) from the
    distribution; a fixed length gives ``g`` every batch."""
    d = MAP_LENGTHS[lengths]
    if d["kind"] == "fixed":
        return [g] * batches
    rng = random.Random(1)
    mu = math.log(d["median"])
    maxima = [min(d["max"], max(math.exp(mu + d["sigma"] * rng.gauss(0, 1)) for _ in range(n))) for _ in range(batches)]
    mean = statistics.fmean(maxima)
    return [g * m / mean for m in maxima]


def decide(devices: int, model: str, lengths: str) -> dict:
    """One point of the decision map: the advisor's fastest one-set placement against its fastest split placement
    run in the mode :func:`rlm_lab.cost.asynchrony.advise_mode` picks (the smallest eta within 5 % of the best
    simulated step); the faster of the two, with its mode, eta, device split and step."""
    row = {"model": model, "devices": devices, "lengths": lengths}
    empty = {"placement": None, "kind": None, "mode": None, "eta": None, "split": None, "step_s": None,
             "sync_step_s": None, "considered": None}
    try:
        a = advised(devices, model, lengths)
    except RlmLabError as e:   # nothing fits: the map says so at that point
        return row | empty | {"note": plain(e)}
    row["considered"] = a.considered
    options = []
    if a.one_set is not None:
        options.append({"placement": a.one_set.placement.describe(), "kind": a.one_set.placement.name, "mode": "sync",
                        "eta": 0, "split": f"{devices} shared", "step_s": a.one_set.step_s,
                        "sync_step_s": a.one_set.step_s})
    if a.split is not None:
        g, t, s = sides(a.split)
        mode = U.advise_mode(batch_gen_times(g, lengths, workload(lengths).n), t, s)
        rollout = sum(x.devices for x in a.split.placement.sets if x.name == a.split.placement.roles["rollout"])
        options.append({"placement": a.split.placement.describe(), "kind": "split", "mode": mode["mode"],
                        "eta": mode["eta"], "split": f"{rollout} rollout + {devices - rollout} train",
                        "step_s": mode["step_s"], "sync_step_s": a.split.step_s})
    if not options:
        return row | empty | {"considered": a.considered, "note": "no placement fits"}
    best = min(options, key=lambda o: o["step_s"])
    bare = advised(devices, model, lengths, bare=True).best
    return row | best | {"note": "", "bare_step_s": bare.step_s, "bare_placement": bare.placement.describe(),
                         "bare_moved": bare.step_s / a.best.step_s - 1,
                         "bare_same": bare.placement.describe() == a.best.placement.describe()}


def decision_grid(models, devices, lengths) -> list[dict]:
    """:func:`decide` over the grid (models x devices x length distributions)."""
    return [decide(n, m, ln) for ln in lengths for m in models for n in devices]


# ---- the results page: one taxonomy item, every number traced to a record ---------------------------------------

@dataclass(frozen=True)
class Cell:
    """One number of the results page and where it comes from: ``sources`` are the record paths it is read from
    (``kind`` measured) or the record holding the prediction made before the run; a live prediction of the cost
    model names its inputs in ``note`` and has no source."""

    value: object
    kind: str = "text"             # measured | predicted | error | verdict | text
    sources: tuple = ()
    interval: Interval | None = None
    basis: str = ""
    note: str = ""


NONE = Cell("-", "text")


def _steps(rec) -> list[float]:
    """Step seconds after the first (which pays set-up) from a run's metrics.jsonl."""
    rows = [r for r in read_jsonl(Path(rec.dir) / "metrics.jsonl") if r.get("step_time") is not None]
    return [float(r["step_time"]) for r in rows[1:]] or [float(r["step_time"]) for r in rows]


def measured_step(folder: Path) -> Cell:
    """A placement's measured step: over fresh runs when the folder holds several (the median of each run's
    median step), else the steps of its one run (an interval that does not decide)."""
    runs = runs_of(folder)
    if len(runs) > 1:
        vals = [r.results["step_seconds_median"] for r in runs]
        iv = repeat_interval(vals)
        return Cell(iv.estimate, "measured", tuple(rel(r.dir) for r in runs), iv, "runs")
    steps = _steps(runs[0])
    iv = steps_interval(steps)
    return Cell(iv.estimate, "measured", (rel(runs[0].dir),), iv, "steps of one run")


def _error_and_bar(pred: Cell, meas: Cell, bar: float) -> tuple[Cell, Cell]:
    if not isinstance(pred.value, (int, float)) or meas.interval is None:
        return NONE, Cell("undecided", "verdict", note="nothing predicted")
    err = error_interval(float(pred.value), meas.interval)
    decides = meas.basis in DECIDING
    word = bar_word(err, bar) if decides and err.decided else "undecided"
    why = "" if decides else f"{meas.basis}: not a repeat across runs"
    return (Cell(err.estimate, "error", pred.sources + meas.sources, err, meas.basis),
            Cell(word, "verdict", note=why))


def item_row(item: Item, root: Path | None = None, gpu_root: Path | None = None, bar: float = 0.25) -> dict:
    """The results page's row of ``item``: predicted here, measured here with its interval, the error and the bar
    (met / not met / undecided, from the interval), the GPU record if any, and the prediction at 64 GPUs."""
    root = records_root() if root is None else Path(root)
    gpu_root = records_root("gpu") if gpu_root is None else Path(gpu_root)
    pred, meas, what = ITEM_SOURCES[item.source](item, root)
    history = NONE
    replaced = superseded(root.name, root / "reference")
    hit = next((r for r in map(lambda s: superseded_by(s, replaced), meas.sources) if r is not None), None)
    if hit is not None:
        history = meas
        pred, meas = window_cells(item, hit, root, meas)
    err, word = _error_and_bar(pred, meas, bar)
    gpu = NONE
    if gpu_root.is_dir():
        try:
            _, gmeas, _ = ITEM_SOURCES[item.source](item, gpu_root)
            gpu = gmeas
        except RlmLabError:
            gpu = NONE
    return {"item": item, "what": what, "predicted": pred, "measured": meas, "error": err, "bar": word, "gpu": gpu,
            "scale": item_scale(item), "history": history}


def window_cells(item: Item, r, root: Path, old: Cell) -> tuple[Cell, Cell]:
    """(predicted, measured) of an item whose record the window of ``r`` (a
    :class:`rlm_lab.supersession.Replacement`) replaces: the window's arm (a time) or, for a long-tail gain, the
    baseline arm over the technique's arm per pair, each with the window's prediction made before its first repeat.
    A quantity the window did not measure (a weight sync's seconds) is marked superseded and decides nothing."""
    a, b = r.arms

    rec = RunRecord.load(REPO / r.window)
    ref = next(x for x in rec.results["references"] if x["name"] == r.reference)
    preds = {p["arm"]: p.get("predicted") for p in rec.results.get("predictions", []) if p.get("name") == r.reference}
    vals = ref["summary"]["values"]
    if item.source == "ch07":
        v, p = [y / x for x, y in zip(vals[a], vals[b])], (preds[b] / preds[a] if preds.get(a) and preds.get(b)
                                                           else None)
    elif item.source in ("ch04", "ch05") and item.record in (a, b):
        # the arm's step is one quantity in the window: every repeat of it, over all the references that ran it
        v, p = arm_values(rec, ref["chapter"])[item.record][0], preds.get(item.record)
    else:
        return NONE, Cell(old.value, "measured", old.sources, Interval(float(old.value), None, None, 1), "superseded",
                          f"the window {r.window} replaced this record and did not measure this quantity")
    iv = repeat_interval(v)
    pred = Cell(p, "predicted", (r.window,), note="the window's prediction, made before its first repeat") \
        if p is not None else NONE
    refs = ", ".join(arm_values(rec, ref["chapter"])[item.record][1]) if item.source != "ch07" else r.reference
    return pred, Cell(iv.estimate, "measured", (r.window,), iv, "paired repeats",
                      f"reference {refs} of the window (replaces the earlier record)")


@functools.lru_cache(maxsize=None)
def _ch04_profile(root: Path):
    """The profile of the machine that made chapter 4's records under ``root`` (their provenance names it)."""
    return U.ch04_report.calibrated_profile(_ch04_records(root))


@functools.lru_cache(maxsize=None)
def _ch04_records(root: Path) -> tuple:
    return tuple(U.ch04_records(root))


def _ch04(item: Item, root: Path):
    recs = [r for r in _ch04_records(Path(root)) if r.results["layout"]["name"] == item.record]
    if not recs:
        raise RlmLabError(f"no chapter 4 record of layout {item.record} under {rel(root)}")
    rec = recs[0]
    profile = _ch04_profile(Path(root))
    iv = steps_interval(rec.results["step_s"])
    meas = Cell(iv.estimate, "measured", (rel(rec.dir),), iv, "steps of one run")
    pred = NONE
    if profile is not None:
        t, _ = U.ch04_step_time(rec, profile)
        pred = Cell(t["total_s"], "predicted", note=f"cost model now, profile {profile.name}")
    return pred, meas, f"seconds per training step, {rec.results['world']} ranks, {rec.results['model']} model"


def _ch05_folder(item: Item, root: Path) -> Path:
    (path,) = folders(f"ch05_{item.record}", root) or [None]
    if path is None:
        raise RlmLabError(f"no record folder ch05_{item.record} under {rel(root)}")
    return path


def _ch05(item: Item, root: Path):
    folder = _ch05_folder(item, root)
    rec = runs_of(folder)[-1]
    pred = Cell(metric(rec, "prediction.step_s"), "predicted", (rel(rec.dir),), note="stored before the run")
    return pred, measured_step(folder), f"seconds per GRPO/PPO step, {rec.results.get('describe', '')}"


def _ch05_sync(item: Item, root: Path):
    folder = _ch05_folder(item, root)
    runs = runs_of(folder)
    rec = runs[-1]
    pred = Cell(metric(rec, "prediction.sync_s"), "predicted", (rel(rec.dir),), note="stored before the run")
    vals = [metric(r, "sync.seconds_mean") for r in runs]
    if len(vals) > 1:
        iv = repeat_interval(vals)
        meas = Cell(iv.estimate, "measured", tuple(rel(r.dir) for r in runs), iv, "runs")
    else:
        meas = Cell(vals[0], "measured", (rel(rec.dir),), Interval(vals[0], None, None, 1), "one run")
    return pred, meas, f"seconds per weight sync ({rec.results['sync']['mode']})"


def _ch05_reshard(item: Item, root: Path):
    rec = runs_of(_ch05_folder(item, root))[-1]
    v = metric(rec, "measured_received_per_device")
    pred = Cell(metric(rec, "formula_received_per_device"), "predicted", (rel(rec.dir),),
                note="HybridFlow's formula M (s - t_g) / (t_g s)")
    return pred, Cell(v, "measured", (rel(rec.dir),), Interval(v, v, v, 1, EXACT), "exact count"), \
        "bytes each device receives in the reshard"


def _ch06(item: Item, root: Path):
    """The mode's speed-up over the synchronous step, paired by seed (TRL's truncated IS on in both: the same
    per-step work), measured and as predicted before each run from its seed's synchronous stage times."""
    mode = {p.name: p for p in folders(f"ch06_{item.record}_tis_seed*", root)}
    sync = {seed_of(p.name): p for p in folders("ch06_sync_tis_seed*", root)}
    pairs = [(sync[seed_of(n)], p) for n, p in sorted(mode.items()) if seed_of(n) in sync]
    if not pairs:
        raise RlmLabError(f"no seed has both ch06_{item.record}_tis and ch06_sync_tis records under {rel(root)}")
    meas_v, pred_v, src = [], [], []
    for s, m in pairs:
        rs, rm = runs_of(s)[-1], runs_of(m)[-1]
        meas_v.append(metric(rs, "step_seconds_median") / metric(rm, "step_seconds_median"))
        pred_v.append(metric(rm, "prediction.inputs.step_s") / metric(rm, "prediction.step_s"))
        src += [rel(rs.dir), rel(rm.dir)]
    iv = repeat_interval(meas_v)
    pred = Cell(statistics.median(pred_v), "predicted", tuple(src[1::2]), note="stored before each run (median)")
    return pred, Cell(iv.estimate, "measured", tuple(src), iv, "seeds"), "speed-up over the synchronous step (x)"


def _ch07(item: Item, root: Path):
    (path,) = folders(f"ch07_{item.record}", root) or [None]
    if path is None:
        raise RlmLabError(f"no record folder ch07_{item.record} under {rel(root)}")
    rec = runs_of(path)[-1]
    row = U.ch07_gain_row(item.record, rec)
    key, meaning = U.CH07_GAIN[item.record]
    spread = rec.results["measured"].get(f"{key}_spread")
    reps = spread.get("reps") if spread else None
    iv = repeat_interval(reps) if reps else Interval(row["measured gain"], None, None, 1)
    basis = "paired repeats" if reps and len(reps) > 1 else "one run"
    pred = Cell(row["predicted gain"], "predicted", (rel(rec.dir),), note="stored before the run")
    return pred, Cell(iv.estimate, "measured", (rel(rec.dir),), iv, basis), meaning


ITEM_SOURCES = {"ch04": _ch04, "ch05": _ch05, "ch05_sync": _ch05_sync, "ch05_reshard": _ch05_reshard, "ch06": _ch06,
                "ch07": _ch07}


def _placement_at(n: int, name: str, **kw):
    alg, c = U.algorithm("grpo", 0), U.Cluster(n, "gpu")
    return U.predict_placement(U.get_placement(name, c, alg, **kw), str(REPO / U.MODEL_7B), alg, workload(), PROFILE, c)


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def item_scale(item: Item, n: int = 64) -> Cell:
    """The item's prediction for the 7B GRPO workload at ``n`` H100s (text with the number; a prediction)."""
    if item.scale is None:
        return Cell("not predicted at scale", "text", note="the cost model has no term for it")
    spec = U.model_spec(str(REPO / U.MODEL_7B))
    m = spec.params * 2
    try:
        if item.scale == "dp":
            v, text = U.comm.dp_allreduce_bytes(m, n), "gradient all-reduce per GPU per step"
            return Cell(f"{_gib(v)} ({text}, {n} GPUs)", "predicted")
        if item.scale == "zero3":
            return Cell(f"{_gib(U.comm.zero3_bytes(m, n))} (2 all-gathers + reduce-scatter per GPU, {n} GPUs)",
                        "predicted")
        if item.scale == "tp":
            v = U.comm.tp_message_bytes(8, 1280, spec.hidden) * U.comm.tp_layer_allreduces() * spec.layers
            return Cell(f"{_gib(v)} all-reduced per micro-batch of 8 (TP 8, every layer)", "predicted")
        if item.scale == "pp":
            p = pp_bubble_at(n)
            return Cell(f"bubble {p.value:.0%} ({p.note}, {n} GPUs)", "predicted")
        if item.scale == "cp":
            v = U.comm.cp_ring_bytes(32768, spec.kv_heads, spec.head_dim, 8) * spec.layers
            return Cell(f"{_gib(v)} of K/V per rank per forward (32k tokens, CP 8)", "predicted")
        if item.scale == "ep":
            return Cell("the 7B model is dense: no experts to place", "text")
        if item.scale in ("colocated", "disaggregated", "hybrid"):
            pp = {"colocated": lambda: advised(n).one_set if advised(n).one_set.placement.name == "colocated"
                  else _placement_at(n, "colocated", zero=3), "disaggregated": lambda: _split(n),
                  "hybrid": lambda: _hybrid(n, 2)}[item.scale]()
            return Cell(f"{pp.step_s:.2f} s per step ({pp.placement.describe()})", "predicted")
        if item.scale == "lora":
            _, lora = _lora_pair(n)
            return Cell(f"{lora.step_s:.2f} s per step, sync {lora.phases['sync'][0] * 1e3:.2f} ms", "predicted")
        if item.scale == "sync":
            d = _split(n)
            return Cell(f"{d.phases['sync'][0] * 1e3:.1f} ms per sync ({_gib(d.sync_bytes)})", "predicted")
        if item.scale == "reshard":
            pp = _hybrid(n, 2)
            return Cell(f"{pp.phases['reshard'][0] * 1e3:.1f} ms per reshard (t_g = 2)", "predicted")
        if item.scale == "async":
            eta = {"one_step_off": 1, "eta2": 2, "eta4": 4, "eta8": 8, "async": 8}[item.record]
            d = _split(n)
            v = d.step_s / U.mode_step(d, "one_step_off" if eta == 1 else "async", eta)
            return Cell(f"{v:.2f}x the synchronous step ({d.placement.describe()})", "predicted")
        fn = {"overprovision": overprovision_gain, "tail_batching": tail_batching_gain, "dispatch": dispatch_gain,
              "packing": packing_gain}[item.scale]
        p = fn(n)
        return Cell(f"{p.value:.2f}x ({p.note})", "predicted")
    except RlmLabError as e:
        return Cell(f"not predicted: {plain(e)}", "text")
