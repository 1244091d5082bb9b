"""Tables and figures of chapter 4: measured against predicted, per parallelism, from run records."""

from __future__ import annotations

from pathlib import Path

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


def load_records(root: str | Path, prefix: str = "ch04_") -> list:
    """Every run record under ``root`` whose folder starts with ``prefix``, sorted by name. Each must be a
    completed run: a folder without a record, a damaged record or an unfinished run (killed, interrupted,
    failed) is a RecordError naming the folder, never a row silently left out; so is a missing ``root``."""
    from ...record import RecordError, load_record

    root = Path(root)
    if not root.is_dir():
        raise RecordError(f"no run records at {root}: the folder does not exist")
    recs = [load_record(d) for d in sorted(root.iterdir()) if d.name.startswith(prefix) and d.is_dir()]
    # the layout records (not ch04_measure_* / ch04_e2e_*) unless asked for
    return [r for r in recs if prefix != "ch04_" or "layout" in r.results]


def rows(records, profile=None) -> list[dict]:
    """:func:`suite.compare` rows plus family, oversubscription and model-state memory (rank 0)."""
    from .compare import compare

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
    import pandas as pd

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


def calibrated_profile():
    """This machine's calibrated CPU profile (``rlm-lab calibrate``), or None if none is committed."""
    from ...device import default_name
    from ...cost.hardware import load_profile
    from ...errors import RlmLabError

    try:
        prof = load_profile(default_name("cpu"))
        prof.collective("all_reduce")
        return prof
    except RlmLabError:
        return None


def _predicted_state(r: dict) -> float:
    """Model-state bytes per rank from the ZeRO table (arXiv 1910.02054, Fig. 1): AdamW fp32, N parameters."""
    from ...parallel import data_parallel, fsdp

    n = r["memory"]["params"] // 4 if r["layout"]["zero"] == 0 else None
    if n is None:  # sharded: N from the gradient all-reduce/reduce-scatter message of the record's model
        from ...models import build_model, count_parameters

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
    import pandas as pd

    from ...parallel.bench.step_time import predict_sweep

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
    from ...parallel.predict import layout_of
    from ...parallel.bench.step_time import predict_sweep, predicted_step_time

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
    import statistics

    return statistics.median(xs[1:] or xs)
