"""Chapter 7's records and tables: which records the chapter shows at a size, and the closing ranking.

At ``smoke`` size the chapter measures now (into the build tree, reused while it is there); at ``cpu`` and
``gpu`` it reads the committed records ``data/runs/<size>/ch07_*`` and, where one is missing, says "not
measured yet" with the command that makes it (it never measures a cpu-size run inside a book build).
"""

from __future__ import annotations

import json
import statistics

from ...compare import BAR
from ...cost import longtail as C
from ...evidence import Interval, bar_word, error_interval, largest, ratio_interval, ratio_word, repeat_interval
from ... import reference_report as RR
from ...record import finished, load_record, reference_root, runs_root
from ...sizes import check_size
from ...tables import format_table, text
from ...tasks import parse_task
from ...tasks.chain import answer_length
from ...trace_plots import _figure
from .run import TECHNIQUES, measure

COMMAND = "flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab longtail --size {size} --out data/runs/{size}"
TABLE_COLUMNS = ("technique", "predicted gain", "measured gain", "95% interval", "rel. error", "error interval",
                 "verdict")

# what each record's "gain" is: the ratio (baseline / technique) of time, or of work for dynamic sampling
GAIN = {
    "overprovision": ("speedup", "step time, full batch of n / first n of n' done"),
    "tail_batching": ("speedup", "rounds' time, arrival order / long prompts in their own rounds"),
    "dispatch": ("speedup", "makespan, round-robin / longest-first"),
    "packing": ("speedup", "forward+backward, padded / packed"),
    "dynamic_sampling": ("inflation", "groups generated per group kept (a cost, not a gain)"),
    "fusion": ("speedup", "generate+score, score after / score as each finishes"),
}


def load_reference(size: str = "cpu") -> dict:
    """``{technique: record or None}`` from ``data/runs/<size>/ch07_*``; None: not measured yet. A folder
    that is there must hold a completed run (else the RecordError names it)."""
    size = check_size(size)
    return {t: (load_record(reference_root(size) / f"ch07_{t}") if (reference_root(size) / f"ch07_{t}").exists()
                else None) for t in TECHNIQUES}


def ensure_runs(size: str) -> dict:
    """The records the chapter shows at ``size`` (see the module docstring)."""
    size = check_size(size)
    if size != "smoke":
        return load_reference(size)
    own = {t: runs_root(size) / f"ch07_{t}" for t in TECHNIQUES}
    todo = [t for t, d in own.items() if not finished(d)]
    if todo:
        measure(size, only=todo)
    return {t: load_record(d) for t, d in own.items()}


def gain_row(technique: str, record) -> dict:
    """Predicted and measured gain of one technique, with the measured gain's 95 % interval and the
    verdict against the 25 % bar, both from :mod:`rlm_lab.evidence`: the measured gain is the median of the
    paired repeats' gains (each repeat ran both variants back to back), "met" only when the whole error
    interval is inside the bar, "not met" only when wholly outside, otherwise "undecided"; a record without
    repeats is one run and decides nothing. ``side`` says whether the gain's interval excludes 1."""
    key, meaning = GAIN[technique]
    if record is None:
        return {"technique": technique, "predicted gain": None, "measured gain": None, "95% interval": None,
                "rel. error": None, "error interval": None, "verdict": "not measured yet", "meaning": meaning,
                "side": None, "repeats": 0, "gain_lo_hi": None}
    res = record.results
    pred = res["predicted"][key]
    spread = res["measured"].get(f"{key}_spread")  # every repeat's gain, its pair run back to back
    reps = spread.get("reps") if spread else None
    gain = repeat_interval(reps) if reps else Interval(res["measured"][key], None, None, 1)
    err = error_interval(pred, gain)
    fmt = lambda iv: f"{iv.lo:.2f}-{iv.hi:.2f}" if iv.decided else "one run"  # noqa: E731
    fmt_err = lambda iv: f"{iv.lo:+.0%} to {iv.hi:+.0%}" if iv.decided else "one run"  # noqa: E731
    return {"technique": technique, "predicted gain": pred, "measured gain": gain.estimate,
            "95% interval": fmt(gain), "rel. error": err.estimate, "error interval": fmt_err(err),
            "verdict": bar_word(err, BAR), "meaning": meaning, "side": ratio_word(gain, "above 1", "below 1"),
            "repeats": gain.n, "gain_lo_hi": (gain.lo, gain.hi) if gain.decided else None}


def ranking(runs: dict) -> list[dict]:
    """The closing table: every technique, measured ones ranked by measured gain (largest first; dynamic
    sampling's inflation is a cost, so it ranks by 1/inflation), then the ones not measured yet."""
    rows = [gain_row(t, runs.get(t)) for t in TECHNIQUES]

    def benefit(r):
        g = r["measured gain"]
        return 1 / g if r["technique"] == "dynamic_sampling" else g

    done = sorted((r for r in rows if r["measured gain"] is not None), key=benefit, reverse=True)
    return done + [r for r in rows if r["measured gain"] is None]


LEARN_ARMS = ("baseline", "overprovision", "dynamic_sampling")


def load_learning(size: str = "cpu", seeds: int = 3) -> dict:
    """``{arm: [(record, learning.json dict), ...]}``, one pair per seed present (seed 0 first):
    the committed learning runs ``data/runs/<size>/ch07_learn_<arm>[_seed<k>]`` (:mod:`rlm_lab.longtail.
    learning`); an empty list: not run yet."""
    size = check_size(size)
    out = {}
    for arm in LEARN_ARMS:
        out[arm] = []
        for k in range(seeds):
            d = reference_root(size) / (f"ch07_learn_{arm}" + (f"_seed{k}" if k else ""))
            if (d / "learning.json").exists():
                out[arm].append((load_record(d), json.loads((d / "learning.json").read_text())))
    return out


def accuracy_difference(acc_a: float, acc_b: float, n: int) -> dict:
    """Difference of two held-out accuracies on the same ``n`` problems and the bar it is read against,
    fixed before the runs: 2 standard errors of a difference of two independent binomial proportions,
    2 * sqrt((a(1-a) + b(1-b)) / n). One seed per arm: seed-to-seed spread is not in it."""
    diff = acc_a - acc_b
    bar = 2 * ((acc_a * (1 - acc_a) + acc_b * (1 - acc_b)) / n) ** 0.5
    return {"difference": diff, "bar": bar, "effect": abs(diff) > bar}


def seeds_effect(arm_acc: list, base_acc: list, n: int) -> dict:
    """Several seeds (arm and baseline paired by seed): the mean difference, the 2-standard-error bar of a
    mean of ``k`` paired differences of binomial proportions on ``n`` problems, and "effect" only when the
    mean clears it *and* every seed's difference has the same sign."""
    k = min(len(arm_acc), len(base_acc))
    diffs = [a - b for a, b in zip(arm_acc, base_acc)]
    a, b = sum(arm_acc[:k]) / k, sum(base_acc[:k]) / k
    bar = 2 * ((a * (1 - a) + b * (1 - b)) / (k * n)) ** 0.5
    same = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    return {"difference": a - b, "bar": bar, "seeds": k, "diffs": diffs, "effect": abs(a - b) > bar and same}


def _gain_interval(row: dict) -> Interval:
    lo_hi = row.get("gain_lo_hi")
    return Interval(row["measured gain"], *(lo_hi or (None, None)), row.get("repeats") or 1)


def summary(table: list[dict], size: str) -> dict:
    """The values chapter 7 glues from its closing table: the technique with the largest measured gain (only when
    its interval lies above every other speed-up's, :func:`rlm_lab.evidence.largest`; else "undecided" and why), how
    many verdicts are met / not met / undecided, how many repeated gains have an interval that excludes 1, and
    the one sentence that depends on the size the book was built at."""
    best, why = largest({r["technique"]: _gain_interval(r) for r in table
                         if r["measured gain"] is not None and r["technique"] != "dynamic_sampling"})
    repeated = [r for r in table if r.get("repeats", 0) and r["repeats"] > 1]
    size = check_size(size)
    note = ("At `smoke` size the model is tiny and the machine shared, so per-call overheads, not decode steps, set "
            "many of these times: the verdicts say how far the decode-step model is from that, not how the "
            "techniques scale." if size == "smoke" else
            f"At `{size}` size these are the committed records `data/runs/{size}/ch07_*`.")
    return {"ch07_best": why,
            "ch07_n_rows": len(table),
            "ch07_n_met": sum(r["verdict"] == "met" for r in table),
            "ch07_n_not_met": sum(r["verdict"] == "not met" for r in table),
            "ch07_n_undecided": sum(r["verdict"] == "undecided" for r in table),
            "ch07_n_outside": sum(r["side"] in ("above 1", "below 1") for r in repeated),
            "ch07_n_repeated": len(repeated),
            "ch07_size_note": note}


def plot_gains(table: list[dict]):
    """Predicted against measured gain per technique: the measured median with its 95 % interval as an error
    bar, the prediction as a cross, the 25 % bar around the prediction shaded; log scale, 1 = no gain."""
    rows = [r for r in table if r["measured gain"] is not None]
    fig = _figure(8.0, 0.5 * max(1, len(rows)) + 1.4)
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        g = r["measured gain"]
        lo, hi = r["gain_lo_hi"] or (g, g)
        ax.errorbar([g], [i], xerr=[[g - lo], [hi - g]], fmt="o", color="#1f77b4", capsize=3,
                    label="measured (median, 95% interval)" if i == 0 else None)
        p = r["predicted gain"]
        ax.plot([p], [i], "x", color="#d62728", markersize=8, label="predicted" if i == 0 else None)
        ax.fill_betweenx([i - 0.3, i + 0.3], p / (1 + BAR), p / (1 - BAR), color="#d62728", alpha=0.12,
                         label="measured within the 25% bar" if i == 0 else None)
    ax.axvline(1.0, color="#999999", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [f"{r['technique']} ({r['verdict']})" for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("gain (baseline / technique; dynamic sampling: generations per kept group)")
    if rows:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.set_title("no technique measured yet")
    return fig


def learning_table(learn: dict) -> list[dict]:
    """Chapter 7's learning runs, one row per arm and seed: steps, held-out accuracy before and after (overall and
    by number of operations), the mean completion length in the first and last fifth of training, RL seconds and the
    load average."""
    table7 = []
    for arm in LEARN_ARMS:
        for seed, (rec_, lj) in enumerate(learn[arm]):
            r, ll = rec_.results, lj["length_log"]
            q = max(1, len(ll) // 5)
            table7.append({"arm": arm, "seed": rec_.data["config"]["seed"], "steps": r["rl_steps"],
                           "acc. before": r["accuracy_before"], "acc. after": r["accuracy_after"],
                           **{f"acc. {b} ops": round(v["accuracy"], 3) for b, v in lj["accuracy_by_ops"].items()},
                           "mean length first/last fifth": f"{statistics.mean(x['mean_length'] for x in ll[:q]):.1f}/"
                                                          f"{statistics.mean(x['mean_length'] for x in ll[-q:]):.1f}",
                           "RL s": r["rl_seconds"], "load": round(lj["loadavg"][0], 1)})
    return table7


def learning_effects(learn: dict) -> list[str]:
    """One sentence per technique arm (over-provisioning, dynamic sampling) against the baseline: held-out accuracy
    with the bar fixed before the runs (:func:`accuracy_difference` for one seed, :func:`seeds_effect` for several),
    the same by number of operations beyond two, and the lengths it trained on; empty when no baseline ran."""
    effects = []
    if not learn["baseline"]:
        return effects
    base = learn["baseline"]
    n_eval = base[0][0].results["eval_problems"]
    for arm in ("overprovision", "dynamic_sampling"):
        if not learn[arm]:
            effects.append(f"{arm}: not run yet")
            continue
        runs_ = learn[arm][:len(base)]
        acc = [r.results["accuracy_after"] for r, _ in runs_]
        acc0 = [r.results["accuracy_after"] for r, _ in base[:len(runs_)]]
        if len(runs_) == 1:
            d = accuracy_difference(acc[0], acc0[0], n_eval)
            how = "1 seed"
        else:
            d = seeds_effect(acc, acc0, n_eval)
            how = f"{d['seeds']} seeds, per seed " + ", ".join(f"{x:+.1%}" for x in d["diffs"])
        words = (f"{arm}: held-out accuracy {statistics.mean(acc):.1%} against the baseline's "
                 f"{statistics.mean(acc0):.1%} ({d['difference']:+.1%}, {how}; bar ±{d['bar']:.1%}: "
                 f"{'an effect' if d['effect'] else 'within noise'})")
        for b in [b for b in runs_[0][1]["accuracy_by_ops"] if b not in ("1", "2")]:
            a_ = [lj["accuracy_by_ops"][b]["accuracy"] for _, lj in runs_]
            z_ = [lj["accuracy_by_ops"][b]["accuracy"] for _, lj in base[:len(runs_)]]
            nb = runs_[0][1]["accuracy_by_ops"][b]["n"]
            dd = accuracy_difference(a_[0], z_[0], nb) if len(runs_) == 1 else seeds_effect(a_, z_, nb)
            words += (f"; on {b}-operation problems {statistics.mean(a_):.1%} against {statistics.mean(z_):.1%} "
                      f"(n={nb}, {'an effect' if dd['effect'] else 'within noise'})")
        if arm == "overprovision":
            kept = statistics.mean(x for _, lj in runs_ for x in lj["kept_mean_length"])
            gen = statistics.mean(x for _, lj in runs_ for x in lj["generated_mean_length"])
            plain = statistics.mean(x["mean_length"] for _, lj in base[:len(runs_)] for x in lj["length_log"])
            words += (f"; the completions it trained on averaged {kept:.1f} tokens against {gen:.1f} generated "
                      f"({kept / gen - 1:+.0%}: the short-answer bias of its selection) and {plain:.1f} in the "
                      f"baseline run ({kept / plain - 1:+.0%}: the recycled long prompts, regenerated, fill the extra "
                      "groups, so what it keeps is "
                      + ("about the sampler's own mix" if abs(kept / plain - 1) < 0.1 else
                         "shorter than the sampler's mix" if kept < plain else "longer than the sampler's mix") + ")")
        else:
            infl = statistics.mean(lj["inflation"] for _, lj in runs_)
            left = sum(lj["all_equal_left"] for _, lj in runs_)
            mine = statistics.mean(x["mean_length"] for _, lj in runs_ for x in lj["length_log"])
            plain = statistics.mean(x["mean_length"] for _, lj in base[:len(runs_)] for x in lj["length_log"])
            words += (f"; it generated {infl:.2f} groups per group trained on "
                      f"({left} all-equal groups left after its retries), and the completions it trained on averaged "
                      f"{mine:.1f} tokens against the baseline run's {plain:.1f} ({mine / plain - 1:+.0%}: the groups "
                      "it drops are the all-solved and the all-failed ones, and which of them are long decides "
                      "the sign)")
        effects.append(words)
    return effects


def runs_status(runs: dict, size: str) -> str:
    """What chapter 7 says of its records at ``size``: the ones not measured yet (with the command that makes
    them) and the load average each measured one finished under."""
    size = check_size(size)
    lines = []
    missing = [t for t, r in runs.items() if r is None]
    if missing:
        lines.append(f"not measured yet at {size} size: {', '.join(missing)}.")
        if size == "gpu":
            lines.append("Chapter 7 measures on CPU only so far: there is no gpu-size run to make yet.")
        else:
            lines += ["One command makes them (under the exclusive measurement lock):", "    " + COMMAND.format(size=size)]
    for t, r in runs.items():
        if r is not None:
            lines.append(f"ch07_{t}: load average {[round(x, 1) for x in r.results['loadavg']]} (1, 5, 15 min) when it "
                         "finished; this machine is shared, so times are noisy")
    return "\n".join(lines)


def _rounded(v):
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    return v


def technique_text(technique: str, record, keys_pred, keys_meas, size: str) -> str:
    """One technique's section of chapter 7 as text: its prediction (made from the lengths before the run), its
    measurement, and the gain compared (:func:`gain_row`)."""
    if record is None:
        return f"{technique}: not measured yet at {size} size"
    pred, meas = record.results["predicted"], record.results["measured"]
    row = gain_row(technique, record)
    return "\n".join([
        format_table([{"": "predicted", **{k: _rounded(pred.get(k)) for k in keys_pred}}]),
        format_table([{"": "measured", **{k: _rounded(meas.get(k)) for k in keys_meas}}]),
        f"gain ({row['meaning']}): predicted {row['predicted gain']:.2f}, measured {row['measured gain']:.2f} "
        f"(median of {row['repeats']} paired repeats, 95% interval {row['95% interval']}), error "
        f"{row['rel. error']:+.0%} ({row['error interval']}): {row['verdict']}; the gain's interval is {row['side']}"])


# ---- the notebook's sections -------------------------------------------------------------------------------

def lengths_rows(p: dict) -> list[dict]:
    """The ``chain`` task's reference answers (one token per character plus the EOS) over the size's pool: count,
    mean, quantiles, max, the expected longest of ``n`` and the bubble that expectation implies."""
    pool, _ = parse_task(p["task"]).split(p["pool"], 1, 0)
    lengths = sorted(answer_length(r) for r in pool)
    q = {f"q{int(k * 100)}": lengths[min(len(lengths) - 1, int(k * len(lengths)))] for k in (0.1, 0.5, 0.9, 0.99)}
    e_max = C.expected_order_statistic(C.pmf(lengths), p["n"], p["n"])
    return [{"problems": len(lengths), "mean": statistics.mean(lengths), **q, "max": lengths[-1],
             f"E[max of {p['n']}]": e_max, "bubble ~ 1 - mean / E[max]": 1 - statistics.mean(lengths) / e_max}]


def length_log_rows(learn: dict, stages: int = 5) -> list[dict] | None:
    """The lengths the trained policy generated (TRL's completion-length logs of the baseline learning run, seed
    0), averaged over ``stages`` consecutive stretches of its GRPO steps; None before the learning runs exist."""
    if not learn["baseline"]:
        return None
    rows_ = learn["baseline"][0][1]["length_log"]  # seed 0
    k = max(1, len(rows_) // stages)
    return [{"stage (GRPO steps)": f"{chunk[0]['step']}-{chunk[-1]['step']}",
             **{key: round(statistics.mean(r[key] for r in chunk), 1)
                for key in ("mean_length", "min_length", "max_length", "clipped_ratio")}}
            for chunk in (rows_[i:i + k] for i in range(0, len(rows_), k))]


def overprovision_values(record) -> dict:
    """Over-provisioning's bias toward short answers, predicted and measured in the first step and over all
    steps, and its number of steps (``ch07_op_*``; "n/a" before the record exists)."""
    if record is None:
        return {**{f"ch07_op_bias_{k}": "n/a" for k in ("pred", "first", "all")}, "ch07_op_steps": "n/a"}
    pred, meas = record.results["predicted"], record.results["measured"]
    return {"ch07_op_bias_pred": text(pred["short_bias"], "+.0%"),
            "ch07_op_bias_first": text(meas["short_bias_first"], "+.0%"),
            "ch07_op_bias_all": text(meas["short_bias_all"], "+.0%"), "ch07_op_steps": text(len(meas["early_s"]))}


def learning_section(learn: dict) -> tuple[str, dict]:
    """The learning runs' table (:func:`learning_table`) and the effects that pass the bar fixed in advance
    (:func:`learning_effects`), as text; and ``ch07_effects``, the effects in one sentence."""
    lines = [format_table(learning_table(learn)) if learn["baseline"] else "learning runs not made yet"]
    effects = learning_effects(learn)
    lines += [f"- {e}" for e in effects]
    return "\n".join(lines), {"ch07_effects": "; ".join(effects) if effects else "none measured yet"}


def show(runs: dict, size: str, technique: str, keys_pred, keys_meas):
    """Print ``technique``'s section of the notebook (:func:`technique_text`: the prediction made from the lengths
    before the run, and its measurement) and return its record (None before it exists)."""
    print(technique_text(technique, runs[technique], keys_pred, keys_meas, size))
    return runs[technique]


def window_agreement(table: list[dict], size: str, root=None) -> dict:
    """Whether the in-process repeats of the ranking (``table``, :func:`ranking`) and the newest committed window of
    chapter 7 (:mod:`rlm_lab.reference_report`: fresh processes, ABBA) agree on the side of 1 of each technique's
    gain. The window's ratio is on / off in seconds, so its "faster" is a gain above 1. Per technique: "agree"
    when both intervals decide the same side, "disagree" when they decide opposite sides, else "undecided".
    Returns the glue value ``ch07_win_agree``: one sentence naming each group."""
    rec = RR.latest_window(size, 7, root)
    if rec is None:
        return {"ch07_win_agree": "no window of chapter 7 committed at this size, so nothing to compare"}
    side = {"faster": "above 1", "slower": "below 1"}
    # the window's gain as the page's estimator: the median of the paired ratios off / on (not 1 / the median of on / off)
    values = {r["name"]: r["summary"]["values"] for r in rec.results.get("references", []) if r.get("chapter") == 7}
    window = {p["reference"]: (side.get(p["word"], "undecided"),
                               ratio_interval(values[p["reference"]][p["b"]], values[p["reference"]][p["a"]]).estimate)
              for p in RR.rows(rec, 7)[1]}
    groups = {"agree": [], "disagree": [], "undecided": []}
    for r in table:
        if r["technique"] not in window or r["measured gain"] is None:
            continue
        w, gain = window[r["technique"]]
        here = r["side"] if r["side"] in ("above 1", "below 1") else "undecided"
        key = "undecided" if "undecided" in (w, here) else ("agree" if w == here else "disagree")
        groups[key].append(f"{r['technique']} (gain {r['measured gain']:.2f} in one process, "
                           f"{gain:.2f} in the window)")
    parts = [f"{k}: {', '.join(v)}" for k, v in groups.items() if v]
    return {"ch07_win_agree": "; ".join(parts) if parts else "no technique measured in both"}


def with_current(table: list[dict], entries, size: str) -> list[dict]:
    """The ranking's rows with the results ledger's current value of each technique's gain (``entries`` from
    ``rlm_lab.ledger.build("cpu")``; ``ch07.<technique>.measured``): one value per quantity across the book. At
    ``cpu`` size a row whose record a reference window replaced is labelled history beside the window's value; at
    other sizes the rows are this build's own runs and the column gives the committed value for comparison."""
    d = {e.id: e for e in entries}
    out = []
    for r in table:
        e = d.get(f"ch07.{r['technique']}.measured")
        if e is None or e.value is None:
            cur = "-"
        else:
            iv = f" [{e.lo:.2f}, {e.hi:.2f}] ({e.method}, n = {e.n})" if e.lo is not None else f" ({e.counts})"
            window = any("/reference/" in s for s in e.records)
            cur = f"{e.value:.2f}{iv}" + (", the window" if window else "")
            if size == "cpu":
                cur = ("history; current: " + cur) if window else "this row"
            else:
                cur = "committed cpu: " + cur
        out.append({**r, "current (ledger)": cur})
    return out
