"""The registry of RL post-training frameworks (chapter 8): for each framework, what it offers for each knob of the
book's taxonomy, as the framework spells it, with the source file read and the snapshot it was read at; for each
knob, where this book measures it and the predictor term that prices it.

    reg = load_registry()                 # {id: Framework}, from data/frameworks/<id>.yaml
    reg["verl"].cells["staleness"].options   # ('trainer.v1.sampler.max_off_policy_threshold', ...)
    KNOBS["staleness"].records            # ('data/runs/cpu/ch06_eta2_none_seed0', ...)
    resolve(KNOBS["staleness"].terms[0])  # rlm_lab.cost.asynchrony.simulate

A cell is either found (one or more exact option names, a URL to the doc page or source file, and the snapshot
read: a commit and its date) or ``not found`` (the URL then is the file searched). Where a framework offers a
feature with no switch (prime-rl is always asynchronous, Ray is verl's runtime), the cell names the identifier
its source uses for it (a command, a class, a library) and the note says there is no option. The files are data, written
from the frameworks' repositories (permalinks at the snapshot commit); :func:`load_registry` checks their shape
and says what is wrong in one line (:class:`rlm_lab.errors.RlmLabError`).

The knobs (:data:`KNOBS`) follow the survey's taxonomy (arXiv 2608.27046): placement and weight synchronization
(chapter 5), asynchrony, staleness and off-policy correction (chapter 6), long-tail techniques (chapter 7),
intra-model parallelism backends (chapter 4). Two knobs no chapter measures are marked so (``chapter=None``):
the generation engine (the book generates with transformers and its own loop, never vLLM or SGLang) and the
orchestration layer (chapter 5 runs its roles as Ray actors but compares no orchestrators).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import RlmLabError

REPO = Path(__file__).resolve().parent.parent.parent
REGISTRY = REPO / "data" / "frameworks"
NOT_FOUND = "not found"
SURVEY_ONLY = REGISTRY / "survey_only"

# The survey's classes of frameworks (arXiv 2608.27046 Sec. 6.2); "none": not among its 18 systems.
SURVEY_CLASSES = ("library-centric", "orchestrator-centric", "scheduling-centric")
# Table 11's columns (its caption): the intra-model ones (FSDP2 counted under zero3) and the inter-model ones, and its
# symbols (documented; partial = indirect, partial, backend-specific or train-vs-rollout-specific; none; unclear).
# A column a file does not give is "not read".
TABLE11 = ("dp", "zero1", "zero2", "zero3", "tp", "cp", "ep", "pp", "ac_share", "disagg", "stage_fusion", "hybrid",
           "async")
TABLE11_VALUES = ("documented", "partial", "none", "unclear")
NOT_READ = "not read"

_URL = re.compile(r"^https://[A-Za-z0-9.-]+\.[a-z]{2,}/\S*$")
_READ = re.compile(r"^[0-9a-f]{12} \((\d{4}-\d{2}-\d{2}|code index copy; commit date not recorded\), read \d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class Measure:
    """One number a record holds for a knob: ``measured`` (and ``predicted``, if the run stored its prediction
    before it ran) as dotted paths inside the record's ``results``."""

    record: str          # folder under the repository root (a record, or a folder of timestamped records)
    what: str            # what the number is, for the table
    measured: str        # dotted path in results
    predicted: str | None = None
    unit: str = ""


@dataclass(frozen=True)
class Knob:
    key: str
    title: str
    chapter: str | None              # the chapter that measures it (file stem of its notebook), None: unmeasured
    records: tuple[str, ...] = ()    # record folders (relative to the repository root)
    terms: tuple[str, ...] = ()      # predictor terms: dotted paths to rlm_lab attributes
    measures: tuple[Measure, ...] = ()
    why: str = ""                    # what the chapter measures, or why nothing is measured

    @property
    def measured(self) -> bool:
        return self.chapter is not None


_CPU = "data/runs/cpu/"

KNOBS: dict[str, Knob] = {k.key: k for k in (
    Knob("placement", "placement modes", "ch05_placement",
         (_CPU + "ch05_colocated", _CPU + "ch05_disaggregated", _CPU + "ch05_hybrid"),
         ("rlm_lab.cost.placement.predict_placement", "rlm_lab.cost.advise.advise"),
         (Measure(_CPU + "ch05_colocated", "colocated step", "step_seconds_mean", "prediction.step_s", "s"),
          Measure(_CPU + "ch05_disaggregated", "disaggregated step", "step_seconds_mean", "prediction.step_s", "s")),
         "colocated, disaggregated and hybrid placements of one GRPO step on two CPU cores"),
    Knob("engine", "generation engine", None, (), ("rlm_lab.cost.timing.decode_step_time", "rlm_lab.cost.workload.Workload"),
         why="not measured: the book generates with transformers' generate and its own continuous loop, never with "
             "vLLM, SGLang or TensorRT-LLM; the predictor prices a static or a continuous engine (Workload.engine)"),
    Knob("weight_sync", "weight sync", "ch05_placement",
         (_CPU + "ch05_disaggregated", _CPU + "ch05_disaggregated_object_store", _CPU + "ch05_sync_calibration",
          _CPU + "ch05_hybrid_reshard"),
         ("rlm_lab.cost.comm.weight_sync_time", "rlm_lab.cost.placement.predict_placement"),
         (Measure(_CPU + "ch05_disaggregated", "weight sync per step (collective)", "stage_seconds_mean.weight_sync",
                  "prediction.sync_s", "s"),),
         "collective and object-store pushes, the hybrid engine's reshard"),
    Knob("lora_sync", "LoRA syncs adapters only", "ch05_placement", (_CPU + "ch05_disaggregated_lora",),
         ("rlm_lab.cost.lora.lora_params", "rlm_lab.cost.placement.predict_placement"),
         (Measure(_CPU + "ch05_disaggregated_lora", "weight sync per step (adapters only)",
                  "stage_seconds_mean.weight_sync", "prediction.sync_s", "s"),),
         "the disaggregated step pushing LoRA adapters instead of the full weights"),
    Knob("asynchrony", "asynchrony", "ch06_async",
         (_CPU + "ch06_sync_none_seed0", _CPU + "ch06_one_step_off_none_seed0", _CPU + "ch06_async_none_seed0"),
         ("rlm_lab.cost.asynchrony.sync_step", "rlm_lab.cost.asynchrony.one_step_off_step",
          "rlm_lab.cost.asynchrony.async_rate"),
         (Measure(_CPU + "ch06_sync_none_seed0", "synchronous step", "step_seconds_mean", None, "s"),
          Measure(_CPU + "ch06_one_step_off_none_seed0", "one-step-off step", "step_seconds_mean", "prediction.step_s", "s")),
         "synchronous, one-step-off and fully asynchronous GRPO, three seeds each"),
    Knob("staleness", "staleness bound", "ch06_async",
         (_CPU + "ch06_eta2_none_seed0", _CPU + "ch06_eta4_none_seed0", _CPU + "ch06_eta8_none_seed0"),
         ("rlm_lab.cost.asynchrony.simulate", "rlm_lab.cost.asynchrony.advise_mode"),
         (Measure(_CPU + "ch06_eta4_none_seed0", "step at staleness bound 4", "step_seconds_mean", "prediction.step_s", "s"),
          Measure(_CPU + "ch06_eta8_none_seed0", "step at staleness bound 8", "step_seconds_mean", "prediction.step_s", "s")),
         "the staleness bound eta = 2, 4, 8"),
    Knob("correction", "off-policy correction", "ch06_async",
         (_CPU + "ch06_eta4_tis_seed0", _CPU + "ch06_eta4_none_seed0"),
         (),
         (Measure(_CPU + "ch06_eta4_none_seed0", "final reward, eta 4, no correction", "reward_final"),
          Measure(_CPU + "ch06_eta4_tis_seed0", "final reward, eta 4, truncated IS", "reward_final")),
         "truncated importance sampling against none at each staleness; a correction changes the loss, not the "
         "step time, so no predictor term prices it"),
    Knob("overprovision", "over-provisioning / partial rollout", "ch07_long_tail",
         (_CPU + "ch07_overprovision", _CPU + "ch07_learn_overprovision"),
         ("rlm_lab.cost.longtail.overprovision",),
         (Measure(_CPU + "ch07_overprovision", "generation speed-up, ask 24 keep 16", "measured.speedup",
                  "predicted.speedup", "x"),),
         "over-provisioning with early termination and recycling of the unfinished responses"),
    Knob("dynamic_sampling", "dynamic sampling", "ch07_long_tail",
         (_CPU + "ch07_dynamic_sampling", _CPU + "ch07_learn_dynamic_sampling"),
         ("rlm_lab.cost.longtail.dynamic_sampling_inflation_dist", "rlm_lab.cost.longtail.useless_probability"),
         (Measure(_CPU + "ch07_dynamic_sampling", "groups generated per group kept", "measured.inflation",
                  "predicted.inflation", "x"),),
         "DAPO's dynamic sampling: groups with one reward value replaced"),
    Knob("packing", "packing / dynamic batching", "ch07_long_tail", (_CPU + "ch07_packing",),
         ("rlm_lab.cost.longtail.padded_fraction", "rlm_lab.cost.longtail.token_budget_microbatches"),
         (Measure(_CPU + "ch07_packing", "training speed-up, packed over padded", "measured.speedup",
                  "predicted.speedup", "x"),),
         "packed against padded micro-batches"),
    Knob("backends", "intra-model backends", "ch04_parallelism",
         (_CPU + "ch04_dp2-zero2", _CPU + "ch04_dp2-zero3", _CPU + "ch04_tp2", _CPU + "ch04_pp2-1f1b", _CPU + "ch04_cp2",
          _CPU + "ch04_ep2"),
         ("rlm_lab.cost.memory.train_state_bytes", "rlm_lab.cost.comm.zero3_bytes", "rlm_lab.cost.comm.tp_message_bytes",
          "rlm_lab.cost.comm.pp_bubble"),
         (Measure(_CPU + "ch04_dp2-zero2", "ZeRO-2 all-gather bytes per step", "comm.all_gather.bytes",
                  "predicted_comm.all_gather.bytes", "B"),
          Measure(_CPU + "ch04_tp2", "TP=2 all-reduce bytes per step", "comm.all_reduce.bytes",
                  "predicted_comm.all_reduce.bytes", "B")),
         "DP with ZeRO 1-3, TP, SP, PP, CP and EP, written by hand on torch.distributed; the frameworks' own "
         "backends (FSDP, Megatron, DeepSpeed) are not run"),
    Knob("orchestration", "orchestration", None, (), (),
         why="not measured: chapter 5 runs its roles as Ray actors but compares no orchestrators"),
    Knob("lora", "LoRA", "ch05_placement", (_CPU + "ch05_memory_lora", _CPU + "ch05_memory_full", _CPU + "ch05_accuracy_lora"),
         ("rlm_lab.cost.lora.Lora", "rlm_lab.cost.lora.lora_params"),
         (Measure(_CPU + "ch05_memory_full", "trainer peak memory, full fine-tuning", "trainer_peak_rss_bytes", None, "B"),
          Measure(_CPU + "ch05_memory_lora", "trainer peak memory, LoRA", "trainer_peak_rss_bytes", None, "B")),
         "memory and reward of LoRA against full fine-tuning"),
)}


@dataclass(frozen=True)
class KnobCell:
    options: tuple[str, ...]   # empty: not found
    note: str
    url: str
    read: str
    also: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.options)

    def text(self) -> str:
        return "; ".join(self.options) if self.found else NOT_FOUND


@dataclass(frozen=True)
class Published:
    """A number a framework's own documentation reports, quoted with its source (this book did not measure it)."""

    what: str
    value: str
    url: str
    read: str


@dataclass(frozen=True)
class Framework:
    id: str
    name: str
    order: int
    repo: str
    docs: str
    commit: str
    date: str
    bib: str
    cells: dict[str, KnobCell] = field(default_factory=dict)
    published: tuple[Published, ...] = ()
    survey_class: str = "none"
    table11: dict = field(default_factory=dict)

    def column(self, key: str) -> str:
        """Table 11's value of column ``key`` for this framework (``not read`` when the file does not give it)."""
        return self.table11.get(key, NOT_READ)

    def found(self) -> int:
        return sum(c.found for c in self.cells.values())


def _fail(path: Path, what: str):
    raise RlmLabError(f"framework registry {path.name}: {what}")


def _cell(path: Path, knob: str, raw) -> KnobCell:
    if not isinstance(raw, dict):
        _fail(path, f"cell {knob!r} is not a mapping")
    unknown = set(raw) - {"options", "note", "url", "read", "also"}
    if unknown:
        _fail(path, f"cell {knob!r} has unknown fields {sorted(unknown)}")
    opts = raw.get("options")
    if opts == NOT_FOUND:
        opts = ()
    elif isinstance(opts, list) and opts and all(isinstance(o, str) and o.strip() for o in opts):
        opts = tuple(opts)
    else:
        _fail(path, f"cell {knob!r}: options must be a list of option names or {NOT_FOUND!r}, got {opts!r}")
    for name in ("url", "read", "note"):
        if not isinstance(raw.get(name), str) or not raw[name].strip():
            _fail(path, f"cell {knob!r} has no {name}")
    urls = [raw["url"], *(raw.get("also") or [])]
    for u in urls:
        if not isinstance(u, str) or not _URL.match(u):
            _fail(path, f"cell {knob!r}: {u!r} is not an https URL")
    if not _READ.match(raw["read"]):
        _fail(path, f"cell {knob!r}: read {raw['read']!r} is not '<12-hex commit> (<YYYY-MM-DD>)'")
    return KnobCell(opts, raw["note"], raw["url"], raw["read"], tuple(raw.get("also") or ()))


def load_framework(path: Path) -> Framework:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RlmLabError(f"framework registry {Path(path).name}: cannot read: {str(e).splitlines()[0]}") from None
    path = Path(path)
    if not isinstance(raw, dict):
        _fail(path, "not a mapping")
    need = ("id", "name", "order", "repo", "docs", "snapshot", "bib", "cells")
    missing = [k for k in need if k not in raw]
    if missing:
        _fail(path, f"missing {missing}")
    if raw["id"] != path.stem:
        _fail(path, f"id {raw['id']!r} differs from the file name")
    snap = raw["snapshot"]
    if not (isinstance(snap, dict) and re.fullmatch(r"[0-9a-f]{40}", str(snap.get("commit", "")))
            and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(snap.get("date", "")))):
        _fail(path, "snapshot needs a 40-hex commit and a YYYY-MM-DD date")
    cells = raw["cells"] if isinstance(raw["cells"], dict) else {}
    missing = [k for k in KNOBS if k not in cells]
    extra = [k for k in cells if k not in KNOBS]
    if missing or extra:
        _fail(path, f"cells must be exactly the knobs {list(KNOBS)}: missing {missing}, unknown {extra}")
    for u in (raw["repo"], raw["docs"]):
        if not _URL.match(str(u)):
            _fail(path, f"{u!r} is not an https URL")
    extra = set(raw) - set(need) - {"published", "survey_class", "table11"}
    if extra:
        _fail(path, f"unknown fields {sorted(extra)}")
    published = []
    for i, p in enumerate(raw.get("published") or []):
        if not (isinstance(p, dict) and set(p) == {"what", "value", "url", "read"}
                and all(isinstance(p[k], str) and p[k].strip() for k in p)):
            _fail(path, f"published[{i}] needs exactly what, value, url and read (non-empty strings)")
        if not _URL.match(p["url"]) or not _READ.match(p["read"]):
            _fail(path, f"published[{i}]: url must be https and read '<12-hex commit> (<YYYY-MM-DD>)'")
        published.append(Published(p["what"], p["value"], p["url"], p["read"]))
    if "survey_class" not in raw:
        _fail(path, f"missing survey_class (one of {', '.join(SURVEY_CLASSES)}, or none)")
    return Framework(raw["id"], raw["name"], int(raw["order"]), raw["repo"], raw["docs"], snap["commit"],
                     str(snap["date"]), raw["bib"], {k: _cell(path, k, cells[k]) for k in KNOBS}, tuple(published),
                     _survey_class(path, raw["survey_class"], allow_none=True), _table11(path, raw.get("table11")))


def _survey_class(path: Path, value, allow_none: bool) -> str:
    allowed = SURVEY_CLASSES + (("none",) if allow_none else ())
    if value not in allowed:
        _fail(path, f"survey_class must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _table11(path: Path, raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        _fail(path, "table11 must be a mapping of Table 11's columns")
    bad = sorted(set(map(str, raw)) - set(TABLE11))
    if bad:
        _fail(path, f"table11: unknown column(s) {bad}; columns: {', '.join(TABLE11)}")
    for k, v in raw.items():
        if v not in TABLE11_VALUES:
            _fail(path, f"table11.{k} must be one of {', '.join(TABLE11_VALUES)} (omit it when not read), got {v!r}")
    return dict(raw)


@dataclass(frozen=True)
class SurveySystem:
    """One of the survey's 18 systems (Sec. 6.2): its class, and either the registry's full row (``framework``) or a
    survey-only row (data/frameworks/survey_only: primary source, code, status, Table 11 where documented)."""

    id: str
    name: str
    survey_class: str
    source: str                    # primary source URL (paper, or the post the survey cites); the repo for full rows
    code: str                      # code URL, or "not checked"
    status: str
    table11: dict
    framework: Framework | None = None

    def column(self, key: str) -> str:
        return self.table11.get(key, NOT_READ)


def load_survey_only(path: Path) -> SurveySystem:
    """One survey-only row; one error line naming the file and the field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RlmLabError(f"framework registry {path.name}: cannot read: {str(e).splitlines()[0]}") from None
    need = ("id", "name", "survey_class", "survey_ref", "source", "code", "status", "table11")
    if not isinstance(raw, dict) or sorted(raw) != sorted(need):
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        _fail(path, f"a survey-only row needs exactly {', '.join(need)}; got {got}")
    if raw["id"] != path.stem:
        _fail(path, f"id {raw['id']!r} differs from the file name")
    for k in ("name", "survey_ref", "status"):
        if not isinstance(raw[k], str) or not raw[k].strip():
            _fail(path, f"{k} must be a non-empty string")
    if not _URL.match(str(raw["source"])):
        _fail(path, f"source {raw['source']!r} is not an https URL")
    if raw["code"] != "not checked" and not _URL.match(str(raw["code"])):
        _fail(path, f"code must be an https URL or 'not checked', got {raw['code']!r}")
    return SurveySystem(raw["id"], raw["name"], _survey_class(path, raw["survey_class"], allow_none=False),
                        raw["source"], raw["code"], raw["status"], _table11(path, raw["table11"]))


def load_survey_systems(folder: str | Path = REGISTRY) -> list[SurveySystem]:
    """The survey's 18 systems: the registry's rows with a survey class, then the survey-only rows, by class."""
    folder = Path(folder)
    full = [SurveySystem(f.id, f.name, f.survey_class, f.repo, f.repo, "code read into every knob cell", f.table11, f)
            for f in load_registry(folder).values() if f.survey_class != "none"]
    only = [load_survey_only(p) for p in sorted((folder / "survey_only").glob("*.yaml"))]
    ids = [s.id for s in full + only]
    if len(set(ids)) != len(ids):
        raise RlmLabError(f"framework registry {folder}: a system is both a full row and a survey-only row")
    return sorted(full + only, key=lambda s: SURVEY_CLASSES.index(s.survey_class))


def load_registry(folder: str | Path = REGISTRY) -> dict[str, Framework]:
    """Every ``<id>.yaml`` of ``folder``, in the registry's order."""
    folder = Path(folder)
    files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not files:
        raise RlmLabError(f"framework registry: no <framework>.yaml under {folder}")
    fws = [load_framework(p) for p in files]
    orders = [f.order for f in fws]
    if len(set(orders)) != len(orders):
        raise RlmLabError(f"framework registry {folder}: two frameworks share an order number")
    return {f.id: f for f in sorted(fws, key=lambda f: f.order)}


def resolve(term: str):
    """The object a predictor term names (``rlm_lab.cost.asynchrony.simulate``); one error line if it is not there."""
    parts = term.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            raise RlmLabError(f"predictor term {term!r}: {'.'.join(parts[:i])} has no {'.'.join(parts[i:])}") from None
        return obj
    raise RlmLabError(f"predictor term {term!r}: no such module")
