"""Chapter 9's cases: the guideline registry (``data/guidelines/*.yaml``), the taxonomy items of the results page,
and the grid of the decision map.

A guideline file (every key required unless marked optional)::

    id: g01-one-step-off-faster           # the file's stem
    title: <a short line>
    claim: <the guideline, written so that a measurement can contradict it>
    sources: [{title, url, read: "YYYY-MM-DD", says, permalink (optional)}, ...]   # at least one
    survey: true | false                  # the survey's practical guidelines (arXiv 2608.27046) frame it
    chapter: <the book page that measures it> | null
    evidence: {kind: <one of EVIDENCE>, quantity: <what is measured>, ...the kind's fields}
    test: {above: x} | {below: x} | {within: bar, target: <number or reference>} | null (evidence kind none)
    scale: {predict: <a name of run.SCALE> | null, holds: <a test with numbers, or {8: test, 64: test, 512: test}>,
            why: <why nothing is predicted, when predict is null>}

Evidence kinds and their fields (records are named by folder under ``data/runs/<size>/``; a glob matches folder
names, never a path: no ``/``, no ``..``):

* ``paired``: ``a``, ``b`` (globs), ``metric`` (or ``metric_a``, ``metric_b``), ``stat`` (``ratio`` a/b or
  ``difference`` a - b): one value per seed present in both, paired by the folders' ``seed<k>`` suffix;
* ``per_run``: ``runs`` (glob), ``value``, ``over`` (optional): value / over of each run, one per folder;
* ``runs``: ``a``, ``b`` (a folder, or a list of folders of the same run whose runs are pooled), ``metric``:
  a / b over every completed run of each side;
* ``repeats``: ``reps``: a reference to a list of paired repeats' values in one record;
* ``protocol``: ``record``: a folder written by the measurement protocol (``rlm_lab.protocol.compare``: paired
  repeats A/B, each in a fresh process, interleaved), whose ``summary.ratios`` are the paired ratios;
* ``window``: ``reference``, ``stat`` (``a/b`` or ``b/a``): the paired repeats of a reference of the newest
  committed window that measured it (``rlm-lab reference``; the window that replaces the chapter's single runs,
  :mod:`rlm_lab.supersession`); a within-test's target may then be ``window``: the window's own predicted ratio;
* ``pretest``: ``test``, ``sign`` (+1 or -1): chapter 6's pre-registered accuracy test
  (:mod:`rlm_lab.chapters.ch06_async.accuracy_test`, exact sign-flip, Holm): the test's word decides, and its mean
  paired difference times ``sign`` is the quantity shown;
* ``exact``: ``value``, ``over`` (optional): counted quantities (bytes on the wire), exact by construction;
* ``single``: ``value``, ``over`` (optional): one run's number, which decides nothing;
* ``none``: ``why``: not testable here.

A metric is a dotted key of a record's ``results`` (``sync.bytes_per_sync``) or ``@name`` of run.METRICS; a
reference is ``folder:metric``, and a target may be a number, a reference, or ``reference / reference``.

A malformed file is one :class:`RlmLabError` naming it (``tests/faults``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ...errors import RlmLabError, read_input_text

REPO = Path(__file__).resolve().parents[3]
GUIDELINES = REPO / "data" / "guidelines"
DEVICES = (8, 64, 512)   # the scales every guideline is predicted at
# the predictions at scale a guideline may name (run.SCALE computes each; a test keeps the two the same)
PREDICTIONS = ("one_step_off_speedup", "split_balance", "split_over_colocated", "generation_share", "lora_sync_bytes",
               "lora_sync_time", "async_speedup", "capacity_bound", "sync_share", "reshard_share", "rollout_tp",
               "zero3_volume", "pp_bubble", "packing_gain", "overprovision_gain", "tail_batching_gain",
               "dispatch_gain", "kv_headroom")
EVIDENCE = {"paired": ("a", "b", "stat"), "per_run": ("runs", "value"), "runs": ("a", "b", "metric"),
            "repeats": ("reps",), "protocol": ("record",), "exact": ("value",), "single": ("value",),
            "window": ("reference", "stat"), "pretest": ("test", "sign"), "none": ("why",)}
OPTIONAL = {"paired": ("metric", "metric_a", "metric_b"), "per_run": ("over",), "exact": ("over",),
            "single": ("over",)}
STATS = ("ratio", "difference")
TOP_KEYS = {"id", "title", "claim", "sources", "survey", "chapter", "evidence", "test", "scale"}
SOURCE_KEYS = {"title", "url", "read", "says"}
_URL = re.compile(r"^https://[A-Za-z0-9.-]+\.[a-z]{2,}(/\S*)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NAME = re.compile(r"^[A-Za-z0-9_.*?\[\]-]+$")   # a folder name or a glob of folder names, never a path
MAX_BYTES = 200_000   # a guideline file is a page of YAML; anything larger is not one
_METRIC = re.compile(r"^(@[a-z_]+|[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*)$")


@dataclass(frozen=True)
class Check:
    """What an interval must show: ``above`` / ``below`` a number, or ``within`` a relative bar of ``target``."""

    kind: str                  # above | below | within
    value: float = 0.0         # the threshold (above, below) or the bar (within)
    target: object = None      # within: a number, or a reference / a ratio of references (resolved in run.py)


@dataclass(frozen=True)
class Guideline:
    id: str
    title: str
    claim: str
    sources: tuple             # dicts {title, url, read, says, permalink?}
    survey: bool
    chapter: str | None
    evidence: dict
    test: Check | None
    predict: str | None        # name of the scale prediction (PREDICTIONS), None: nothing predicted
    holds: dict = field(default_factory=dict)   # devices -> Check (the claim's condition at that scale)
    scale_why: str = ""
    path: str = ""


def book_pages() -> set[str]:
    """The names of the book's pages (``book/<name>.md``): a guideline's chapter is one of them, by name, so that a
    chapter like ``../README`` that leaves the folder is no page."""
    return {p.stem for p in (REPO / "book").glob("*.md") if p.is_file()}


def _fail(path: Path, msg: str) -> RlmLabError:
    return RlmLabError(f"guideline {path.name}: {msg}")


def _text_keys(d: dict, path: Path, what: str) -> None:
    """Every key of the mapping ``d`` is text (YAML reads ``7: x`` as the integer 7)."""
    bad = [k for k in d if not isinstance(k, str)]
    if bad:
        raise _fail(path, f"{what} has key {bad[0]!r} ({type(bad[0]).__name__}); its keys must be text")


def check_name(name, path: Path, what: str) -> str:
    """A folder name or glob under the records root: no separator, no ``..``, no absolute path."""
    if not isinstance(name, str) or not name or not _NAME.match(name) or ".." in name:
        raise _fail(path, f"{what} {name!r} is not a folder name or glob under data/runs/<size>/ "
                          "(no '/', no '..', no absolute path)")
    return name


def check_metric(metric, path: Path, what: str) -> str:
    if not isinstance(metric, str) or not _METRIC.match(metric):
        raise _fail(path, f"{what} {metric!r} is not a results key (a.b.c) or @metric")
    return metric


def check_ref(ref, path: Path, what: str) -> str:
    """``folder:metric``."""
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise _fail(path, f"{what} {ref!r} must be folder:metric")
    folder, metric = ref.split(":")
    check_name(folder, path, what)
    if any(c in folder for c in "*?["):
        raise _fail(path, f"{what} {ref!r} names one folder, not a glob")
    check_metric(metric, path, what)
    return ref


def _number(v, path: Path, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _fail(path, f"{what} must be a finite number, not {v!r}")
    return float(v)


def parse_test(d, path: Path, what: str = "test", refs: bool = True) -> Check:
    if not isinstance(d, dict) or not d:
        raise _fail(path, f"{what} must be a mapping {{above: x}}, {{below: x}} or {{within: bar, target: t}}")
    _text_keys(d, path, what)
    keys = set(d)
    if keys == {"above"} or keys == {"below"}:
        (kind, v), = d.items()
        return Check(kind, _number(v, path, f"{what}.{kind}"))
    if keys == {"within", "target"}:
        bar = _number(d["within"], path, f"{what}.within")
        if bar <= 0:
            raise _fail(path, f"{what}.within must be > 0, not {bar}")
        target = d["target"]
        if target == "window":
            return Check("within", bar, target)
        if isinstance(target, str):
            if not refs:
                raise _fail(path, f"{what}.target must be a number here (a prediction has no record)")
            for part in target.split("/"):
                check_ref(part.strip(), path, f"{what}.target")
        else:
            target = _number(target, path, f"{what}.target")
            if target == 0:
                raise _fail(path, f"{what}.target must not be 0 (the bar is relative to it)")
        return Check("within", bar, target)
    raise _fail(path, f"{what} has keys {sorted(keys)}; expected above, below, or within + target")


def _evidence(ev, path: Path) -> dict:
    if isinstance(ev, dict):
        _text_keys(ev, path, "evidence")
    if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str) or ev["kind"] not in EVIDENCE:
        got = ev.get("kind") if isinstance(ev, dict) else ev
        raise _fail(path, f"evidence.kind must be one of {', '.join(EVIDENCE)}, not {got!r}")
    kind = ev["kind"]
    allowed = {"kind", "quantity", *EVIDENCE[kind], *OPTIONAL.get(kind, ())}
    extra = sorted(set(ev) - allowed)
    missing = [k for k in EVIDENCE[kind] if k not in ev] + (["quantity"] if kind != "none" and "quantity" not in ev
                                                             else [])
    if extra or missing:
        raise _fail(path, f"evidence ({kind}): " + "; ".join(
            ([f"unknown key(s) {', '.join(extra)}"] if extra else []) + ([f"missing {', '.join(missing)}"] if missing
                                                                          else [])))
    if kind == "paired":
        check_name(ev["a"], path, "evidence.a")
        check_name(ev["b"], path, "evidence.b")
        if ev["stat"] not in STATS:
            raise _fail(path, f"evidence.stat must be one of {', '.join(STATS)}, not {ev['stat']!r}")
        if "metric" in ev:
            if "metric_a" in ev or "metric_b" in ev:
                raise _fail(path, "evidence: give metric, or metric_a and metric_b, not both")
            check_metric(ev["metric"], path, "evidence.metric")
        else:
            for k in ("metric_a", "metric_b"):
                check_metric(ev.get(k), path, f"evidence.{k}")
    elif kind == "per_run":
        check_name(ev["runs"], path, "evidence.runs")
        check_metric(ev["value"], path, "evidence.value")
        if "over" in ev:
            check_metric(ev["over"], path, "evidence.over")
    elif kind == "runs":
        for k in ("a", "b"):
            names = ev[k] if isinstance(ev[k], list) else [ev[k]]
            if not names:
                raise _fail(path, f"evidence.{k} names no folder")
            for name in names:
                check_name(name, path, f"evidence.{k}")
        check_metric(ev["metric"], path, "evidence.metric")
    elif kind == "repeats":
        check_ref(ev["reps"], path, "evidence.reps")
    elif kind == "protocol":
        check_name(ev["record"], path, "evidence.record")
    elif kind == "window":
        check_name(ev["reference"], path, "evidence.reference")
        if ev["stat"] not in ("a/b", "b/a"):
            raise _fail(path, f"evidence.stat must be a/b or b/a, not {ev['stat']!r}")
    elif kind == "pretest":
        if ev["sign"] not in (1, -1):
            raise _fail(path, f"evidence.sign must be 1 or -1, not {ev['sign']!r}")
    elif kind in ("exact", "single"):
        check_ref(ev["value"], path, "evidence.value")
        if "over" in ev:
            check_ref(ev["over"], path, "evidence.over")
    elif not isinstance(ev["why"], str) or not ev["why"].strip():
        raise _fail(path, "evidence.why must say why this is not testable here")
    return dict(ev)


def _sources(srcs, path: Path) -> tuple:
    if not isinstance(srcs, list) or not srcs:
        raise _fail(path, "sources must be a non-empty list")
    out = []
    for i, s in enumerate(srcs):
        if isinstance(s, dict):
            _text_keys(s, path, f"sources[{i}]")
        if not isinstance(s, dict) or not SOURCE_KEYS <= set(s) or set(s) - SOURCE_KEYS - {"permalink"}:
            raise _fail(path, f"sources[{i}] needs exactly {', '.join(sorted(SOURCE_KEYS))} (and an optional permalink)")
        for k in ("url", "permalink"):
            if k in s and not (isinstance(s[k], str) and _URL.match(s[k])):
                raise _fail(path, f"sources[{i}].{k} {s[k]!r} is not an https URL")
        if not (isinstance(s["read"], str) and _DATE.match(s["read"])):
            raise _fail(path, f"sources[{i}].read must be the date read, YYYY-MM-DD (quoted), not {s['read']!r}")
        out.append(dict(s))
    return tuple(out)


def _scale(sc, path: Path) -> tuple[str | None, dict, str]:
    if not isinstance(sc, dict) or "predict" not in sc:
        raise _fail(path, "scale must be a mapping with predict (a prediction's name, or null with why)")
    _text_keys(sc, path, "scale")
    name = sc["predict"]
    if name is not None and not isinstance(name, str):
        raise _fail(path, f"scale.predict must be a prediction's name or null, not {name!r}")
    if name is None:
        if set(sc) - {"predict", "why"} or not isinstance(sc.get("why"), str) or not sc["why"].strip():
            raise _fail(path, "scale.predict is null: give why (and nothing else)")
        return None, {}, sc["why"]
    if name not in PREDICTIONS:
        raise _fail(path, f"scale.predict {name!r} is not a prediction of this chapter; choose one of: "
                          f"{', '.join(sorted(PREDICTIONS))}")
    if set(sc) - {"predict", "holds"} or "holds" not in sc:
        raise _fail(path, "scale needs predict and holds (the claim's condition on the prediction), nothing else")
    holds = sc["holds"]
    if isinstance(holds, dict) and holds and all(isinstance(k, int) and not isinstance(k, bool) for k in holds):
        if sorted(holds) != sorted(DEVICES):
            raise _fail(path, f"scale.holds per device count must name exactly {', '.join(map(str, DEVICES))}")
        return name, {n: parse_test(t, path, f"scale.holds.{n}", refs=False) for n, t in holds.items()}, ""
    t = parse_test(holds, path, "scale.holds", refs=False)
    return name, {n: t for n in DEVICES}, ""


def load_guideline(path: str | Path) -> Guideline:
    """One guideline file, checked (module docstring); a malformed one is one RlmLabError naming the file."""
    path = Path(path)
    text = read_input_text(path, f"guideline {path.name}", MAX_BYTES)
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _fail(path, f"is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise _fail(path, "must be a mapping of id, title, claim, sources, survey, chapter, evidence, test, scale")
    _text_keys(d, path, "the file")
    missing, extra = sorted(TOP_KEYS - set(d)), sorted(set(d) - TOP_KEYS)
    if missing or extra:
        raise _fail(path, "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                                    + ([f"unknown key(s) {', '.join(extra)}"] if extra else [])))
    if not isinstance(d["id"], str) or d["id"] != path.stem:
        raise _fail(path, f"id {d['id']!r} must be the file's name without .yaml ({path.stem!r})")
    for k in ("title", "claim"):
        if not isinstance(d[k], str) or not d[k].strip():
            raise _fail(path, f"{k} must be non-empty text")
    if not isinstance(d["survey"], bool):
        raise _fail(path, "survey must be true or false")
    if d["chapter"] is not None and (not isinstance(d["chapter"], str) or d["chapter"] not in book_pages()):
        raise _fail(path, f"chapter {d['chapter']!r} is no page of the book (the name of a book/<chapter>.md, "
                          "no folder)")
    ev = _evidence(d["evidence"], path)
    if (ev["kind"] == "none") != (d["test"] is None):
        raise _fail(path, "test must be null exactly when the evidence kind is none")
    test = None if d["test"] is None else parse_test(d["test"], path)
    predict, holds, why = _scale(d["scale"], path)
    return Guideline(d["id"], d["title"].strip(), " ".join(d["claim"].split()), _sources(d["sources"], path),
                     d["survey"], d["chapter"], ev, test, predict, holds, why, str(path.relative_to(REPO))
                     if path.resolve().is_relative_to(REPO) else path.name)


def load_guidelines(folder: str | Path = GUIDELINES) -> list[Guideline]:
    """Every ``*.yaml`` under ``folder``, in file-name order; an empty or missing folder is an error."""
    folder = Path(folder)
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise RlmLabError(f"no guideline files (*.yaml) in {folder}")
    return [load_guideline(f) for f in files]


# ---- the results page: every item of the book's taxonomy -------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """One taxonomy item of the results page: where the book measures it and how (``source`` is a key of
    run.ITEM_SOURCES: ch04 layout rows, ch05 placement rows, ch06 campaign cells, ch07 techniques)."""

    key: str
    taxonomy: str              # intra-model parallelism | placement | weight sync | asynchrony | long tail
    name: str
    chapter: str
    source: str                # ch04 | ch05 | ch05_sync | ch05_reshard | ch06 | ch07
    record: str                # the folder (or the layout / cell) the numbers come from
    scale: str | None = None   # what run.item_scale predicts at scale for it (None: nothing)


ITEMS: tuple[Item, ...] = (
    Item("dp", "intra-model parallelism", "data parallelism (DDP)", "ch04_intra_model", "ch04", "dp2", "dp"),
    Item("zero1", "intra-model parallelism", "ZeRO-1", "ch04_intra_model", "ch04", "dp2-zero1", "dp"),
    Item("zero2", "intra-model parallelism", "ZeRO-2", "ch04_intra_model", "ch04", "dp2-zero2", "dp"),
    Item("zero3", "intra-model parallelism", "ZeRO-3 / FSDP", "ch04_intra_model", "ch04", "dp2-zero3", "zero3"),
    Item("tp", "intra-model parallelism", "tensor parallelism", "ch04_intra_model", "ch04", "tp2", "tp"),
    Item("sp", "intra-model parallelism", "tensor + sequence parallelism", "ch04_intra_model", "ch04", "tp2-sp", "tp"),
    Item("pp", "intra-model parallelism", "pipeline parallelism (1F1B)", "ch04_intra_model", "ch04", "pp2-1f1b", "pp"),
    Item("cp", "intra-model parallelism", "context parallelism (ring)", "ch04_intra_model", "ch04", "cp2", "cp"),
    Item("ep", "intra-model parallelism", "expert parallelism", "ch04_intra_model", "ch04", "ep2", "ep"),
    Item("colocated", "placement", "colocated (time-shared)", "ch05_placement", "ch05", "colocated", "colocated"),
    Item("disaggregated", "placement", "disaggregated (split rollout)", "ch05_placement", "ch05", "disaggregated",
         "disaggregated"),
    Item("hybrid", "placement", "hybrid engine (ZeRO-3, resharded)", "ch05_placement", "ch05", "hybrid", "hybrid"),
    Item("ppo_split", "placement", "PPO split (critic on its own set)", "ch05_placement", "ch05", "ppo_split", None),
    Item("lora", "placement", "disaggregated with LoRA", "ch05_placement", "ch05", "disaggregated_lora", "lora"),
    Item("sync_collective", "weight sync", "collective broadcast (gloo)", "ch05_placement", "ch05_sync",
         "disaggregated", "sync"),
    Item("sync_store", "weight sync", "object store (naive)", "ch05_placement", "ch05_sync",
         "disaggregated_object_store", None),
    Item("reshard", "weight sync", "hybrid-engine reshard", "ch05_placement", "ch05_reshard", "hybrid_reshard",
         "reshard"),
    Item("one_step_off", "asynchrony", "one-step-off", "ch06_async", "ch06", "one_step_off", "async"),
    Item("eta2", "asynchrony", "bounded staleness eta = 2", "ch06_async", "ch06", "eta2", "async"),
    Item("eta4", "asynchrony", "bounded staleness eta = 4", "ch06_async", "ch06", "eta4", "async"),
    Item("eta8", "asynchrony", "bounded staleness eta = 8", "ch06_async", "ch06", "eta8", "async"),
    Item("async", "asynchrony", "unbounded (fully asynchronous)", "ch06_async", "ch06", "async", "async"),
    Item("overprovision", "long tail", "over-provisioning (APRIL)", "ch07_long_tail", "ch07", "overprovision",
         "overprovision"),
    Item("tail_batching", "long tail", "tail batching (RollPacker)", "ch07_long_tail", "ch07", "tail_batching",
         "tail_batching"),
    Item("dispatch", "long tail", "length-aware dispatch (StreamRL)", "ch07_long_tail", "ch07", "dispatch",
         "dispatch"),
    Item("packing", "long tail", "packing (padding-free)", "ch07_long_tail", "ch07", "packing", "packing"),
    Item("dynamic_sampling", "long tail", "dynamic sampling (DAPO)", "ch07_long_tail", "ch07", "dynamic_sampling",
         None),
    Item("fusion", "long tail", "inter-stage fusion (RLHFuse)", "ch07_long_tail", "ch07", "fusion", None),
)


# ---- the decision map -------------------------------------------------------------------------------------------

MAP_MODELS = {"qwen2.5-0.5b": "configs/models/qwen2.5-0.5b.config.json",
              "qwen2.5-1.5b": "configs/models/qwen2.5-1.5b.config.json",
              "qwen2.5-7b": "configs/models/qwen2.5-7b.config.json"}
# response-length distributions: a fixed length, and a reasoning model's long tail (log-normal, median a quarter of
# the cap, sigma 1; an assumed shape, named as one on the page)
MAP_LENGTHS = {"fixed 1024": {"kind": "fixed", "length": 1024},
               "long tail (median 256, cap 4096)": {"kind": "lognormal", "median": 256, "sigma": 1.0, "min": 1,
                                                    "max": 4096}}
