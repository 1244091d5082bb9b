"""Chapter 4's report: tables and figures, measured against predicted, per parallelism, from run records; and
the notebook's sections (:func:`this_build`, :func:`distributed_terms_section`, :func:`verdict_section`, ...),
each the text it prints, its tables and the values its prose glues."""

from __future__ import annotations

import os
import re
import shutil
import statistics
from pathlib import Path

from ...compare import BAR, GOAL
from ...cost.hardware import profile_of_machine
from ...errors import RlmLabError
from ...models import build_model, count_parameters
from ...parallel import data_parallel, fsdp
from ...parallel.bench.framework import distributed_section
from ...parallel.bench.step_time import framework_terms, predict_sweep, predicted_step_time
from ...parallel.mesh import Layout, validate
from ...parallel.predict import layout_of
from ...record import reference_root, repo_root
from ...tables import ledger_glue, text
from . import out_of_sample
from .compare import compare, summary
from .run import load_records, run_suite

FAMILIES = ("DP", "ZeRO", "TP", "PP", "CP", "EP")


def family(layout: dict) -> str:
    """Which section of the chapter a layout belongs to (the one-process baseline goes with DP)."""
    if layout["pp"] > 1:
        return "PP"
    if layout["cp"] > 1:
        return "CP"
    if layout["ep"] > 1:
        return "EP"
    if layout["tp"] > 1:
        return "TP"
    return "ZeRO" if layout["zero"] else "DP"


def rows(records, profile=None) -> list[dict]:
    """:func:`suite.compare` rows plus family, oversubscription and model-state memory (rank 0)."""
    out = []
    cmp = compare(records, profile)
    base = next((r for r in cmp if r["layout"] == "single"), None)
    for rec, row in zip(records, cmp):
        # ratios to the one-process run (compare ratios, not absolute seconds: the error common to every layout cancels)
        if base is not None:
            row["slowdown_measured"] = row["measured_ms"] / base["measured_ms"]
            if row.get("predicted_ms") is not None and base.get("predicted_ms"):
                row["slowdown_predicted"] = row["predicted_ms"] / base["predicted_ms"]
        r = rec.results
        row["family"] = family(r["layout"])
        row["oversubscribed"] = r.get("oversubscribed", False)
        row["state_MiB_rank0"] = r["memory"]["total"] / 2**20
        row["predicted_state_MiB"] = _predicted_state(r) / 2**20 if row["family"] in ("DP", "ZeRO") else None
        row["peak_rss_MiB_rank0"] = r["memory"]["peak_bytes"] / 2**20
        out.append(row)
    return out


def table(rs, columns=None):
    """A pandas DataFrame of the rows (the notebook displays it)."""
    import pandas as pd  # noqa: PLC0415  optional: pandas is not a dependency every install has

    cols = columns or ["layout", "world", "oversubscribed", "measured_ms", "predicted_ms", "predicted_compute_ms",
                       "predicted_framework_ms", "predicted_comm_ms", "time_rel_err",
                       "slowdown_measured", "slowdown_predicted", "counted_bytes", "predicted_bytes",
                       "bytes_equal", "check_ok"]
    df = pd.DataFrame(rs)
    return df[[c for c in cols if c in df.columns]].round(3)


def plot_family(rs, fam: str, ax=None):
    """Measured step time (bars) with the prediction overlaid (markers), and counted vs predicted
    message bytes, for the layouts of one parallelism. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    sel = [r for r in rs if r["family"] == fam]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2)) if ax is None else (ax[0].figure, ax)
    if not sel:
        a1.text(0.5, 0.5, f"no {fam} records", ha="center")
        return fig
    names = [r["layout"] + (" *" if r["oversubscribed"] else "") for r in sel]
    x = range(len(sel))
    a1.bar(x, [r["measured_ms"] for r in sel], color="tab:blue", label="measured")
    if any(r.get("predicted_ms") is not None for r in sel):
        a1.plot(x, [r.get("predicted_ms") for r in sel], "o", color="tab:orange", label="predicted")
        a1.plot(x, [r.get("predicted_ms", 0) - r.get("predicted_comm_ms", 0) for r in sel], "_", ms=18,
                color="tab:orange", label="predicted compute")
    a1.set_xticks(list(x), names, rotation=20, fontsize=8)
    a1.set_ylabel("ms / step")
    a1.legend(fontsize=8)
    a2.bar(x, [r["counted_bytes"] / 1e3 for r in sel], color="tab:green", label="counted")
    a2.plot(x, [None if r["predicted_bytes"] is None else r["predicted_bytes"] / 1e3 for r in sel], "o",
            color="black", label="formula")
    a2.set_xticks(list(x), names, rotation=20, fontsize=8)
    a2.set_ylabel("message kB / step (rank 0)")
    a2.legend(fontsize=8)
    fig.suptitle(f"{fam}: measured vs predicted" + ("  (* = oversubscribed)" if any(r["oversubscribed"] for r in sel) else ""))
    fig.tight_layout()
    return fig


def errors(rs, fam: str) -> str:
    """One line per layout: time error and byte equality, for the text under a figure."""
    lines = []
    for r in (r for r in rs if r["family"] == fam):
        t = "no time prediction (no calibrated profile)" if r.get("predicted_ms") is None else \
            f"predicted {r['predicted_ms']:.1f} ms vs measured {r['measured_ms']:.1f} ms ({100 * r['time_rel_err']:+.0f}%)"
        b = "bytes not predicted" if r["bytes_equal"] is None else ("bytes equal" if r["bytes_equal"] else "BYTES DIFFER")
        if r.get("slowdown_predicted") is not None:
            t += f"; vs one process: {r['slowdown_measured']:.2f}x measured, {r['slowdown_predicted']:.2f}x predicted"
        lines.append(f"{r['layout']:<22} {t}; {b}; matches 1 process: {r['check_ok']}")
    return "\n".join(lines)


def calibrated_profile(records):
    """The calibrated CPU profile (with collectives) of the machine that made ``records`` (their provenance
    names it: :func:`rlm_lab.cost.hardware.profile_of_machine`), or None when no profile of that machine is
    committed (then no time predictions). Records of several machines raise: one table prices one machine."""
    machines = {(h.get("cpu_model"), h.get("cpu_count")): h
                for h in ((r.data.get("provenance") or {}).get("hardware") or {} for r in records)}
    if len(machines) > 1:
        raise RlmLabError(f"chapter 4's records were made on {len(machines)} machines ({sorted(map(str, machines))}): "
                          "a table prices the records of one machine")
    if not machines:
        return None
    return profile_of_machine(next(iter(machines.values())), check=lambda p: p.collective("all_reduce"))


def _predicted_state(r: dict) -> float:
    """Model-state bytes per rank from the ZeRO table (arXiv 1910.02054, Fig. 1): AdamW fp32, N parameters."""
    n = r["memory"]["params"] // 4 if r["layout"]["zero"] == 0 else None
    if n is None:  # sharded: N from the gradient all-reduce/reduce-scatter message of the record's model

        n = count_parameters(build_model(r["model"])[0])
    d, z = r["layout"]["dp"], r["layout"]["zero"]
    parts = data_parallel.predicted_memory(n, d) if z == 0 else fsdp.predicted_memory(n, d, z)
    return sum(parts.values())


def plot_bubble(root: str | Path, prefix: str = "ch04_e2_pp2-"):
    """Pipeline idle fraction against micro-batches m: measured (per schedule) and (p-1)/(m+p-1),
    from the pipeline sweep records (``rlm_lab.parallel.bench.pp.measure_pp`` runs). Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    runs = [rec.results for rec in load_records(root, prefix) if "bubble_measured" in rec.results]
    for sched, marker in (("gpipe", "o"), ("1f1b", "s")):
        pts = sorted((r["microbatches"], r["bubble_measured"]) for r in runs if r.get("schedule") == sched)
        if pts:
            ax.plot(*zip(*pts), marker, label=f"measured {sched}")
    ms = sorted({r["microbatches"] for r in runs})
    if ms:
        p = runs[0]["world"]
        ax.plot(ms, [(p - 1) / (m + p - 1) for m in ms], "k-", label="(p-1)/(m+p-1)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("idle fraction")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


E2_COLUMNS = ["run", "world", "schedule", "microbatches", "oversubscribed", "step_s", "step_s_profile",
              "time_rel_err", "step_s_predicted", "rel_err_baseline_plus_comm", "bubble_measured", "bubble_predicted",
              "sent_bytes", "predicted_bytes", "bytes_match"]


def sweep_table(root: str | Path, kind: str, profile=None):
    """The PP/CP/EP measurement records (``ch04_e2_<kind>*``, written by the modules' own measurement
    runs) as a DataFrame: measured step time against the prediction from the profile alone
    (``step_s_profile``, ``step_time.predict_sweep``; needs ``profile``) and against the recorded
    ``step_s_predicted`` (a one-process step measured in the same run + modelled messages: not a
    prediction), bubble and bytes."""
    import pandas as pd  # noqa: PLC0415  optional: pandas is not a dependency every install has

    recs = load_records(root, f"ch04_e2_{kind}")
    rs = []
    for r in recs:
        row = {"run": r.dir.name.removeprefix("ch04_e2_")} | r.results
        if profile is not None:
            cores = r.data["provenance"]["hardware"].get("cpu_count")
            row["step_s_profile"] = predict_sweep(r.results, profile, cores)["total_s"]
        rs.append(row)
    df = pd.DataFrame(rs)
    if df.empty:
        return df
    if "step_s_profile" in df.columns:
        df["time_rel_err"] = (df["step_s_profile"] - df["step_s"]) / df["step_s"]
    if "step_s_predicted" in df.columns:
        df["rel_err_baseline_plus_comm"] = (df["step_s_predicted"] - df["step_s"]) / df["step_s"]
    return df[[c for c in E2_COLUMNS if c in df.columns]].round(4)


def with_and_without(records, profile, sweeps=()) -> list[dict]:
    """Per record: measured, predicted with the distributed terms (rank threads, framework, harness) and
    without them (the profile's own thread count, no framework cost), and both errors. ``sweeps``: the
    ``ch04_e2_*`` records too (without the terms their compute is the profile's; the recorded
    baseline-plus-messages number is no prediction and is not used here)."""
    out = []
    for rec in records:
        r, hw = rec.results, rec.data["provenance"]["hardware"]
        lay = layout_of(r)
        threads = 1 if r["world"] > 1 else hw.get("torch_threads")
        kw = dict(comm=r["comm"], cores=hw.get("cpu_count"))
        new = predicted_step_time(lay, r["model"], r["batch"], r["seq"], profile, threads=threads, harness=True, **kw)
        old = predicted_step_time(lay, r["model"], r["batch"], r["seq"], profile, threads=None, framework=False, **kw)
        out.append({"run": rec.dir.name, "world": r["world"], "measured_ms": 1000 * _step_median(r["step_s"]),
                    "with_ms": 1000 * new["total_s"], "without_ms": 1000 * old["total_s"]})
    for rec in sweeps:
        r = rec.results
        cores = rec.data["provenance"]["hardware"].get("cpu_count")
        new = predict_sweep(r, profile, cores)
        old = predict_sweep(r, profile, cores, threads=None, framework=False)
        out.append({"run": rec.dir.name, "world": r["world"], "measured_ms": 1000 * r["step_s"],
                    "with_ms": 1000 * new["total_s"], "without_ms": 1000 * old["total_s"]})
    for row in out:
        row["err_with"] = row["with_ms"] / row["measured_ms"] - 1
        row["err_without"] = row["without_ms"] / row["measured_ms"] - 1
        row["oversubscribed"] = "oversubscribed" in row["run"]
    return out


def _step_median(xs):
    return statistics.median(xs[1:] or xs)


# ---- the notebook's sections -------------------------------------------------------------------------------

NA = "n/a"


def bad_layouts(model: str = "nano") -> str:
    """Degrees checked against the model before any process starts (``rlm_lab.parallel.mesh.validate``): 3-way
    tensor parallelism of ``model`` (4 attention heads), 3 pipeline stages of its 2 layers, then a world size
    that does not match the degrees; one error line each."""
    lines = []
    for bad, world in ((Layout(tp=3), 3), (Layout(pp=3), 3), (Layout(tp=2), 3)):
        try:
            validate(bad, model, world_size=world)
        except RlmLabError as e:
            lines.append(f"{bad.name():>9} on {world} processes: {e}")
    return "\n".join(lines)


def repo_paths(msg) -> str:
    """``msg`` with paths relative to the repository, never a machine's absolute or temporary paths."""
    return re.sub(r"/tmp/\S+", "<tmp>", str(msg).replace(f"{repo_root()}/", ""))


def this_build(size: str, say=print):
    """Run the layouts of ``size`` into ``_build/runs/<size>-ch04`` (emptied first: each build makes its own runs
    afresh, the committed ones are in ``data/``; DTensor's redistribution notes stay out of the page) and return
    their table against the calibrated profile."""
    os.environ["TORCH_LOGS"] = "-dtensor"  # inherited by the ranks: DTensor's redistribution notes stay in its logs
    here = repo_root() / "_build" / "runs" / f"{size}-ch04"
    shutil.rmtree(here, ignore_errors=True)
    run_suite(size, out_root=here, say=lambda msg: say(repo_paths(msg)))
    recs = load_records(here)
    return table(rows(recs, calibrated_profile(recs)))


def models_text(records) -> str:
    """One line per model of ``records``: its parameters and the (sequences, tokens, steps) it ran."""
    lines = []
    for model in sorted({r.results["model"] for r in records}):
        shape = sorted({(r.results["batch"], r.results["seq"], r.results["steps"]) for r in records
                        if r.results["model"] == model})
        lines.append(f"model {model}: {count_parameters(build_model(model)[0]):,} parameters; (sequences, tokens, "
                     f"steps): {shape}")
    return "\n".join(lines)


DIST_KEYS = ("n_in", "in_without", "in_with", "n_over", "over_pos", "over_neg", "over_with", "n_oos",
             "oos_median", "oos_worst", "oos_bias", "oos_verdict", "rank_threads_rates", "calibration_threads",
             "factor_min", "factor_max", "fw_largest", "n_layout_rows")


# the out-of-sample numbers the page glues, read from the results ledger (``ch04.out_of_sample.*``, made by
# ``rlm_lab.ledger`` from :mod:`.out_of_sample`): glue name -> (ledger id, format, scale)
LEDGER_GLUE = {
    "ch04_dist_oos_median": ("ch04.out_of_sample.median_abs", "{:.0f}%", 100.0),
    "ch04_dist_oos_worst": ("ch04.out_of_sample.worst_abs", "{:.0f}%", 100.0),
    "ch04_dist_oos_bias": ("ch04.out_of_sample.bias", "{:+.0f}%", 100.0),
}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def distributed_terms_section(records, rows_: list[dict], profile, root, entries=()) -> tuple[str, list, dict]:
    """The three distributed terms (rank threads, framework cost, the counter) in sample (the committed layout
    and sweep records under ``root``) and out of sample (:mod:`.out_of_sample`'s records): the text, the tables
    (framework terms, with and without, the out-of-sample runs) and every ``ch04_dist_*`` value of the prose
    ("n/a" without a distributed calibration of ``profile``). The out-of-sample summary is the results ledger's
    (``entries``: ``rlm_lab.ledger.build("cpu")``, :data:`LEDGER_GLUE`) where ``root`` holds the committed records;
    another root's (this build's) is computed here."""
    import pandas as pd  # noqa: PLC0415  optional: pandas is not a dependency every install has

    values = {"ch04_dist_bar": text(out_of_sample.BAR, ".0%")}
    terms, source = framework_terms(profile) if profile is not None else (None, None)
    if terms is None:
        values.update({f"ch04_dist_{key}": NA for key in DIST_KEYS})
        return "no distributed calibration for this profile: the comparison is left out", [], values
    section, _ = distributed_section(profile)
    lines = [f"framework cost per step (fitted against this profile) from {source}"]
    tables = [pd.DataFrame([{"family": f, "base_ms": 1e3 * t["base_s"], "per_unit_ms": 1e3 * t["unit_s"],
                             "unit": t["unit"]} for f, t in sorted(terms.items())]).round(2)]
    ba = with_and_without(records, profile, load_records(root, "ch04_e2_"))
    tables.append(pd.DataFrame(ba).round(3))
    over = [r for r in ba if r["oversubscribed"]]
    med = lambda xs: statistics.median(abs(x) for x in xs)  # noqa: E731
    factors = [r["measured_ms"] / r["without_ms"] for r in ba]
    layout_rows = [r for r in rows_ if r.get("predicted_framework_ms") is not None and r["world"] > 1]
    val = out_of_sample.rows(root, profile)
    vs = out_of_sample.summary(val)
    tables.append(table(val, ["layout", "model", "world", "measured_ms", "predicted_ms", "predicted_compute_ms",
                              "predicted_framework_ms", "predicted_comm_ms", "time_rel_err", "bytes_equal", "check_ok"]))
    values.update({
        "ch04_dist_factor_min": text(min(factors), ".1f"), "ch04_dist_factor_max": text(max(factors), ".1f"),
        "ch04_dist_fw_largest": text(sum(r["predicted_framework_ms"] > max(r["predicted_compute_ms"],
                                                                           r["predicted_comm_ms"]) for r in layout_rows)),
        "ch04_dist_n_layout_rows": text(len(layout_rows)), "ch04_dist_n_in": text(len(ba)),
        "ch04_dist_in_without": text(med(r["err_without"] for r in ba), ".0%"),
        "ch04_dist_in_with": text(med(r["err_with"] for r in ba), ".0%"),
        "ch04_dist_n_over": text(len(over)), "ch04_dist_over_pos": text(sum(r["err_with"] > 0 for r in over)),
        "ch04_dist_over_neg": text(sum(r["err_with"] < 0 for r in over)),
        "ch04_dist_over_with": text(med(r["err_with"] for r in over), ".0%"),
        "ch04_dist_rank_threads_rates": text(", ".join(sorted(section.get("threads", {}))) or "none"),
        "ch04_dist_calibration_threads": text(profile.threads),
        "ch04_dist_n_oos": text(vs["n"])})
    d = {e.id: e for e in entries}
    if Path(root).resolve() == reference_root("cpu").resolve() and "ch04.out_of_sample.median_abs" in d:
        oos = ledger_values(entries) | {"ch04_dist_oos_verdict": d["ch04.out_of_sample.median_abs"].verdict}
    else:   # not the committed records: no ledger entry describes them
        oos = {"ch04_dist_oos_median": text(vs["median_abs"], ".0%"), "ch04_dist_oos_worst": text(vs["worst_abs"], ".0%"),
               "ch04_dist_oos_bias": text(vs["bias"], "+.0%"), "ch04_dist_oos_verdict": vs["met"]}
    values.update(oos)
    lines.append(f"in sample ({len(ba)} records): median |error| {med(r['err_without'] for r in ba):.0%} without the "
                 f"terms, {med(r['err_with'] for r in ba):.0%} with them")
    lines.append(f"out of sample ({vs['n']} runs): median |error| {oos['ch04_dist_oos_median']}, worst "
                 f"{oos['ch04_dist_oos_worst']}, bias {oos['ch04_dist_oos_bias']}; bar {out_of_sample.BAR:.0%}: "
                 f"{oos['ch04_dist_oos_verdict']}")
    return "\n".join(lines), tables, values


def e2e_table(root):
    """The end-to-end GRPO runs through the Trainer (``ch04_e2e_*``): mode, what the Trainer wrapped, seconds per
    step, the generation stage and the predicted gradient synchronisation per rank (kB)."""
    import pandas as pd  # noqa: PLC0415  optional: pandas is not a dependency every install has

    return pd.DataFrame([{"mode": r.config["mode"], "runs": r.results["parallelism"]["wrapped"],
                          "s/step": r.results["seconds_per_step"],
                          "generate_s": r.results.get("trace", {}).get("stages", {}).get("generate", {}).get("mean_s"),
                          "predicted_grad_kB": r.results["predicted_grad_bytes_per_rank"] / 1e3}
                         for r in load_records(root, "ch04_e2e_")])


def verdict_section(rows_: list[dict]) -> tuple[str, dict]:
    """What the numbers say (:func:`.compare.summary`): every layout against one process and the formula, the
    step time and the slowdown against one process with their verdicts, which layouts are faster, how many
    pairs are ordered alike; and every value the closing prose quotes."""
    v = summary(rows_)
    ok = v["layouts"] > 0
    checks_ok = all(r["check_ok"] for r in rows_)
    bytes_ok = all(r["bytes_equal"] for r in rows_ if r["bytes_equal"] is not None)
    lines = [f"{len(rows_)} layouts; all match one process: {checks_ok}; counted bytes equal the formula wherever one "
             f"exists: {bytes_ok}"]
    if ok:
        lines.append(f"step time: median |error| {v['step_error']:.1%} over {v['layouts']} layouts "
                     f"(from {v['step_error_min']:+.0%} to {v['step_error_max']:+.0%}): {v['step_verdict']}")
        lines.append(f"slowdown against one process: median |error| {v['slowdown_error']:.1%}: {v['slowdown_verdict']}")
        lines.append(" ".join(["faster than one process, measured:", str(v["faster_measured"] or "none"),
                               f"(undecided, one run each: {len(v['undecided_measured'])})",
                               "| predicted:", str(v["faster_predicted"] or "none")]))
        lines.append(f"pairs of layouts ordered alike by prediction and measurement: {v['pairs_concordant']} of "
                     f"{v['pairs']}")
    values = {"ch04_bar": text(BAR, ".0%"), "ch04_goal": text(GOAL, ".0%"),
              "ch04_n_layouts": text(v.get("layouts", NA)), "ch04_unpredicted": text(v.get("unpredicted", NA))}
    for key, fmt in (("step_error", ".1%"), ("step_error_min", "+.0%"), ("step_error_max", "+.0%"),
                     ("slowdown_error", ".1%")):
        values[f"ch04_{key}"] = text(v[key] if ok else NA, fmt if ok else "")
    for key in ("step_verdict", "slowdown_verdict"):
        values[f"ch04_{key}"] = text(v[key] if ok else NA)
    values["ch04_n_faster_measured"] = text(len(v["faster_measured"]) if ok else NA)
    values["ch04_n_undecided_measured"] = text(len(v["undecided_measured"]) if ok else NA)
    values["ch04_n_faster_predicted"] = text(len(v["faster_predicted"]) if ok else NA)
    values["ch04_faster_predicted"] = text(", ".join(v["faster_predicted"]) or "none" if ok else NA)
    values["ch04_pairs_concordant"] = text(v["pairs_concordant"] if ok else NA)
    values["ch04_pairs"] = text(v["pairs"] if ok else NA)
    return "\n".join(lines), values


def committed(size: str = "cpu") -> tuple[list, list[dict], object, Path]:
    """The committed layout records of ``size`` (``data/runs/<size>/ch04_*``), their rows against the calibrated
    profile of the machine that made them (None when none is committed: no time predictions), the profile and
    the records' root."""
    root = reference_root(size)
    records = load_records(root)
    profile = calibrated_profile(records)
    return records, rows(records, profile), profile, root


def sweep_section(root, kind: str, profile):
    """:func:`sweep_table` of ``kind`` (pp, cp, ep) with the sweeps' own recorded number named for what it is:
    ``baseline_plus_comm_s`` (the one-process step measured in the same run, divided, plus modelled messages)."""
    return sweep_table(root, kind, profile).rename(columns={"step_s_predicted": "baseline_plus_comm_s"})
