"""``rlm-lab advise --from``: the one change to an imported run with the largest predicted gain.

Candidates, each one change of the imported placement or mode (priced by :func:`.common.predict_imported`):

- **split**: move GPUs between the rollout set and the trainer's set (every size up to 16 GPUs, beyond that
  powers of two and eighths of the GPUs, the grid of :func:`rlm_lab.cost.advise.set_sizes`); from one set, disaggregate (synchronous, and with one-step-off,
  since a split pays only when the sides overlap); from separate sets, colocate everything on one set (the hybrid
  engine, ZeRO-3);
- **mode / eta**: with a separate rollout set, synchronous, one-step-off and asynchronous with eta 2, 4, 8
  (:mod:`rlm_lab.cost.asynchrony`);
- **TP**: the generation tensor-parallel size (the hybrid engine's t_g or the rollout set's tp) in 1, 2, 4, 8;
- memory: a trainer set below ZeRO-3 moved to ZeRO-3, the training micro-batch (or its token budget) doubled,
  halved or quartered, offload removed or added (params and optimizer; the frozen models);
- engine: its memory fraction (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static) +-0.2 and its
  ``max_num_seqs`` doubled or halved.

A change whose predicted step is within the validated error on ratios (``data/published/validation.json``) of the
imported one is marked "not distinguishable".

The pick is the fastest candidate that fits; when the imported run does not fit, the fastest that does. Every
number is a prediction of the cost model, with the assumptions the report lists.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from ...cost.units import _bytes, _seconds
from ...cost.validated import VALIDATION_FILE
from ...errors import RlmLabError
from .common import Imported, ImportPrediction, one_set, predict_imported, set_dict

MODES = (("sync", 0), ("one_step_off", 1), ("async", 2), ("async", 4), ("async", 8))


@dataclass
class Candidate:
    change: str          # what changes, in words
    kind: str            # split | mode | eta | tp | zero
    prediction: ImportPrediction

    @property
    def fits(self) -> bool:
        return self.prediction.fits


def _sets(imp: Imported):
    p = imp.config["placement"]
    rollout = p["roles"]["rollout"]
    actor = p["roles"]["actor"]
    return p, rollout, actor


def candidates(imp: Imported, max_tp: int = 8) -> list[tuple[str, str, Imported]]:
    """(change, kind, changed import) for every single change of the module docstring."""
    p, rname, aname = _sets(imp)
    sets = {s["name"]: s for s in p["sets"]}
    out = []
    wl = imp.config.get("workload") or {}
    micro = wl.get("micro_batch")
    if isinstance(micro, int):
        for m in sorted({micro * 2, micro // 2, micro // 4, 1} - {0, micro}, reverse=True):
            out.append((f"micro-batch (or its token budget): {micro} -> {m} sequences per GPU per forward/backward",
                        "micro_batch", imp.with_changes(workload={"micro_batch": m})))
    offload = list(wl.get("offload") or ())
    if offload:
        out.append((f"offload: {', '.join(offload)} -> none (everything stays on the GPU)", "offload",
                    imp.with_changes(workload={"offload": []})))
    for kinds in (["params", "optimizer"], ["frozen"]):
        if not set(kinds) <= set(offload):
            new = sorted(set(offload) | set(kinds))
            out.append((f"offload: {', '.join(offload) or 'none'} -> {', '.join(new)}", "offload",
                        imp.with_changes(workload={"offload": new})))
    if imp.engine:
        e, frac = imp.engine, imp.engine["memory_fraction"]
        for f in sorted({round(min(0.95, frac + 0.2), 2), round(max(0.1, frac - 0.2), 2)} - {frac}):
            out.append((f"engine memory fraction (gpu_memory_utilization / mem_fraction_static): {frac:g} -> {f:g}",
                        "memory_fraction", _with_engine(imp, memory_fraction=f)))
        for m in sorted({e["max_num_seqs"] * 2, max(1, e["max_num_seqs"] // 2)} - {e["max_num_seqs"]}):
            out.append((f"max_num_seqs: {e['max_num_seqs']} -> {m} sequences per engine replica", "max_num_seqs",
                        _with_engine(imp, max_num_seqs=m, in_flight=None)))
    tps = [t for t in (1, 2, 4, 8, 16) if t <= max_tp]
    roles = list(p["roles"])
    if rname == aname:                       # one set for generation and training
        s = sets[aname]
        devices, zero = s["devices"], s.get("zero", 0)
        gen_tp = s.get("gen_tp") or s.get("tp", 1)
        pp = s.get("pp", 1)
        for r in set_sizes(devices):
            if r >= devices or r % gen_tp or (devices - r) % (s.get("tp", 1) * pp):
                continue
            # the trainer keeps its layout (tp, pp; a pipeline-parallel trainer its ZeRO stage)
            two = _two(p, roles, r, devices - r, gen_tp, zero if pp > 1 else max(zero, 3) if zero else 3,
                       s.get("tp", 1), pp)
            out.append((f"split: rollout on {r} GPUs, training on {devices - r} (synchronous)", "split",
                        imp.with_changes(placement=two, mode="sync", eta=0)))
            out.append((f"split + mode: rollout on {r} GPUs, training on {devices - r}, one-step-off (eta 1)", "split",
                        imp.with_changes(placement=two, mode="one_step_off", eta=1)))
        for t in tps:
            if t != gen_tp and devices % t == 0 and p.get("reshard"):
                q = copy.deepcopy(p)
                q["sets"][0]["gen_tp"] = t if t > 1 else 0
                out.append((f"TP: generation tensor-parallel size {gen_tp} -> {t}", "tp", imp.with_changes(placement=q)))
        if zero < 3 and s.get("tp", 1) == 1 and pp == 1:
            out.append((f"ZeRO: stage {zero} -> 3 with the hybrid engine (generation tp {gen_tp})", "zero",
                        imp.with_changes(placement=one_set(roles, devices, 3, gen_tp=gen_tp))))
        return out
    rs, ts = sets[rname], sets[aname]
    rtp = rs.get("tp", 1)
    both = rs["devices"] + ts["devices"]
    for r in set_sizes(both):
        if r >= both or r == rs["devices"] or r % rtp or (both - r) % (ts.get("tp", 1) * ts.get("pp", 1)):
            continue
        q = copy.deepcopy(p)
        for s in q["sets"]:
            if s["name"] == rname:
                s.update(devices=r, dp=r // rtp)
            elif s["name"] == aname:
                s.update(devices=both - r, dp=(both - r) // (s.get("tp", 1) * s.get("pp", 1)))
        out.append((f"split: rollout {rs['devices']} -> {r} GPUs, training {ts['devices']} -> {both - r}", "split",
                    imp.with_changes(placement=q)))
    total = sum(s["devices"] for s in p["sets"])
    gen_tp = rtp if total % rtp == 0 else 1
    out.append((f"split: everything on one set of {total} GPUs (hybrid engine, ZeRO-3, generation tp {gen_tp}), "
                f"synchronous", "split", imp.with_changes(placement=one_set(roles, total, 3, gen_tp=gen_tp),
                                                          mode="sync", eta=0)))
    for mode, eta in MODES:
        if (mode, eta) != (imp.mode, imp.eta):
            kind = "eta" if mode == imp.mode else "mode"
            out.append((f"{kind}: {imp.mode} (eta {imp.eta}) -> {mode} (eta {eta})", kind,
                        imp.with_changes(mode=mode, eta=eta)))
    for t in tps:
        if t != rtp and rs["devices"] % t == 0:
            q = copy.deepcopy(p)
            for s in q["sets"]:
                if s["name"] == rname:
                    s.update(tp=t, dp=s["devices"] // t)
            out.append((f"TP: rollout tensor-parallel size {rtp} -> {t}", "tp", imp.with_changes(placement=q)))
    if ts.get("zero", 0) < 3 and ts.get("tp", 1) == 1 and ts.get("pp", 1) == 1:
        q = copy.deepcopy(p)
        for s in q["sets"]:
            if s["name"] == aname:
                s["zero"] = 3
        out.append((f"ZeRO: trainer stage {ts.get('zero', 0)} -> 3", "zero", imp.with_changes(placement=q)))
    return out


def _with_engine(imp: Imported, **change) -> Imported:
    out = imp.with_changes()
    eng = {k: v for k, v in (imp.engine | change).items() if v is not None}
    out.engine = eng
    return out


def error_band() -> tuple[float | None, str]:
    """The predictor's validated error on ratios between two configurations (the median |error| of the published
    validation split's ratio cases, data/published/validation.json), or None when none is recorded."""
    try:
        g = json.loads(VALIDATION_FILE.read_text())["summary"]["ratio"]
        return float(g["median_abs_error"]), (f"the validated error on ratios, median |error| "
                                              f"{100 * g['median_abs_error']:.0f} % over {g['priced']} published cases")
    except (OSError, ValueError, KeyError, TypeError):
        return None, "no validated error band recorded (data/published/validation.json)"


def set_sizes(devices: int) -> list[int]:
    if devices <= 16:
        return list(range(1, devices + 1))
    sizes = {2 ** i for i in range(devices.bit_length())} | ({j * devices // 8 for j in range(1, 9)} if devices % 8 == 0
                                                             else set())
    return sorted(x for x in sizes | {devices} if x <= devices)


def _two(p, roles, r, t, gen_tp, zero, tp, pp=1):
    """A two-set placement from a one-set one (rollout alone, every other role on the trainer's set)."""
    return {"name": "disaggregated", "sets": [set_dict("rollout", r, tp=gen_tp),
                                              set_dict("train", t, tp=tp, zero=zero, pp=pp)],
            "roles": {x: ("rollout" if x == "rollout" else "train") for x in roles}, "sync": "collective",
            "reshard": False}


@dataclass
class ImportAdvice:
    baseline: ImportPrediction
    ranked: list                 # Candidate, fitting ones by predicted step, then the rest
    considered: int

    @property
    def best(self) -> Candidate | None:
        fit = [c for c in self.ranked if c.fits]
        if not fit:
            return None
        if self.baseline.fits and fit[0].prediction.step_s >= self.baseline.step_s:
            return None
        return fit[0]


def advise_imported(imp: Imported, max_tp: int = 8) -> ImportAdvice:
    base = predict_imported(imp)
    cache: dict = {}
    out = []
    for change, kind, changed in candidates(imp, max_tp):
        try:
            ip = predict_imported(changed, cache)
        except RlmLabError:
            continue                       # a layout this model cannot take (e.g. tp that does not divide heads)
        out.append(Candidate(change, kind, ip))
    out.sort(key=lambda c: (not c.fits, c.prediction.step_s if c.fits else c.prediction.memory_per_device()))
    return ImportAdvice(base, out, len(out))


def indistinguishable(adv: ImportAdvice, c: Candidate) -> bool:
    """Whether a fitting change's predicted step lies within the validated error band of the imported one."""
    band, _ = error_band()
    b = adv.baseline
    return bool(band is not None and b.fits and c.fits and abs(c.prediction.step_s / b.step_s - 1) < band)


def format_advice(adv: ImportAdvice, top: int = 5) -> str:
    b = adv.baseline
    if b.fits:
        lines = [f"imported: {b.placement.placement.describe()}, {b.imported.mode} (eta {b.imported.eta}): "
                 f"step {_seconds(b.step_s)} predicted; critical stage {b.critical()}"]
    else:
        lines = [f"imported: {b.placement.placement.describe()}: DOES NOT FIT ({_bytes(b.memory_per_device())} of "
                 f"{_bytes(b.capacity())} per device)"]
    band, band_what = error_band()
    lines.append(f"{adv.considered} single changes priced; the fastest {min(top, len(adv.ranked))}"
                 + (f" (a change within +-{100 * band:.0f} % of the imported step, {band_what}, is marked "
                    f"not distinguishable)" if band is not None and b.fits else f" ({band_what})") + ":")
    for i, c in enumerate(adv.ranked[:top], 1):
        ip = c.prediction
        if not c.fits:
            lines.append(f"{i}. does not fit ({_bytes(ip.memory_per_device())} per device)  {c.change}")
            continue
        gain = f" ({100 * (ip.step_s / b.step_s - 1):+.0f} % step time)" if b.fits else ""
        nd = "  [not distinguishable]" if indistinguishable(adv, c) else ""
        lines.append(f"{i}. {_seconds(ip.step_s)}{gain}{nd}  {c.change}; critical stage {ip.critical()}")
    best = adv.best
    if best is None:
        lines.append("advice: keep the imported configuration (no single change is predicted faster)"
                     if b.fits else "advice: no single change makes it fit; add GPUs or memory, or shorten sequences")
    elif b.fits:
        ip = best.prediction
        lines.append(f"advice ({best.kind}): {best.change}: predicted step {_seconds(b.step_s)} -> "
                     f"{_seconds(ip.step_s)} ({b.step_s / ip.step_s:.2f}x); {ip.placement.placement.describe()}"
                     + ("; not distinguishable from the imported run within the validated error: measure before "
                        "trusting it" if indistinguishable(adv, best) else ""))
    else:
        ip = best.prediction
        lines.append(f"advice ({best.kind}): {best.change}: makes it fit ({_bytes(ip.memory_per_device())} of "
                     f"{_bytes(ip.capacity())} per device), predicted step {_seconds(ip.step_s)}")
    return "\n".join(lines)
