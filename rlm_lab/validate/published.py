"""The registry of published cluster measurements (issue 21 item 4): numbers that RL systems' papers, documentation
and benchmarks report for real clusters, each with the configuration it was measured under, so that the cost model
can be asked the same question and judged on the answer.

    reg = load_published()                    # Registry: sources, split, cases (data/published/)
    reg.cases["nemo-rl-llama3.1-8b-onpolicy-step"].published.value     # 92.8 (seconds)
    reg.by_split("validation")                # the cases the bars are judged on

Layout of ``data/published/``:

* ``sources.yaml``: one entry per document read (title, project, its ``bib`` key in ``book/references.bib``, kind,
  the page's ``url``, the ``permalink`` of the file read at the commit read, and when it was read);
* ``split.yaml``: which sources are ``calibration`` and which ``validation``; the split is **by source** and was
  committed before any fitting (``tests/test_published.py`` checks both);
* ``cases/<id>.yaml``: one case per file (schema below);
* ``fit.json``: the efficiencies fitted on the calibration cases, with provenance (:mod:`.published_predict`).

A case (every key required unless marked optional)::

    id: <the file's stem>
    source: <a key of sources.yaml>
    where: <table, row, section or figure the number was read from>
    split: calibration | validation        # must agree with split.yaml for its source
    quantity: step_time | speedup | stage_share | stage_time | sync_time
    stage: generation | preparation | training   # stage_share and stage_time only
    published: {value: <number>, interval: [lo, hi] or null, interval_note: <optional>, derived: <how the value is
                read or computed from the source's own figures>}
    hardware: {gpu: <as the source names it>, count: <GPUs>, nodes: <nodes>, profile: <data/hardware name>,
               link_gbps: <optional, per direction, GB/s>}
    model: {name: <the checkpoint>, config: <a file in configs/models/>}
    critic: <optional: {name, config} of a critic of another size than the actor (default: the actor's shape)>
    reward_model: <optional: {name, config} of a reward model of another size (default: the actor's shape)>
    algorithm: {name: grpo | ppo | dapo | rloo | reinforce_pp, beta: <KL weight>}
    workload: <the cost model's Workload fields; response may be {kind: reasoning_tail, max: M[, mean: m[,
               mean_from: <URL and place of another public source that states the mean, when the case's own does not>]]}>
    placement: <a predict placement: {name: colocated|disaggregated|split|hybrid, ...} or {sets, roles}>
    mode: sync | one_step_off | stale | async          # rlm_lab.cost.modes
    eta: <optional staleness bound of the mode; none: the mode's default>
    variant: {placement, mode, eta, workload}   # speedup only: the faster configuration (the case is the baseline)
    transport: nccl_broadcast | cuda_ipc | host_broadcast   # sync_time only: how the weights move
    assumed: [<every choice the source does not state, in words>]

``reasoning_tail`` is the one assumed shape of reasoning models' response lengths, used where a source states only
the cap (``max``) or the mean: a log-normal with sigma :data:`ASSUMED_TAIL_SIGMA`, clipped at the cap, whose median
is :data:`ASSUMED_TAIL_MEDIAN_FRACTION` of the cap when no mean is given, or is set so that the clipped mean equals
the stated one. It is an assumption of this registry, not of any source; every case that uses it says so.

Bad files are one :class:`RlmLabError` line naming the file and what is wrong; a model config path that would leave
``configs/models/`` is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..cost.workload import ASSUMED_TAIL_MEDIAN_FRACTION, ASSUMED_TAIL_SIGMA, assumed_lengths, workload_from_dict  # noqa: F401
from ..errors import RlmLabError, read_input_text

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "data" / "published"
MODELS = REPO / "configs" / "models"
SPLITS = ("calibration", "validation")
QUANTITIES = {"step_time": "s", "speedup": "x", "stage_share": "share", "stage_time": "s", "sync_time": "s"}
# the two judged groups: ratios (speed-ups and shares) and absolute step times; stage and sync times are
# reported beside them with no bar (none was fixed for them)
RATIO_QUANTITIES = ("speedup", "stage_share")
STEP_QUANTITIES = ("step_time",)
# a ratio's direction is the side of this reference the value lies on: faster or slower, more or less than half
DIRECTION_REFERENCE = {"speedup": 1.0, "stage_share": 0.5}
STAGES = ("generation", "preparation", "training")
MODES = ("sync", "one_step_off", "stale", "async")   # rlm_lab.cost.modes
TRANSPORTS = ("nccl_broadcast", "cuda_ipc", "host_broadcast")

CASE_KEYS = {"id", "source", "where", "split", "quantity", "published", "hardware", "model", "algorithm", "workload",
             "placement", "mode", "assumed"}
OPTIONAL_KEYS = {"stage", "variant", "transport", "eta", "critic", "reward_model"}
PUBLISHED_KEYS = {"value", "interval", "derived"}
HARDWARE_KEYS = {"gpu", "count", "nodes", "profile"}
MAX_BYTES = 1_000_000   # a registry file (a case, sources.yaml, split.yaml) is a page of YAML
MAX_GPUS = 100_000   # hardware.count and .nodes: far above any published RL cluster; the placement's memory is O(count)
SOURCE_KEYS = {"title", "project", "bib", "kind", "url", "permalink", "read"}
_URL = re.compile(r"^https://[A-Za-z0-9.-]+\.[a-z]{2,}(/\S*)?$")


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    project: str
    bib: str             # its key in book/references.bib
    kind: str
    url: str
    permalink: str
    read: str


@dataclass(frozen=True)
class PublishedValue:
    value: float
    interval: tuple | None
    derived: str
    interval_note: str = ""


@dataclass(frozen=True)
class PublishedCase:
    """One published measurement and the configuration it was measured under (see the module docstring)."""

    id: str
    source: str
    where: str
    split: str
    quantity: str
    published: PublishedValue
    hardware: dict
    model: dict
    algorithm: dict
    workload: dict
    placement: object
    mode: str
    assumed: tuple
    stage: str | None = None
    variant: dict = field(default_factory=dict)
    transport: str | None = None
    eta: int | None = None
    critic: dict | None = None
    reward_model: dict | None = None

    @property
    def unit(self) -> str:
        return QUANTITIES[self.quantity]

    @property
    def group(self) -> str:
        """``ratio``, ``step`` or ``other`` (no bar): which of the issue's bars judges this case."""
        return "ratio" if self.quantity in RATIO_QUANTITIES else "step" if self.quantity in STEP_QUANTITIES else "other"

    @property
    def model_config(self) -> Path:
        return MODELS / self.model["config"]

    @property
    def lengths(self) -> str:
        """What the sources state about the response lengths: ``stated``, ``mean stated``, ``mean elsewhere`` (the
        mean from another public source, ``mean_from``) or ``cap only``."""
        resp = self.workload.get("response", {})
        if isinstance(resp, dict) and resp.get("kind") == "reasoning_tail":
            return ("mean elsewhere" if "mean_from" in resp else "mean stated") if "mean" in resp else "cap only"
        return "stated"


@dataclass(frozen=True)
class Registry:
    sources: dict
    split: dict          # split side -> tuple of source ids
    cases: dict          # id -> PublishedCase, sorted by id

    def by_split(self, side: str) -> list:
        return [c for c in self.cases.values() if c.split == side]


# ---- reading ----------------------------------------------------------------------------------------
def _yaml(path: Path):
    text = read_input_text(path, f"published registry {path.name}", MAX_BYTES)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RlmLabError(f"published registry {path.name}: not valid YAML ({str(e).splitlines()[0]})") from None


def _mapping(value, where: str, required: set, optional: set = frozenset()) -> dict:
    if not isinstance(value, dict):
        raise RlmLabError(f"{where} must be a mapping, got {type(value).__name__}")
    missing = sorted(required - set(value))
    if missing:
        raise RlmLabError(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(set(map(str, value)) - required - set(optional))
    if unknown:
        raise RlmLabError(f"{where} has unknown key(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(required | set(optional)))}")
    return value


def _number(value, where: str, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            positive and value <= 0):
        raise RlmLabError(f"{where} must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


def _text(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RlmLabError(f"{where} must be a non-empty text, got {value!r}")
    return value


def check_url(url, where: str) -> str:
    """A real-looking https URL (scheme, host with a dot and a top-level domain, no spaces), or one error line."""
    if not isinstance(url, str) or not _URL.match(url):
        raise RlmLabError(f"{where} must be an https URL, got {url!r}")
    return url


def load_sources(folder: Path = PUBLISHED) -> dict:
    data = _yaml(folder / "sources.yaml") if (folder / "sources.yaml").is_file() else None
    if not isinstance(data, dict) or not data:
        raise RlmLabError(f"published registry: {folder / 'sources.yaml'} must map source ids to their documents")
    out = {}
    for sid, entry in data.items():
        where = f"published registry sources.yaml: source {sid!r}"
        entry = _mapping(entry, where, SOURCE_KEYS)
        for key in ("title", "project", "bib", "kind", "read"):
            _text(entry[key], f"{where} {key}")
        out[str(sid)] = Source(str(sid), entry["title"], entry["project"], entry["bib"], entry["kind"],
                               check_url(entry["url"], f"{where} url"), check_url(entry["permalink"], f"{where} permalink"),
                               entry["read"])
    return out


def load_split(folder: Path, sources: dict) -> dict:
    """{side: (source ids)} from split.yaml: both sides, known sources, each source on exactly one side."""
    path = folder / "split.yaml"
    data = _yaml(path) if path.is_file() else None
    where = "published registry split.yaml"
    data = _mapping(data if data is not None else {}, where, set(SPLITS))
    seen: dict = {}
    for side in SPLITS:
        ids = data[side]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise RlmLabError(f"{where}: {side} must be a non-empty list of source ids, got {ids!r}")
        for sid in ids:
            if sid not in sources:
                raise RlmLabError(f"{where}: {side} names unknown source {sid!r}; sources: {', '.join(sorted(sources))}")
            if sid in seen:
                raise RlmLabError(f"{where}: source {sid!r} is on both sides (calibration and validation)")
            seen[sid] = side
    unsplit = sorted(set(sources) - set(seen))
    if unsplit:
        raise RlmLabError(f"{where}: source(s) {', '.join(unsplit)} on neither side")
    return {side: tuple(data[side]) for side in SPLITS}


def expand_response(resp):
    """A ``reasoning_tail`` response (see the module docstring) as the log-normal the cost model reads
    (:func:`rlm_lab.cost.workload.assumed_lengths`); other forms unchanged."""
    if not isinstance(resp, dict) or resp.get("kind") != "reasoning_tail":
        return resp
    _mapping(resp, "workload.response (reasoning_tail)", {"kind", "max"}, {"mean", "mean_from"})
    if "mean" in resp:
        _number(resp["mean"], "workload.response mean")
    if "mean_from" in resp and ("mean" not in resp or not isinstance(resp["mean_from"], str)
                                or not resp["mean_from"].startswith("https://")):
        raise RlmLabError("workload.response mean_from must be an https:// citation of where the mean is stated, "
                          "beside a mean")
    return assumed_lengths(resp["max"], resp.get("mean"))


def _model(value, where: str) -> dict:
    value = _mapping(value, where, {"name", "config"})
    cfg = value["config"]
    if not isinstance(cfg, str) or not cfg.endswith(".json") or "/" in cfg or "\\" in cfg or cfg.startswith("."):
        raise RlmLabError(f"{where} config must be a file name in configs/models/ (no folders), got {cfg!r}")
    if not (MODELS / cfg).is_file():
        raise RlmLabError(f"{where} config configs/models/{cfg} does not exist")
    return value


def load_case(path: Path, sources: dict, split: dict) -> PublishedCase:
    """One case file, checked (see the module docstring for the schema)."""
    name = f"published case {path.name}"
    data = _mapping(_yaml(path), name, CASE_KEYS, OPTIONAL_KEYS)
    if data["id"] != path.stem:
        raise RlmLabError(f"{name}: id {data['id']!r} must equal the file name's stem {path.stem!r}")
    if data["source"] not in sources:
        raise RlmLabError(f"{name}: unknown source {data['source']!r}; sources: {', '.join(sorted(sources))}")
    if data["split"] not in SPLITS:
        raise RlmLabError(f"{name}: split must be calibration or validation, got {data['split']!r}")
    side = next(s for s in SPLITS if data["source"] in split[s])
    if data["split"] != side:
        raise RlmLabError(f"{name}: split {data['split']!r} disagrees with split.yaml, which puts source "
                          f"{data['source']!r} in {side} (the split is by source)")
    q = data["quantity"]
    if q not in QUANTITIES:
        raise RlmLabError(f"{name}: quantity must be one of {', '.join(QUANTITIES)}, got {q!r}")
    pub = _mapping(data["published"], f"{name} published", PUBLISHED_KEYS, {"interval_note"})
    value = _number(pub["value"], f"{name} published value")
    if q in DIRECTION_REFERENCE and value == DIRECTION_REFERENCE[q]:
        raise RlmLabError(f"{name}: a {q} of exactly {value:g} has no direction to judge")
    if q == "stage_share" and value >= 1:
        raise RlmLabError(f"{name}: a stage share must be below 1, got {value:g}")
    iv = pub["interval"]
    if iv is not None:
        if (not isinstance(iv, list) or len(iv) != 2 or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in iv)
                or not iv[0] <= value <= iv[1]):
            raise RlmLabError(f"{name}: published interval must be [lo, hi] around the value {value:g}, got {iv!r}")
    published = PublishedValue(value, tuple(iv) if iv else None, _text(pub["derived"], f"{name} published derived"),
                          str(pub.get("interval_note", "")))
    stage = data.get("stage")
    if (q in ("stage_share", "stage_time")) != (stage is not None):
        raise RlmLabError(f"{name}: stage is required for stage_share and stage_time and only for them")
    if stage is not None and stage not in STAGES:
        raise RlmLabError(f"{name}: stage must be one of {', '.join(STAGES)}, got {stage!r}")
    if (q == "speedup") != ("variant" in data):
        raise RlmLabError(f"{name}: variant (the faster configuration) is required for a speedup and only for it")
    variant = _mapping(data.get("variant", {}), f"{name} variant", set(), {"placement", "mode", "eta", "workload"})
    for eta in (data.get("eta"), variant.get("eta")):
        if eta is not None and (isinstance(eta, bool) or not isinstance(eta, int) or eta < 0):
            raise RlmLabError(f"{name}: eta must be an integer >= 0 or omitted, got {eta!r}")
    if (q == "sync_time") != ("transport" in data):
        raise RlmLabError(f"{name}: transport is required for a sync_time and only for it")
    if "transport" in data and data["transport"] not in TRANSPORTS:
        raise RlmLabError(f"{name}: transport must be one of {', '.join(TRANSPORTS)}, got {data['transport']!r}")
    for m in (data["mode"], variant.get("mode", data["mode"])):
        if m not in MODES:
            raise RlmLabError(f"{name}: mode must be one of {', '.join(MODES)}, got {m!r}")
    hw = _mapping(data["hardware"], f"{name} hardware", HARDWARE_KEYS, {"link_gbps"})
    for key in ("count", "nodes"):
        if isinstance(hw[key], bool) or not isinstance(hw[key], int) or not 1 <= hw[key] <= MAX_GPUS:
            raise RlmLabError(f"{name} hardware {key} must be an integer from 1 to {MAX_GPUS:,} (the largest cluster "
                              f"the registry prices; the prediction's memory grows with it), got {hw[key]!r}")
    if hw["nodes"] > hw["count"]:
        raise RlmLabError(f"{name} hardware nodes ({hw['nodes']}) must be at most count ({hw['count']})")
    if "link_gbps" in hw:
        _number(hw["link_gbps"], f"{name} hardware link_gbps")
    algo = _mapping(data["algorithm"], f"{name} algorithm", {"name", "beta"})
    _number(algo["beta"], f"{name} algorithm beta", positive=False)
    workload = data["workload"]
    for w, where in ((workload, "workload"), (variant.get("workload", {}), "variant workload")):
        if not isinstance(w, dict):
            raise RlmLabError(f"{name} {where} must be a mapping of the cost model's workload fields")
    if not isinstance(data["assumed"], list) or not all(isinstance(a, str) and a for a in data["assumed"]):
        raise RlmLabError(f"{name}: assumed must be a list of sentences (empty if nothing is assumed)")
    try:
        for w in (workload, workload | variant.get("workload", {})):
            workload_from_dict(w | {"response": expand_response(w.get("response", {}))})
    except RlmLabError as e:
        raise RlmLabError(f"{name}: {e}") from None
    return PublishedCase(data["id"], data["source"], _text(data["where"], f"{name} where"), data["split"], q, published,
                hw, _model(data["model"], f"{name} model"), algo, workload, data["placement"], data["mode"],
                tuple(data["assumed"]), stage, variant, data.get("transport"), data.get("eta"),
                *(None if data.get(k) is None else _model(data[k], f"{name} {k}") for k in ("critic", "reward_model")))


def load_published(folder: Path | str = PUBLISHED) -> Registry:
    """The whole registry, checked; any malformed file is one error line naming it."""
    folder = Path(folder)
    sources = load_sources(folder)
    split = load_split(folder, sources)
    files = sorted((folder / "cases").glob("*.yaml")) if (folder / "cases").is_dir() else []
    if not files:
        raise RlmLabError(f"published registry: no case files under {folder / 'cases'}")
    cases = {}
    for path in files:
        case = load_case(path, sources, split)
        cases[case.id] = case
    return Registry(sources, split, cases)
