"""Chapter 10's records and the notebook's tables, texts and glued numbers.

The notebook reads the committed records ``data/runs/<size>/ch10_*`` (at ``smoke`` size the ``cpu`` ones:
a smoke book trains nothing) and, where one is missing, says "not measured yet" with the commands that make
it; it never trains inside a book build. ``ensure_runs(size, make=True)`` makes the runs of a size into the
build tree instead (reused while they are there): the slow test runs the whole chapter that way at ``smoke``.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path

from ...record import finished, load_record, reference_root, runs_root
from ...sizes import check_size
from ...tasks import parse_task
from ...tasks.mix import COMPONENTS
from ...tables import ledger_glue
from ...tasks.psum import parse_trace
from . import cases, compare
from .run import EXTRA, md_campaign, parallel_campaign

COMMANDS = (
    "rlm-lab open-directions --size {size} --part parallel --only predict sft --out data/runs/{size}",
    "rlm-lab open-directions --size {size} --part parallel --only grpo measure --out data/runs/{size}",
    "rlm-lab open-directions --size {size} --part multidomain --only predict --out data/runs/{size}",
    "rlm-lab open-directions --size {size} --part multidomain --only train systems --out data/runs/{size}",
    "rlm-lab open-directions --size {size} --part multidomain --only matrix --out data/runs/{size}",
)


def names(size: str) -> dict:
    """The records of each part at ``size``: ``{"parallel": [...], "multidomain": [...]}``."""
    ps, ms = cases.parallel(size)["seeds"], cases.multidomain(size)["seeds"]
    par = [cases.name("par", "predict"), *(cases.name("par", "sft", a) for a in cases.ARMS),
           *(cases.grpo_name(a, s) for s in ps for a in cases.ARMS), cases.name("par", "measure")]
    md = [cases.name("md", "predict"), *(cases.md_name(d, s) for s in ms for d in (None, *COMPONENTS)),
          *(cases.name("md", "matrix", f"seed{s}") for s in ms), cases.name("md", "systems")]
    return {"parallel": par, "multidomain": md}


def shown_size(size: str) -> str:
    """The size whose committed records the notebook shows at ``size``: ``cpu`` for ``smoke``, else itself."""
    size = check_size(size)
    return "cpu" if size == "smoke" else size


def ensure_runs(size: str, make: bool = False) -> dict:
    """``{name: record or None}`` of every chapter-10 record the notebook shows at ``size``: the committed ones
    of :func:`shown_size` (None: not measured yet); with ``make``, the runs of ``size`` itself, made now into
    ``runs_root(size)`` where they are not there yet."""
    size = check_size(size)
    if not make:
        shown = shown_size(size)
        root = reference_root(shown)
        return {n: load_record(root / n) if (root / n).exists() else None for part in names(shown).values()
                for n in part}
    root = runs_root(size)
    todo = {part: [n for n in ns if not finished(root / n)] for part, ns in names(size).items()}
    with _quiet_trl():
        if todo["parallel"]:
            parallel_campaign(size, force=True)
        if todo["multidomain"]:
            md_campaign(size, force=True)
    return {n: load_record(root / n) for part in names(size).values() for n in part}


class _quiet_trl:
    """TRL warns once per completion no reward function scored (with its kwargs); the untrained smoke model
    writes many malformed traces, so the page would fill with them: only TRL's GRPO logger is raised to ERROR,
    for the smoke runs."""

    def __enter__(self):
        self.logger = logging.getLogger("trl.trainer.grpo_trainer")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)
        return False


def status(runs: dict, size: str) -> str:
    """One line per record the chapter shows: made where, under what load, or not measured yet (with the
    commands)."""
    missing = [n for n, r in runs.items() if r is None]
    lines = [f"{len(runs) - len(missing)} of {len(runs)} records at size {size}"]
    loads = [r.results.get("loadavg_before") or r.results.get("load_average") for r in runs.values() if r is not None]
    loads = [x[0] if isinstance(x, list) else x for x in loads if x is not None]
    if loads:
        lines.append(f"load average (1 min) while they ran: {min(loads):.1f} .. {max(loads):.1f} (2 cores)")
    if missing:
        lines.append("not measured yet: " + ", ".join(missing))
        lines += ["make them with:", *(c.format(size=size) for c in COMMANDS)]
    return "\n".join(lines)


def extra(record) -> dict:
    """The ``ch10.json`` next to a GRPO run's record (its step clock, the rollout's work and depth)."""
    path = Path(record.dir) / EXTRA
    return json.loads(path.read_text()) if path.exists() else {}


# ---- parallel reasoning -------------------------------------------------------------------------------------

def trace_rows(size: str, n: int = 3) -> list[dict]:
    """The first ``n`` training problems, each as its sequential and its fork-join trace, with the trace's
    work, depth and acceleration ratio 1 - D/W (from :func:`rlm_lab.tasks.psum.parse_trace`)."""
    seq_rows, _ = parse_task(cases.task_spec(size, "seq")).split(n, 1, 0)
    par_rows, _ = parse_task(cases.task_spec(size, "par")).split(n, 1, 0)
    out = []
    for s, r in zip(seq_rows, par_rows):
        for t in (s, r):
            tr = parse_trace(t["answer"])
            out.append({"prompt": s["prompt"], "trace": t["answer"], "work": tr.work, "depth": tr.depth,
                        "1 - D/W": round(tr.acceleration, 3)})
    return out


def parallel_ready(runs: dict, size: str) -> bool:
    return all(runs.get(n) is not None for n in names(size)["parallel"])


def training_rows(runs: dict, size: str) -> list[dict]:
    """Each GRPO run recorded so far: held-out accuracy before and after, the reward, the step time (median
    wall, CPU); a run not measured yet has no row."""
    rows = []
    for s in cases.parallel(size)["seeds"]:
        for a in cases.ARMS:
            r = runs.get(cases.grpo_name(a, s))
            if r is None:
                continue
            steps = extra(r).get("steps", [])[1:]
            rows.append({"arm": a, "seed": s, "accuracy before": r.results["accuracy_before"],
                         "accuracy after": r.results["accuracy_after"], "reward first": r.results["reward_first"],
                         "reward final": r.results["reward_final"],
                         "step wall s (median)": statistics.median(x["wall_s"] for x in steps) if steps else None,
                         "step CPU s (median)": statistics.median(x["cpu_s"] for x in steps) if steps else None})
    return rows


NOT_YET = "not measured yet"
# the glue names the closing note uses (tests check that the summaries return exactly these)
PARALLEL_GLUE = tuple(f"ch10_{k}" for k in (
    "acc_seq", "acc_par", "acc_diff", "acc_word", "work_seq", "work_par", "depth_seq", "depth_par", "depth_ratio",
    "depth_pred", "depth_verdict", "lat_seq", "lat_par", "lat_ratio", "lat_word", "lat_pred", "lat_verdict",
    "lat_problems", "seeds", "brent", "pred_depth_seq", "pred_depth_par", "pred_work_seq", "pred_work_par"))
MD_GLUE = tuple(f"ch10_md_{k}" for k in (
    "seeds", "mixed_vs", "linear_vs", "ties_vs", "dare_vs", "cat_vs", "bubble_mixed", "bubble_pred", "gen_ratio",
    "gen_word", "power"))


# the committed cpu records' numbers the page glues, read from the results ledger (``ch10.parallel.*``,
# ``ch10.multidomain.*``, made by ``rlm_lab.ledger`` from :mod:`.compare`): glue name -> (ledger id, format, scale)
_P = "ch10.parallel"
LEDGER_GLUE = {
    "ch10_acc_seq": (f"{_P}.accuracy.seq", "{:.3f}", 1.0), "ch10_acc_par": (f"{_P}.accuracy.par", "{:.3f}", 1.0),
    "ch10_acc_diff": (f"{_P}.accuracy_difference", "{:+.3f}", 1.0),
    **{f"ch10_{k}_{a}": (f"{_P}.{k}.{a}", "{:.1f}", 1.0) for k in ("work", "depth") for a in ("seq", "par")},
    **{f"ch10_pred_{k}_{a}": (f"{_P}.{k}.{a}.predicted", "{:.1f}", 1.0) for k in ("work", "depth") for a in ("seq", "par")},
    "ch10_depth_ratio": (f"{_P}.depth_ratio", "{:.2f}", 1.0), "ch10_depth_pred": (f"{_P}.depth_ratio.predicted", "{:.2f}", 1.0),
    "ch10_lat_seq": (f"{_P}.latency.seq", "{:.4f}", 1.0), "ch10_lat_par": (f"{_P}.latency.par", "{:.4f}", 1.0),
    "ch10_lat_ratio": (f"{_P}.latency_ratio", "{:.2f}", 1.0), "ch10_lat_pred": (f"{_P}.latency_ratio.predicted", "{:.2f}", 1.0),
    "ch10_md_bubble_mixed": ("ch10.multidomain.bubble_mixed", "{:.2f}", 1.0),
    "ch10_md_bubble_pred": ("ch10.multidomain.bubble_mixed.predicted", "{:.2f}", 1.0),
    "ch10_md_gen_ratio": ("ch10.multidomain.gen_ratio", "{:.2f}", 1.0),
}
# the verdict words glued beside them: glue name -> the ledger id whose verdict it is
LEDGER_WORDS = {"ch10_acc_word": f"{_P}.accuracy_difference", "ch10_depth_verdict": f"{_P}.depth_ratio.error",
                "ch10_lat_word": f"{_P}.latency_ratio", "ch10_lat_verdict": f"{_P}.latency_ratio.error",
                "ch10_md_gen_word": "ch10.multidomain.gen_ratio"}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def _from_ledger(values: dict, entries, size: str) -> dict:
    """``values`` with the numbers and words the ledger holds replaced by the ledger's, where the page shows the
    committed cpu records (the ledger's) and ``entries`` are given."""
    if size != "cpu" or not entries:
        return values
    d, led = {e.id: e for e in entries}, ledger_values(entries)
    return values | {k: v for k, v in led.items() if k in values} | {
        k: d[i].verdict for k, i in LEDGER_WORDS.items() if k in values and i in d}


def parallel_values(runs: dict, size: str, entries=()) -> dict:
    """The closing numbers of the parallel part, as text, for glue ("not measured yet" until its records exist);
    at ``cpu`` (the committed records) the results ledger's (``entries``: ``rlm_lab.ledger.build("cpu")``)."""
    if not parallel_ready(runs, size):
        return {k: NOT_YET for k in PARALLEL_GLUE}
    return _from_ledger(parallel_summary(runs, size), entries, size)


def md_values(runs: dict, size: str, entries=()) -> dict:
    """The closing numbers of the multi-domain part, as text, for glue ("not measured yet" until they exist); at
    ``cpu`` the bubble and the generation ratio are the results ledger's (``entries``)."""
    if not md_ready(runs, size):
        return {k: NOT_YET for k in MD_GLUE}
    return _from_ledger(md_summary(runs, size), entries, size)


def parallel_summary(runs: dict, size: str) -> dict:
    """The closing numbers of the parallel part, as text, for glue."""
    pred = runs[cases.name("par", "predict")].results["predicted"]
    meas = runs[cases.name("par", "measure")].results
    seeds = cases.parallel(size)["seeds"]
    qa, tk, la = compare.quality(meas, seeds), compare.tokens(meas, seeds, pred), compare.latency(meas, pred)
    return {
        "ch10_acc_seq": qa["accuracy"]["seq"].text("{:.3f}"), "ch10_acc_par": qa["accuracy"]["par"].text("{:.3f}"),
        "ch10_acc_diff": qa["difference"].text("{:+.3f}"), "ch10_acc_word": qa["word"],
        "ch10_work_seq": f"{tk['work']['mean']['seq']:.1f}", "ch10_work_par": f"{tk['work']['mean']['par']:.1f}",
        "ch10_depth_seq": f"{tk['depth']['mean']['seq']:.1f}", "ch10_depth_par": f"{tk['depth']['mean']['par']:.1f}",
        "ch10_depth_ratio": tk["depth"]["ratio"].text("{:.2f}"), "ch10_depth_pred": f"{tk['depth']['predicted']:.2f}",
        "ch10_depth_verdict": tk["depth"]["verdict"],
        "ch10_lat_seq": la["seq_s"].text("{:.4f}"), "ch10_lat_par": la["par_s"].text("{:.4f}"),
        "ch10_lat_ratio": la["ratio"].text("{:.2f}"), "ch10_lat_word": la["word"],
        "ch10_lat_pred": f"{la['predicted']:.2f}", "ch10_lat_verdict": la["verdict"],
        "ch10_lat_problems": str(la["problems"]), "ch10_seeds": str(len(seeds)),
        "ch10_brent": "{:.2f} .. {:.2f}".format(*pred["speedup_steps_brent"]),
        "ch10_pred_depth_seq": f"{pred['depth_seq']:.1f}", "ch10_pred_depth_par": f"{pred['depth_par']:.1f}",
        "ch10_pred_work_seq": f"{pred['work_seq']:.1f}", "ch10_pred_work_par": f"{pred['work_par']:.1f}",
    }


def plot_latency(measure) -> None:
    """Each problem's latency, sequential against parallel (seconds, median of its repeats)."""
    import matplotlib.pyplot as plt

    lat = measure.results["latency"]
    seq = [r["median_s"] for r in lat["seq"]]
    par = [r["median_s"] for r in lat["par"]]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.scatter(seq, par, s=14)
    top = max(seq + par) * 1.05
    ax.plot([0, top], [0, top], lw=0.8, color="grey", label="equal latency")
    ax.set_xlabel("sequential policy (s)")
    ax.set_ylabel("fork-join policy (s)")
    ax.set_title("latency per problem")
    ax.legend(loc="upper left")
    plt.show()


# ---- multi-domain RLVR --------------------------------------------------------------------------------------

def md_ready(runs: dict, size: str) -> bool:
    return all(runs.get(n) is not None for n in names(size)["multidomain"])


def matrix_records(runs: dict, size: str) -> dict:
    return {s: runs[cases.name("md", "matrix", f"seed{s}")] for s in cases.multidomain(size)["seeds"]}


def against_rows(recs: dict) -> list[dict]:
    """Each paradigm's accuracy minus the specialist's on every task (paired by seed), with its word."""
    return [{"paradigm": p, **{t: f"{d.text('{:+.2f}')} {w}" for t, (d, w) in cells.items()}}
            for p, cells in compare.against_specialists(recs).items()]


def transfer_rows(recs: dict) -> list[dict]:
    """Each specialist scored on every task (mean over seeds, 95 % interval)."""
    return [{"specialist": s, **{t: iv.text("{:.2f}") for t, iv in row.items()}}
            for s, row in compare.transfer(recs).items()]


def step_time_rows(runs: dict, size: str) -> list[dict]:
    """The training runs' step time: the mixed run against the separate runs (per task), medians over steps
    and seeds; and each paradigm's total (steps x median step time)."""
    seeds = cases.multidomain(size)["seeds"]
    kinds = {"mixed": [extra(runs[cases.md_name(None, s)]).get("steps", []) for s in seeds],
             **{t: [extra(runs[cases.md_name(t, s)]).get("steps", []) for s in seeds] for t in COMPONENTS}}
    st = compare.step_times(kinds)
    steps = {k: runs[cases.md_name(None if k == "mixed" else k, seeds[0])].results["rl_steps"] for k in kinds}
    return [{"run": k, "steps": steps[k], "step wall s": v["wall_s"].text("{:.3f}"),
             "step CPU s": v["cpu_s"].text("{:.3f}"), "run CPU s (steps x median)": steps[k] * v["cpu_s"].estimate}
            for k, v in st.items()]


def systems_rows(runs: dict, size: str) -> list[dict]:
    sysr = compare.systems(runs[cases.name("md", "systems")], runs[cases.name("md", "predict")].results["predicted"])
    return [{"batch": k, "mean length": v["mean_length"], "max length": v["max_length"],
             "bubble predicted": v["predicted_bubble"], "bubble measured": v["bubble"].text("{:.2f}"),
             "generate s": v["seconds"].text("{:.3f}")} for k, v in sysr.items() if k != "mixed_over_separate"]


def md_summary(runs: dict, size: str) -> dict:
    """The closing numbers of the multi-domain part, as text, for glue."""
    recs = matrix_records(runs, size)
    vs = compare.against_specialists(recs)
    sysr = compare.systems(runs[cases.name("md", "systems")], runs[cases.name("md", "predict")].results["predicted"])
    pw = compare.power(recs)
    words = {p: [f"{t} {compare.powered_word(w, pw.get(t))}" for t, (d, w) in cells.items()] for p, cells in vs.items()}
    moved = [t for t, (d, w) in pw.items() if w == "higher"]
    still = [f"{t} ({d.text('{:+.3f}')})" for t, (d, w) in pw.items() if w != "higher"]
    return {
        "ch10_md_power": (f"{len(moved)} of {len(pw)} tasks moved under their own specialist's GRPO ("
                          f"{', '.join(moved) or 'none'}); on the others ({', '.join(still) or 'none'}) the matrix has no "
                          "power to show interference or synergy, so its words there mean no power, not no effect"
                          if pw else "not measured"),
        "ch10_md_seeds": str(len(recs)),
        "ch10_md_mixed_vs": "; ".join(words.get("mixed", [])),
        "ch10_md_linear_vs": "; ".join(words.get("merge_linear", [])),
        "ch10_md_ties_vs": "; ".join(words.get("merge_ties", [])),
        "ch10_md_dare_vs": "; ".join(words.get("merge_dare", [])),
        "ch10_md_cat_vs": "; ".join(words.get("merge_cat", [])),
        "ch10_md_bubble_mixed": sysr["mixed"]["bubble"].text("{:.2f}"),
        "ch10_md_bubble_pred": f"{sysr['mixed']['predicted_bubble']:.2f}",
        "ch10_md_gen_ratio": sysr["mixed_over_separate"]["ratio"].text("{:.2f}"),
        "ch10_md_gen_word": sysr["mixed_over_separate"]["word"],
    }


def plot_matrix(runs: dict, size: str) -> None:
    """The task x paradigm accuracy matrix (mean over seeds) as a heat map."""
    import matplotlib.pyplot as plt

    m = compare.matrix(matrix_records(runs, size))
    cols = ["sft", "own", *[p for p in compare.PARADIGMS if p in m and p != "sft"]]
    data = [[m[c][t].estimate for c in cols] for t in COMPONENTS]
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 1.5, 3))
    im = ax.imshow(data, vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right")
    ax.set_yticks(range(len(COMPONENTS)), list(COMPONENTS))
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=8)
    fig.colorbar(im, ax=ax, label="held-out accuracy")
    ax.set_title("task x paradigm (mean of seeds)")
    plt.show()


def plot_lengths(runs: dict) -> None:
    """The generated lengths of the sampled GRPO batches: the mixture's against each task's alone."""
    import matplotlib.pyplot as plt

    batches = runs[cases.name("md", "systems")].results["batches"]
    fig, ax = plt.subplots(figsize=(6, 3))
    top = max(x for v in batches.values() for b in v for x in b["lengths"])
    for kind, v in batches.items():
        ax.hist([x for b in v for x in b["lengths"]], bins=range(1, top + 2), histtype="step", density=True,
                lw=2 if kind == "mixed" else 1, label=kind)
    ax.set_xlabel("generated tokens (EOS included)")
    ax.set_ylabel("share of rows")
    ax.set_title("one GRPO batch: mixed or one task")
    ax.legend(fontsize=8)
    plt.show()
