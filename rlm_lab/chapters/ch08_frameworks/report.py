"""Chapter 8's tables: the registry knob by knob, where the book measures each knob and what it measured, the
frameworks' own published numbers, and predictions: one workload under each framework's default placement and
mode, and (from :mod:`rlm_lab.frameworks.importers`, when present) each shipped example config.

Tables come back as rows (lists of dicts, tested) and as HTML (:func:`html_table`, for the notebook: links stay
clickable, nothing is fetched). Every number measured here comes from a record under ``data/`` (each row names
it); every prediction is labelled as one.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from html import escape
from pathlib import Path

import yaml

from ...cost.advise import advise
from ...cost.asynchrony import simulate
from ...cost.placement import predict_placement
from ...cost.placement_spec import Cluster, get_placement
from ...cost.workload import ResponseLengths, Workload, algorithm
from ...errors import RlmLabError
from ...frameworks.importers import example_predictions
from ...frameworks.importers.census import read_census
from ...frameworks.importers.corpus import corpus_predictions
from ...frameworks.importers.same_workload import same_workload_predictions
from ...frameworks.registry import KNOBS, NOT_READ, REPO, TABLE11, Framework, load_registry, load_survey_systems

# The registry's knobs in four groups, one table each (a 17 x 13 table does not fit a page).
GROUPS = (
    ("Placement and weight sync", ("placement", "engine", "weight_sync", "lora_sync")),
    ("Asynchrony", ("asynchrony", "staleness", "correction")),
    ("Long tail", ("overprovision", "dynamic_sampling", "packing")),
    ("Backends, orchestration, LoRA", ("backends", "orchestration", "lora")),
)
UNMEASURED = "†"


def _link(text: str, url: str) -> str:
    return f'<a href="{escape(url, quote=True)}">{escape(text)}</a>'


def cell_html(cell) -> str:
    """One registry cell: its options in code font and a link to the file read (or 'not found', linked to the
    file searched)."""
    if not cell.found:
        return f"not found ({_link('searched', cell.url)})"
    opts = ", ".join(f"<code>{escape(o)}</code>" for o in cell.options)
    return f"{opts}<br><small>{escape(cell.note)} [{_link('source', cell.url)}]</small>"


def registry_rows(keys, reg: dict[str, Framework] | None = None) -> list[dict]:
    """One row per framework: its name and, per knob in ``keys``, the cell (options or 'not found')."""
    reg = reg or load_registry()
    unknown = [k for k in keys if k not in KNOBS]
    if unknown:
        raise RlmLabError(f"unknown knobs {unknown}; the registry's knobs are {list(KNOBS)}")
    return [{"framework": f.name, **{k: f.cells[k] for k in keys}} for f in reg.values()]


def knob_header(key: str) -> str:
    k = KNOBS[key]
    return k.title + ("" if k.measured else f" {UNMEASURED}")


def registry_html(keys, reg: dict[str, Framework] | None = None) -> str:
    reg = reg or load_registry()
    rows = registry_rows(keys, reg)
    head = "<tr><th>framework</th>" + "".join(f"<th>{escape(knob_header(k))}</th>" for k in keys) + "</tr>"
    body = []
    for f, row in zip(reg.values(), rows):
        name = _link(f.name, f.repo) + f"<br><small>read at {escape(f.commit[:12])} ({escape(f.date)})</small>"
        body.append("<tr><td>" + name + "</td>" + "".join(f"<td>{cell_html(row[k])}</td>" for k in keys) + "</tr>")
    return f'<table class="rlm-registry">{head}{"".join(body)}</table>'


def coverage(reg: dict[str, Framework] | None = None) -> dict:
    """How much the registry holds: frameworks, cells, cells found, and cells found per knob."""
    reg = reg or load_registry()
    cells = [c for f in reg.values() for c in f.cells.values()]
    return {"frameworks": len(reg), "cells": len(cells), "found": sum(c.found for c in cells),
            "per_knob": {k: sum(f.cells[k].found for f in reg.values()) for k in KNOBS}}


# ---- where the book measures each knob, and what it measured ----------------------------------------------

def knob_rows() -> list[dict]:
    """Per knob: the chapter that measures it (or none), its records and the predictor terms that price it."""
    return [{"knob": k.title, "chapter": k.chapter or f"none {UNMEASURED}", "records": list(k.records),
             "predictor terms": list(k.terms) or ["none"], "what": k.why} for k in KNOBS.values()]


def latest_results(record: str, root: Path = REPO) -> tuple[dict, str]:
    """The ``results`` of a record folder (``record.json`` in it, or in its newest timestamped sub-folder) and
    the path read, relative to ``root``."""
    folder = Path(root) / record
    path = folder / "record.json"
    if not path.exists():
        subs = sorted(folder.glob("*/record.json"))
        if not subs:
            raise RlmLabError(f"no record under {record}")
        path = subs[-1]
    return json.loads(path.read_text())["results"], str(path.parent.relative_to(root))


def _dig(d: dict, dotted: str):
    for p in dotted.split("."):
        if not isinstance(d, dict) or p not in d:
            raise RlmLabError(f"record has no {dotted!r}")
        d = d[p]
    return d


def measured_rows(root: Path = REPO) -> list[dict]:
    """Per measured number of :data:`KNOBS`: the knob, what, measured, predicted (when the run stored a
    prediction before it ran), the error, the unit and the record read. Committed cpu records."""
    rows = []
    for k in KNOBS.values():
        for m in k.measures:
            res, path = latest_results(m.record, root)
            meas = _dig(res, m.measured)
            pred = _dig(res, m.predicted) if m.predicted else None
            err = (pred - meas) / meas if pred is not None and meas else None
            rows.append({"knob": k.title, "chapter": k.chapter, "what": m.what, "measured": meas,
                         "predicted": pred, "error": err, "unit": m.unit, "record": path})
    return rows


def _num(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "B":
        return f"{v / 2**20:.2f} MiB"
    if unit == "x":
        return f"{v:.2f}×"
    if unit == "s":
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.3g}"


def repository_url(path: str = "") -> str:
    """``path`` in this book's repository on GitHub (``repository.url`` and ``branch`` of ``book/_config.yml``,
    the one place the URL lives)."""
    repo = yaml.safe_load((REPO / "book" / "_config.yml").read_text())["repository"]
    base = f"{repo['url'].rstrip('/')}/tree/{repo.get('branch', 'main')}"
    return f"{base}/{path}" if path else base


def measured_html(rows: list[dict] | None = None) -> str:
    rows = rows if rows is not None else measured_rows()
    head = "<tr><th>knob</th><th>measured in</th><th>what</th><th>measured</th><th>predicted before the run</th><th>error</th><th>record</th></tr>"
    body = "".join(
        f"<tr><td>{escape(r['knob'])}</td><td>{_link(r['chapter'], r['chapter'] + '.html')}</td><td>{escape(r['what'])}</td>"
        f"<td>{_num(r['measured'], r['unit'])}"
        + (f"<br><small>{escape(r['interval'])}; ledger <code>{escape(r['id'])}</code></small>" if r.get("id") else "")
        + f"</td><td>{_num(r['predicted'], r['unit'])}</td>"
        f"<td>{'-' if r['error'] is None else format(r['error'], '+.0%')}</td>"
        f"<td><a href=\"{escape(repository_url(r['record']), quote=True)}\"><code>{escape(r['record'])}</code></a></td></tr>"
        for r in rows)
    return f"<table class=\"rlm-knobs\">{head}{body}</table>"


def published_rows(reg: dict[str, Framework] | None = None) -> list[dict]:
    """The frameworks' own numbers, as their documentation states them (quoted; not measured here)."""
    reg = reg or load_registry()
    return [{"framework": f.name, "what": p.what, "value": p.value, "source": p.url, "read": p.read}
            for f in reg.values() for p in f.published]


def published_html(rows: list[dict] | None = None) -> str:
    rows = rows if rows is not None else published_rows()
    head = "<tr><th>framework</th><th>what its documentation reports</th><th>value</th><th>source</th></tr>"
    body = "".join(f"<tr><td>{escape(r['framework'])}</td><td>{escape(r['what'])}</td><td>{escape(r['value'])}</td>"
                   f"<td>{_link(r['read'], r['source'])}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


# ---- one workload under each framework's default placement and mode (predictions) --------------------------

@dataclass(frozen=True)
class Default:
    """A framework's default placement, intra-model sharding and execution mode, each read from a registry
    cell (``basis`` names the option and its default)."""

    framework: str
    placement: str | None           # rlm_lab.cost.placement_spec name; None: no user placement (hosted)
    kw: tuple = ()                  # keyword arguments of the placement factory
    mode: str = "sync"              # sync | one_step_off | async (bounded by eta)
    algo: str = "grpo"
    basis: str = ""
    eta: int | None = 0             # staleness bound of the mode: 0 sync, 1 one-step-off, k async


DEFAULTS: tuple[Default, ...] = (
    Default("trl", "colocated", (("zero", 0),), "sync", basis="vllm_mode='colocate' (default); accelerate DDP"),
    Default("verl", "hybrid", (("gen_tp", 2),), "sync",
            basis="hybrid_engine: true; actor strategy fsdp; rollout tensor_model_parallel_size 2; trainer_mode: sync"),
    Default("openrlhf", "hybrid", (), "sync",
            basis="--train.colocate_all with sleeping vLLM (the README's recommended hybrid engine; with no flags each "
                  "model gets GPUs of its own); async off"),
    Default("nemo-rl", "hybrid", (), "sync",
            basis="colocated.enabled: true (vLLM on the training GPUs, refit); dtensor_cfg (FSDP2); async_grpo off"),
    Default("areal", "disaggregated", (("zero", 3),), "async",
            basis="scheduling_strategy separation; fsdp backend; max_head_offpolicyness 2 as in its GSM8K example "
                  "(the field's default 0 is synchronous, 'useful for debugging')", eta=2),
    Default("slime", "disaggregated", (("zero", 0),), "sync", basis="separate actor and rollout GPUs; Megatron; train.py"),
    Default("roll", "hybrid", (), "sync",
            basis="shared device_mapping (the docs' colocated example: vLLM time-shares the training GPUs); "
                  "training state sharded as FSDP (assumed); async_generation_ratio 0"),
    Default("skyrl", "hybrid", (), "sync", basis="colocate_all: true (vLLM on the training GPUs); strategy fsdp"),
    Default("prime-rl", "disaggregated", (("zero", 3),), "one_step_off",
            basis="separate trainer and inference; FSDP2; one step overlapped by default", eta=1),
    Default("torchforge", "disaggregated", (("zero", 3),), "one_step_off", basis="separate services; TorchTitan FSDP; off_by_n 1",
            eta=1),
    Default("oat", "disaggregated", (("zero", 2),), "sync", basis="collocate False; --zero_stage 2; asynchronous False"),
    Default("easyr1", "hybrid", (), "sync", basis="hybrid engine only; FSDP"),
    Default("rllm", "hybrid", (), "sync", basis="verl backend: hybrid engine, sync"),
    Default("art", "colocated", (("zero", 0), ("lora", True)), "sync", basis="shared GPUs (no gpu ids); LoRA"),
    Default("deepspeed-chat", "hybrid", (), "sync", "ppo", basis="--enable_hybrid_engine (ZeRO-3); PPO only"),
    Default("nemo-aligner", "split", (), "sync", "ppo", basis="actor and critic/reward servers; PPO"),
    Default("tinker", None, basis="hosted service: no user placement"),
)


def workload_7b(prompts: int = 64, group: int = 8, prompt_len: int = 256, response_len: int = 1024):
    """The chapter's side-by-side workload: one GRPO step of a 7B model, 64 prompts x 8 responses, 256 + 1024
    tokens, bf16 (the workload of chapter 5's GPU outlook)."""
    return Workload(prompts=prompts, group_size=group, prompt_len=prompt_len,
                    response=ResponseLengths("fixed", length=response_len), micro_batch=8, gen_batch=512,
                    precision="bf16")


MODEL_7B = "configs/models/qwen2.5-7b.config.json"


MODES = {"sync": 0, "one_step_off": 1}


def mode_step(pp, mode: str, eta: int | None = None) -> float:
    """Seconds per step of placement prediction ``pp`` in ``mode``: the synchronous step, or, when rollout and
    training have their own devices, generation running up to ``eta`` batches ahead of training
    (:func:`rlm_lab.cost.asynchrony.simulate`; one-step-off is eta = 1); on shared devices nothing overlaps."""
    if mode not in ("sync", "one_step_off", "async"):
        raise RlmLabError(f"mode must be sync, one_step_off or async, got {mode!r}")
    eta = MODES.get(mode, eta)
    if mode == "async" and (eta is None or isinstance(eta, bool) or not isinstance(eta, int) or eta < 1):
        raise RlmLabError(f"mode async needs a staleness bound eta >= 1, got {eta!r}")
    if eta == 0 or not pp.placement.rollout_separate:
        return pp.step_s
    ph = {p: t for p, (t, _) in pp.phases.items()}
    g = ph["reshard"] + ph["generation"]
    t = ph["preparation"] + ph["advantage"] + ph["training"]
    return simulate([g] * 64, [t] * 64, eta, ph["sync"]).step_s


def default_rows(devices: int = 64, profile: str = "h100-sxm", model: str = MODEL_7B, workload=None,
                 defaults=DEFAULTS) -> list[dict]:
    """Predictions: the 7B workload on ``devices`` GPUs under each framework's default (:data:`DEFAULTS`)."""
    wl = workload or workload_7b()
    cluster = Cluster(devices, "gpu")
    reg = load_registry()
    rows = []
    for d in defaults:
        mode = d.mode + (f" (eta {d.eta})" if d.mode == "async" else "")
        row = {"framework": reg[d.framework].name, "algorithm": d.algo.upper(), "placement": None, "mode": mode,
               "fits": None, "step_s": None, "sync_step_s": None, "critical": None, "memory_gib": None,
               "capacity_gib": None, "basis": d.basis}
        if d.placement is None:
            row["mode"] = "-"
            rows.append(row)
            continue
        alg = algorithm(d.algo, 0)
        p = get_placement(d.placement, cluster, alg, **dict(d.kw))
        pp = predict_placement(p, str(REPO / model), alg, wl, profile, cluster)
        fullest = max(pp.sets, key=lambda s: s.memory.total / s.capacity)
        row |= {"placement": p.describe(), "fits": pp.fits, "memory_gib": fullest.memory.total / 2**30,
                "capacity_gib": fullest.capacity / 2**30}
        if pp.fits:
            stage, set_name, _ = pp.critical()
            row |= {"step_s": mode_step(pp, d.mode, d.eta), "sync_step_s": pp.step_s,
                    "critical": stage if set_name == "-" else f"{stage} on {set_name}"}
        rows.append(row)
    return rows


def advisor_row(devices: int = 64, profile: str = "h100-sxm", model: str = MODEL_7B, workload=None) -> dict:
    """Prediction: the fastest synchronous placement :func:`rlm_lab.cost.advise.advise` finds for the same
    workload, as a row of :func:`default_rows`' table (the reference the defaults are read against)."""
    cluster = Cluster(devices, "gpu")
    best = advise(str(REPO / model), algorithm("grpo", 0), workload or workload_7b(), cluster, profile).ranked[0]
    fullest = max(best.sets, key=lambda s: s.memory.total / s.capacity)
    stage, set_name, _ = best.critical()
    return {"framework": "rlm-lab advise", "algorithm": "GRPO", "placement": best.placement.describe(), "mode": "sync",
            "fits": True, "step_s": best.step_s, "sync_step_s": best.step_s,
            "critical": stage if set_name == "-" else f"{stage} on {set_name}", "memory_gib": fullest.memory.total / 2**30,
            "capacity_gib": fullest.capacity / 2**30, "basis": "the fastest synchronous placement the advisor finds"}


def _gib(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def default_html(rows: list[dict]) -> str:
    head = ("<tr><th>framework</th><th>algorithm</th><th>default placement</th><th>mode</th><th>fits</th>"
            "<th>predicted step</th><th>critical stage</th><th>memory / device (GiB)</th><th>capacity (GiB)</th>"
            "<th>default from</th></tr>")
    body = "".join(
        f"<tr><td>{escape(r['framework'])}</td><td>{r['algorithm']}</td><td>{escape(r['placement'] or '-')}</td>"
        f"<td>{escape(r['mode'])}</td><td>{'-' if r['fits'] is None else ('yes' if r['fits'] else 'no')}</td>"
        f"<td>{_num(r['step_s'], 's')}</td><td>{escape(r['critical'] or '-')}</td><td>{_gib(r['memory_gib'])}</td>"
        f"<td>{_gib(r['capacity_gib'])}</td><td><small>{escape(r['basis'])}</small></td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


# ---- each shipped example config (the importers' predictions) -----------------------------------------------

def example_rows() -> tuple[list[dict], str]:
    """The importers' prediction for every shipped example config (``rlm_lab.frameworks.importers``), and a
    note; ``([], why)`` when the importers are not part of this checkout."""
    return example_predictions(), ""


def same_workload_rows() -> tuple[list[dict], str]:
    """The importers' side-by-side: one GRPO workload written in each supported framework's own config format,
    imported and predicted (``rlm_lab.frameworks.importers.same_workload``); ``([], why)`` without them."""
    wl = workload_7b()
    return same_workload_predictions("Qwen/Qwen2.5-7B-Instruct", gpus=64, prompts=wl.prompts, group=wl.group_size,
                                     prompt_len=wl.prompt_len, response_len=wl.response.length,
                                     micro_batch=wl.micro_batch), ""


def corpus_rows() -> tuple[list[dict], str]:
    """Every entry of the corpus of upstream configs and run scripts (data/configs/corpus, pinned commits),
    imported and predicted or refused in one line (``rlm_lab.frameworks.importers.corpus``); ``([], why)``
    without the importers."""
    return corpus_predictions(), ""


def corpus_html(rows: list[dict]) -> str:
    """The corpus table: framework, file, commit, priced or why not, step, critical stage, memory per device."""
    head = ("<tr><th>framework</th><th>file</th><th>commit</th><th>priced or why not</th><th>predicted step</th>"
            "<th>critical stage</th><th>memory / device (GiB)</th></tr>")
    body = "".join(
        f"<tr><td>{escape(r['framework'])}</td><td><code>{escape(r['file'].split('/', 1)[1])}</code></td>"
        f"<td><code>{escape(r['commit'])}</code></td>"
        f"<td>{'priced' if r['outcome'] == 'priced' else escape(r['why'])}</td><td>{_num(r.get('step_s'), 's')}</td>"
        f"<td>{escape(str(r.get('critical') or '-'))}</td><td>{_gib(None if r.get('memory_per_device_bytes') is None else r['memory_per_device_bytes'] / 2**30)}</td></tr>"
        for r in rows)
    return f"<table>{head}{body}</table>"


def corpus_values(rows: list[dict]) -> dict:
    """How many corpus entries, how many priced (and the share), and the counts per framework."""
    n, priced = len(rows), sum(r["outcome"] == "priced" for r in rows)
    per = Counter(r["framework"] for r in rows)
    ok = Counter(r["framework"] for r in rows if r["outcome"] == "priced")
    # one upstream run script (or config, for the frameworks run from one) per framework: its first priced entry
    first: dict = {}
    for r in rows:
        if r["outcome"] == "priced" and r.get("step_s") is not None:
            first.setdefault(r["framework"], r)
    return {"ch08_corpus": str(n), "ch08_corpus_priced": str(priced),
            "ch08_corpus_share": f"{100 * priced / n:.0f} %" if n else "-",
            "ch08_corpus_frameworks": str(len(per)),
            "ch08_corpus_counts": "; ".join(f"{fw} {ok[fw]} of {per[fw]}" for fw in sorted(per)),
            "ch08_corpus_upstream": "; ".join(
                f"{fw} {r['file'].split('+')[0].split('/', 1)[1]} {_num(r['step_s'], 's')}"
                for fw, r in sorted(first.items()))}


def census_values(rows: list[dict] | None = None) -> dict:
    """The census of every candidate file (data/configs/corpus_census.tsv, read when ``rows`` is None): RL runs,
    how many priced (fitting), the share, and how many were refused for want of a shipped model config, the
    largest class; ``{}`` without the importers."""
    if rows is None:
        rows = read_census()
    rl = [r for r in rows if r["rl_run"]]
    priced = sum(r["outcome"] == "priced" for r in rl)
    no_model = sum(r["outcome"] == "refused" and "no model config ships" in r["why"] for r in rl)
    return {"ch08_census_runs": str(len(rl)), "ch08_census_priced": str(priced),
            "ch08_census_share": f"{100 * priced / len(rl):.0f} %" if rl else "-",
            "ch08_census_no_model": str(no_model)}


def example_html(rows: list[dict]) -> str:
    """The framework x example-config table: placement, mode, step (and the synchronous step of the same
    placement when the mode overlaps), critical stage, memory per device against capacity, fits."""
    reg = load_registry()

    def mem(r):
        m, c = r.get("memory_per_device_bytes"), r.get("capacity_bytes")
        return "-" if m is None else f"{m / 2**30:.1f} of {c / 2**30:.1f}" if c else f"{m / 2**30:.1f}"

    def mode(r):
        eta = r.get("eta")
        return str(r.get("mode", "-")) + (f" (eta {eta})" if r.get("mode") not in (None, "sync") and eta is not None else "")

    head = ("<tr><th>framework</th><th>config</th><th>model</th><th>GPUs</th><th>placement</th><th>mode</th>"
            "<th>fits</th><th>predicted step</th><th>synchronous step</th><th>critical stage</th>"
            "<th>memory / device (GiB)</th></tr>")
    body = "".join(
        f"<tr><td>{escape(reg[r['framework']].name if r['framework'] in reg else r['framework'])}</td>"
        f"<td><code>{escape(Path(r['config']).name)}</code></td><td>{escape(str(r.get('model', '-')))}</td>"
        f"<td>{r.get('devices', '-')}</td><td>{escape(str(r.get('placement', '-')))}</td>"
        f"<td>{escape(mode(r))}</td><td>{'yes' if r.get('fits') else 'no'}</td>"
        f"<td>{_num(r.get('step_s'), 's')}</td><td>{_num(r.get('sync_step_s'), 's')}</td>"
        f"<td>{escape(str(r.get('critical') or '-'))}</td><td>{mem(r)}</td></tr>"
        for r in rows)
    return f"<table>{head}{body}</table>"


# ---- the values the notebook glues into its prose --------------------------------------------------------------

def coverage_values(cov: dict) -> dict:
    """From :func:`coverage`: the frameworks, cells, cells that name an option and cells that say "not found"."""
    return {"ch08_frameworks": str(cov["frameworks"]), "ch08_cells": str(cov["cells"]), "ch08_found": str(cov["found"]),
            "ch08_not_found": str(cov["cells"] - cov["found"])}


def knob_table(rows: list[dict]) -> list[dict]:
    """:func:`knob_rows` as the page's table: the records counted, the predictor terms named without the package."""
    return [{**r, "records": len(r["records"]),
             "predictor terms": ", ".join(t.removeprefix("rlm_lab.cost.") for t in r["predictor terms"])} for r in rows]


def packing_values(measured: list[dict]) -> dict:
    """Packing's measured and predicted gain (chapter 7's record) as the prose quotes them; the unit keeps
    MyST-NB from reading "1.40" back as the number 1.4."""
    pk = next(r for r in measured if r["knob"] == KNOBS["packing"].title)
    return {"ch08_pack_measured": f"{pk['measured']:.2f}×", "ch08_pack_predicted": f"{pk['predicted']:.2f}×"}


def default_values(defaults: list[dict], advisor: dict) -> dict:
    """The advisor's placement and step, how many defaults fit, the fastest of them (ties within 1e-9 all named)
    and the ones that do not fit."""
    fit = [r for r in defaults if r["fits"]]
    best = min(fit, key=lambda r: r["step_s"])
    return {"ch08_advisor": str(advisor["placement"]), "ch08_advisor_s": f"{advisor['step_s']:.1f} s",
            "ch08_default_fit": str(len(fit)),
            "ch08_default_best": ", ".join(r["framework"] for r in fit if r["step_s"] <= best["step_s"] * (1 + 1e-9)),
            "ch08_default_best_s": f"{best['step_s']:.1f} s",
            "ch08_default_nofit": ", ".join(r["framework"] for r in defaults if r["fits"] is False)}


def example_values(examples: list[dict]) -> dict:
    """How many example configs were predicted, of how many frameworks, and how many fit."""
    return {"ch08_examples": str(len(examples)), "ch08_example_frameworks": str(len({r["framework"] for r in examples})),
            "ch08_examples_fit": str(sum(bool(r["fits"]) for r in examples))}


def survey_rows() -> list[dict]:
    """The survey's 18 systems (arXiv 2608.27046 Sec. 6.2) by class: status and the Table 11 columns each row gives."""
    return [{"class": s.survey_class, "system": s.name, "status": s.status,
             "table11": ", ".join(f"{k} {s.column(k)}" for k in TABLE11 if s.column(k) != NOT_READ) or "-"}
            for s in load_survey_systems()]


def reconcile(defaults: list[dict], same: list[dict]) -> list[dict]:
    """The two 7B tables side by side, for each framework in both: the defaults table prices generation with
    ``workload_7b``'s engine (a static batch: every row waits for the longest), the importers' table with the
    engine each framework's config names (a vLLM/SGLang continuous engine, with the generation TP the config
    sets); the step times differ by that, not by a disagreement (placement and mode are tested to agree)."""
    by = {r["framework"].lower(): r for r in defaults}
    out = []
    for s in same:
        d = by.get(s["framework"].lower())
        if d is None or d.get("step_s") is None or s.get("step_s") is None:
            continue
        out.append({"framework": d["framework"], "defaults table (static batch)": f"{d['step_s']:.1f} s, {d['placement']}",
                    "importers' table (continuous engine)": f"{s['step_s']:.1f} s, {s['placement']}",
                    "static / continuous": f"{d['step_s'] / s['step_s']:.2f}x"})
    return out
