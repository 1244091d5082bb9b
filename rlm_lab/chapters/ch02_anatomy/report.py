"""Chapter 2's report: what its notebook prints, draws and glues into the prose, from the committed records.

Each ``*_section`` function returns ``(text, values)``: the text the notebook prints (tables as fixed-width
text) and ``{glue name: text}``, the values the prose quotes, formatted as the page shows them ("n/a" where a
record or profile is missing from the checkout). Sections that draw also return their figures.

* :func:`validation_section` -- the cost model on the validation suite it was never fitted on, with the in-situ
  profile, against the bars fixed in advance; :func:`pairs_section` -- each calibration on its own machine's
  suite; :func:`insitu_section` -- whether the in-situ calibration repeats, and its fitted terms;
* :func:`loop_terms_section`, :func:`bookkeeping_section` -- the terms measured apart, tried on the suite;
* :func:`reference_section` -- the committed runs, predicted against measured per stage, and the headline;
* :func:`calibrations_section`, :func:`shares_section`, :func:`ppo_timeline` -- the machine's calibrations,
  generation's FLOP share against its time share, one PPO step as a timeline.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

from ... import validate as V
from ...calibrate.autocast_benchmarks import with_autocast_terms
from ...calibrate.step_benchmarks import KEYS, with_trl_step_terms
from ...compare import BAR, GOAL, OTHER
from ...cost import load_profile
from ...cost.hardware import CPU_PROFILE, HARDWARE_DIR, INSITU_PROFILE
from ...cost.spread import calibration_spread
from ...device import datasheet_for
from ...evidence import mean_interval
from ...insitu import REPEAT_TOL, repeat_agreement
from ...insitu import load as load_insitu
from ...record import RunRecord, load_record, read_jsonl, reference_root, repo_root
from ...tables import format_table, ledger_glue, text
from ...trace_plots import gantt, predicted_vs_measured, share_bars
from ...validate import SUITE
from ...validate.compare import with_bookkeeping
from ...validate.pairs import BEFORE, MORNING, pair_rows
from ...validate.traced_case import case_of, predict_case, time_table
from .compare import ALGORITHMS, errors_by_calibration, generation_shares, headline

NA = "n/a"

# the suite's numbers the page glues, read from the results ledger (``ch02.validation.*``, made by
# ``rlm_lab.ledger`` from ``rlm_lab.validate.report``): glue name -> (ledger id, format, scale)
LEDGER_GLUE = {
    **{f"ch02_val_{k}": (f"ch02.validation.{k}", "{:.1f}%", 100.0)
       for k in ("step_median", "step_worst", "stage_median", "stage_worst", "peak_worst")},
    "ch02_val_bias": ("ch02.validation.bias", "{:+.1f}%", 100.0),
    "ch02_val_transient_median": ("ch02.validation.transient_median", "{:.0f}%", 100.0),
    "ch02_val_min_step_median": ("ch02.validation.least_disturbed.step_median", "{:.1f}%", 100.0),
    **{f"ch02_pair_{k}_step": (f"ch02.validation.pair.{k}.step_median", "{:.1f}%", 100.0)
       for k in ("insitu_after", "micro_now", "micro_morning", "chapters")},
    **{f"ch02_pair_{k}_bias": (f"ch02.validation.pair.{k}.bias", "{:+.1f}%", 100.0)
       for k in ("insitu_after", "micro_now", "micro_morning", "chapters")},
}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def _bar_word(e, key: str) -> str:
    """A ledger entry's word against its bar, as the page prints it: "met (12.0% <= 15%)"."""
    if e is None or not e.verdict:
        return NA
    v = abs(e.value)
    return f"{e.verdict} ({v:.1%} {'<=' if v <= V.BARS[key] else '>'} {V.BARS[key]:.0%})"


def have_validation() -> bool:
    """Whether this checkout holds the committed validation suite (``data/runs/cpu/validation_suite``)."""
    return (reference_root("cpu") / SUITE).exists()


def insitu_profile():
    """``(the committed in-situ profile, None)``, or ``(None, why)`` in a checkout without it."""
    try:
        return load_profile(INSITU_PROFILE), None
    except Exception as e:  # a checkout without the in-situ profile: say so, judge nothing
        return None, f"no in-situ profile in this checkout: {e}"


def _val_cell(k, v):
    if k.endswith("error"):
        return f"{v:+.1%}" if v == v else "-"
    return f"{v:.0%}" if k == "share" else (f"{v * 1e3:.1f}" if k.endswith("_s") else v)


def validation_section(entries=()) -> tuple[str, dict]:
    """The in-situ profile on the suite measured on its own machine before the fit (``rlm_lab.validate``): the
    table per workload and stage, the verdicts against ``BARS``, the contention of the machine, the
    least-disturbed steps; and every ``ch02_val_*`` value of the prose (the bars too). The suite's numbers the
    prose quotes are the results ledger's (``entries``: ``rlm_lab.ledger.build("cpu")``; :data:`LEDGER_GLUE`)."""
    d = {e.id: e for e in entries}
    led = ledger_values(entries)
    lines = []
    have_val = have_validation()
    insitu, why = insitu_profile()
    if why:
        lines.append(why)
    if have_val and insitu is not None:
        val = V.report("cpu")  # the in-situ profile, on the suite measured on its own machine before the fit
        vs = val["summary"]
        loads = [l[0] / 2 for l in val["load"].values()]  # 1-minute load per core before each workload
        lines.append(f"profile {val['profile']}; records {Path(val['root']).resolve().relative_to(repo_root().resolve())}")
        lines.append(f"{vs['runs']} workloads; load per core before them {min(loads):.1f} to {max(loads):.1f} "
                     "(a load above 1 per core slows the measured side)")
        lines.append(format_table([{k: _val_cell(k, v) for k, v in r.items()} for r in V.table(val["rows"])],
                                  ["run", "stage", "predicted_s", "measured_s", "error", "share", "peak_error"]))
        lines += [f"{k}: {_bar_word(d.get(f'ch02.validation.{k}'), k)}" for k in vs["verdicts"]]
        contention = val["contention"]
        lines.append(f"slowest / fastest traced step per workload: {min(contention.values()):.1f}x to "
                     f"{max(contention.values()):.1f}x (about 1x on a quiet machine)")
        lines.append(f"least-disturbed steps (fastest traced step per workload): whole-step median |error| "
                     f"{led['ch02_val_min_step_median']} (ledger ch02.validation.least_disturbed.step_median)")
    else:
        vs = contention = None
        lines.append("no committed validation records or in-situ profile in this checkout")
    out = {k: v for k, v in led.items() if k.startswith("ch02_val_")}
    for key in ("step_median", "stage_worst", "bias", "peak_worst"):
        out[f"ch02_val_{key}_verdict"] = _bar_word(d.get(f"ch02.validation.{key}"), key)
    out["ch02_val_runs"] = text(vs["runs"] if vs else NA)
    out["ch02_val_worst_stage"] = text(vs["worst_stage"] if vs else NA)
    for key, bar in V.BARS.items():  # the bars, fixed before the runs
        out[f"ch02_val_bar_{key}"] = text(bar, ".0%")
    out["ch02_val_share_min"] = text(V.SHARE_MIN, ".0%")
    out["ch02_val_contention_max"] = f"{max(contention.values()):.1f}x" if vs else NA
    out["ch02_val_load_max"] = text(max(loads) if vs else NA, ".1f" if vs else "")
    out["ch02_val_under"] = text(vs["under_predicted"] if vs else NA)
    above = [r["transient_rel_error"] for r in val["rows"] if r.get("transient_rel_error", float("nan")) == r.get(
        "transient_rel_error")] if vs else []
    out["ch02_val_above_under"] = text(sum(e < 0 for e in above) if vs else NA)
    out["ch02_val_above_n"] = text(len(above) if vs else NA)
    out["ch02_val_unpredicted"] = text((", ".join(vs["unpredicted"]) or "none") if vs else NA)
    return "\n".join(lines), out


def _pair_row(r: dict) -> dict:
    if "runs" not in r:
        return {"pair": r["pair"], "runs": r.get("runs", "-"), "step_median": "missing: " + r["missing"][:60]}
    return {"pair": r["pair"], "runs": r.get("runs", "-"),
            **{k: f"{r[k]:+.1%}" if k == "bias" else f"{r[k]:.1%}"
               for k in ("step_median", "step_worst", "bias", "stage_median", "stage_worst", "peak_worst")}}


def pairs_section(entries=()) -> tuple[str, dict]:
    """Each calibration judged on the suite measured on its own machine in its own session
    (``rlm_lab.validate.pairs``), and how much slower the in-situ machine ran the suite than the morning's
    (median over the workloads of the ratio of their measured steps). The glued numbers are the results ledger's
    (``entries``; :data:`LEDGER_GLUE`)."""
    have_val = have_validation()
    pairs = pair_rows("cpu") if have_val else []
    text_ = format_table([_pair_row(r) for r in pairs],
                         ["pair", "runs", "step_median", "step_worst", "bias", "stage_median", "stage_worst",
                          "peak_worst"])
    d = {e.id: e for e in entries}
    out = {k: v for k, v in ledger_values(entries).items() if k.startswith("ch02_pair_")}
    for key in ("insitu_after", "micro_now", "micro_morning", "chapters"):
        out[f"ch02_pair_{key}_verdict"] = _bar_word(d.get(f"ch02.validation.pair.{key}.step_median"), "step_median")
    ratio = NA
    if have_val and (repo_root() / BEFORE / V.SUITE).exists():
        _, now = V.load_suite("cpu", repo_root() / BEFORE)
        _, morning = V.load_suite("cpu", repo_root() / MORNING)
        ratio = statistics.median(now[n].results["trace"]["step_wall_s"]["median"]
                                  / morning[n].results["trace"]["step_wall_s"]["median"] for n in now if n in morning)
    out["ch02_val_machine_ratio"] = f"{ratio:.1f}x" if ratio != NA else ratio
    return text_, out


def insitu_section() -> tuple[str, dict]:
    """Whether the in-situ calibration repeats (every pair of the three committed calibrations A, B, C against
    the goal ``REPEAT_TOL`` fixed before the first run), the fitted factors with their bootstrap IQR, and the
    spread of the calibration runs themselves."""
    insitu, _ = insitu_profile()
    out = {"ch02_insitu_tol": text(REPEAT_TOL, ".0%")}
    repeats = sorted((HARDWARE_DIR / "insitu").glob("cpu-2core-epyc-insitu-*.json"))
    rows, worst, lines = [], [], []
    if insitu is not None:
        for a, b in itertools.combinations(repeats, 2):
            rep = repeat_agreement("cpu", a, b)
            worst.append(rep["worst"])
            far = max(rep["per_workload"], key=lambda n: abs(rep["per_workload"][n]))
            rows.append({"calibrations": f"{a.stem[-1]} against {b.stem[-1]}", "workloads": len(rep["per_workload"]),
                         "worst_step_difference": f"{rep['worst']:.1%}", "where": far,
                         "goal": "met" if rep["met"] else "not met"})
        lines.append(format_table(rows, ["calibrations", "workloads", "worst_step_difference", "where", "goal"]))
        fit = insitu.insitu
        q = insitu.spread.get("quartiles", {})
        kernel_keys = {"kernels": "kernel_factor", "kernels_bf16": "kernel_factor_bf16",
                       "kernels_bf16_backward": "kernel_factor_bf16_backward"}

        def value(g):
            if g in kernel_keys:
                if g == "kernels_bf16_backward":
                    return "x bf16 backward products"
                return "x every kernel" if g == "kernels" else (
                    "x every kernel of a bf16 call" if fit.get("bf16_scope") == "kernels" else "x bf16 products, attention")
            return ", ".join(f"{insitu.overhead[k] * 1e3:.3g} ms" for k in fit["groups"][g]) or "-"

        def iqr(g):
            if g in kernel_keys:
                return "[{:.3g}, {:.3g}]".format(*q["insitu"][kernel_keys[g]])
            return ", ".join(f"[{q['overhead'][k][0] * 1e3:.3g}, {q['overhead'][k][1] * 1e3:.3g}] ms"
                             for k in fit["groups"][g] if k in q.get("overhead", {}))

        lines.append(format_table([{"term": g, "factor": f"{f:.3g}", "in-situ value": value(g),
                                    "bootstrap IQR": iqr(g)} for g, f in fit["factors"].items()],
                                  ["term", "factor", "in-situ value", "bootstrap IQR"]))
        ret = fit["rss_retained"]
        lines.append(f"fitted on {fit['rows']} stage rows of {len(fit['records'])} calibration runs; relative rms "
                     f"of the fit {fit['rms_relative']:.1%}; resident-set floor {ret['base_bytes'] / 2**20:.1f} MiB + "
                     f"{ret['factor']:.2f} x the largest stage")
    out["ch02_insitu_repeat_worst"] = text(max(worst) if worst else NA, ".1%" if worst else "")
    out["ch02_insitu_repeat_best"] = text(min(worst) if worst else NA, ".1%" if worst else "")
    out["ch02_insitu_repeat_met"] = text(sum(w <= REPEAT_TOL for w in worst) if worst else NA)
    out["ch02_insitu_repeat_n"] = text(len(worst) if worst else NA)
    out["ch02_insitu_kernel_factor"] = text(insitu.kernel_factor if insitu is not None else NA,
                                            ".2f" if insitu is not None else "")
    per_call = ([insitu.insitu["factors"][g] for g in ("forward", "forward_grad", "backward", "decode_layer")]
                if insitu else [])
    out["ch02_insitu_call_low"] = text(min(per_call) if per_call else NA, ".1f" if per_call else "")
    out["ch02_insitu_call_high"] = text(max(per_call) if per_call else NA, ".1f" if per_call else "")
    spread_runs = NA
    if insitu is not None and len(repeats) > 1:
        steps = {}
        for r in ("A", "B", "C"):
            for n, rec in load_insitu("cpu", repo_root() / "data/runs/cpu/insitu" / r)[1].items():
                steps.setdefault(n, []).append(rec.results["trace"]["step_wall_s"]["median"])
        spread_runs = max(max(v) / min(v) - 1 for v in steps.values() if len(v) > 1)
    out["ch02_insitu_run_spread"] = text(spread_runs, ".0%" if spread_runs != NA else "")
    out["ch02_insitu_fit_rms"] = text(insitu.insitu["rms_relative"] if insitu is not None else NA,
                                      ".1%" if insitu is not None else "")
    return "\n".join(lines), out


def loop_terms_section() -> str:
    """The generation loop's per-step and per-row costs (``rlm_lab.calibrate.loop_benchmarks``), measured apart,
    tried on the suite: its errors without and with them."""
    loop_dir = reference_root("cpu") / "validation_generate_loop"
    if not (have_validation() and loop_dir.exists()):
        return "no committed generation-loop benchmark in this checkout"
    eff = V.loop_terms_effect("cpu", loop_dir, profile=CPU_PROFILE)
    f = eff["fit"]
    lines = [f"fitted: {f['generate_loop_base_s'] * 1e3:.3f} ms per decode step + {f['generate_loop_row_s'] * 1e6:.2f} "
             f"µs per row per step (1-minute load before the benchmark {f['loadavg_before'][0]:.1f} on 2 cores)"]
    rows = []
    for label, rep in (("without the terms", eff["before"]), ("with the terms", eff["after"])):
        s_ = rep["summary"]
        rows.append({"model": label, "step_median": f"{s_['step_median']:.1%}", "bias": f"{s_['bias']:+.1%}",
                     "stage_median": f"{s_['stage_median']:.1%}", "stage_worst": f"{s_['stage_worst']:.1%}",
                     "generate_bias": f"{s_['per_stage'].get('generate', {}).get('bias', float('nan')):+.1%}"})
    lines.append(format_table(rows, ["model", "step_median", "bias", "stage_median", "stage_worst", "generate_bias"]))
    lines.append(" ".join(["the terms improve the validation error:", "yes" if eff["improves"] else "no",
                           "| the committed profile (and every other number of this book) does not carry them"]))
    return "\n".join(lines)


def bookkeeping_section() -> str:
    """TRL's own bookkeeping (``rlm_lab.calibrate.step_benchmarks``) and TRL's defaults (bf16 autocast, gradient
    checkpointing: ``rlm_lab.calibrate.autocast_benchmarks``), each measured apart, tried on the suite."""
    trl_dir, ac_dir = reference_root("cpu") / "validation_trl_step", reference_root("cpu") / "validation_autocast_terms"
    if not (have_validation() and trl_dir.exists() and ac_dir.exists()):
        return "no committed bookkeeping or autocast benchmark in this checkout"
    trl = {k: load_record(trl_dir).results[k] for k in KEYS}
    with_trl = with_trl_step_terms(CPU_PROFILE, trl)
    variants = (("without the terms", CPU_PROFILE), ("+ TRL bookkeeping", with_trl),
                ("+ bookkeeping, bf16 autocast, recompute", with_autocast_terms(with_trl, load_record(ac_dir).results)))
    rows, steps = [], []
    for label, prof in variants:
        rep = V.report("cpu", profile=prof)
        s_ = rep["summary"]
        other = [abs(r["rel_error"]) for r in rep["rows"] if r["stage"] == OTHER and r["rel_error"] == r["rel_error"]]
        steps.append(s_["step_median"])
        rows.append({"model": label, "runs": s_["runs"], "step_median": f"{s_['step_median']:.1%}",
                     "bias": f"{s_['bias']:+.1%}", "stage_median": f"{s_['stage_median']:.1%}",
                     "stage_worst": f"{s_['stage_worst']:.1%}",
                     "other_median": f"{sorted(other)[len(other) // 2]:.0%}" if other else "not predicted"})
    return "\n".join([
        format_table(rows, ["model", "runs", "step_median", "bias", "stage_median", "stage_worst", "other_median"]),
        " ".join(["TRL bookkeeping improves the whole-step error with this profile:", "yes" if steps[1] < steps[0]
                  else "no", "| the committed profile does not carry these terms (a calibration that measures them "
                  "does)"])])


def ms_rows(rows):
    """Rows of a time table with the seconds also in milliseconds (``predicted_ms``, ``measured_ms``)."""
    return [{**r, "predicted_ms": r["predicted"] * 1e3, "measured_ms": r["measured"] * 1e3} for r in rows]


def ppo_timeline(record, size: str):
    """The last traced step of a PPO run (its ``spans.jsonl``) as a timeline, one bar per span."""
    steps = read_jsonl(record.dir / "spans.jsonl")
    return gantt(steps, show=[steps[-1]["step"]], title=f"PPO, one step ({size})")


def reference_section(ref: dict, have_ref: bool) -> tuple[str, list, dict]:
    """The committed cpu runs (``ref``: :func:`load_reference`), predicted against measured per stage in
    milliseconds, one figure per algorithm, the whole step first and the stages second against the goals; and
    the values the prose quotes (``ch02_step_error``, the verdicts, the bars, "other"'s share, generation)."""
    lines, figures = [], []
    if have_ref:
        head = headline(ref, CPU_PROFILE)
        ref_rows = head["rows"]
        lines.append(format_table(ms_rows(ref_rows), ["run", "stage", "predicted_ms", "measured_ms", "rel_error"]))
        for name in ALGORITHMS:
            table = [r for r in ref_rows if r["run"] == name and r["stage"] != "other (not modelled)"]
            figures.append(predicted_vs_measured(table, unit="seconds per step", log=True,
                                                 title=f"{case_of(ref[name]).label}: predicted against measured (cpu)"))
        lines.append(f"whole step: |error| {head['step_error']:.1%} (median over the three runs): {head['step_verdict']}")
        lines.append(f"per stage: median |error| {head['stage_error']:.1%}: {head['stage_verdict']}")
    out = {"ch02_bar": text(BAR, ".0%"), "ch02_goal": text(GOAL, ".0%")}
    for key in ("step_error", "stage_error"):
        out[f"ch02_{key}"] = text(head[key] if have_ref else NA, ".1%" if have_ref else "")
        out[f"ch02_{key.split('_')[0]}_verdict"] = text(head[f"{key.split('_')[0]}_verdict"] if have_ref else NA)
    for name in ALGORITHMS:
        out[f"ch02_step_error_{name}"] = text(head["step_errors"][name] if have_ref else NA, "+.1%" if have_ref else "")
        out[f"ch02_other_share_{name}"] = text(head["other_share"][name] if have_ref else NA, ".0%" if have_ref else "")
    out["ch02_generate_error"] = text(head["generate_error"] if have_ref else NA, "+.0%" if have_ref else "")
    return "\n".join(lines), figures, out


def calibrations_section(ref: dict, have_ref: bool) -> str:
    """How far the machine's quiet calibrations' headline quantities differ (``rlm_lab.cost.spread``), and the
    chapter's errors under each calibration, busy ones included and marked."""
    spread = calibration_spread(include_busy=False)  # quiet calibrations; the busy ones are in the next table
    lines = [format_table([{"quantity": r["quantity"], "calibrations": r["n"], "min": r.get("min"),
                            "median": r.get("median"), "max": r.get("max"), "range_over_median": r.get("rel_range")}
                           for r in spread], ["quantity", "calibrations", "min", "median", "max", "range_over_median"])]
    if have_ref:
        lines.append(format_table(errors_by_calibration(ref), ["calibration", "kernels", "busy_load_per_core",
                                                               "step_error", "stage_error", "step_verdict"]))
    return "\n".join(lines)


SHARE_SWEEP = ("grpo_R4", "grpo", "grpo_R64", "grpo_B16", "grpo_B256")


def shares_section(ref: dict, have_ref: bool) -> tuple[list, str, object]:
    """Generation's FLOP share (the cost model's exact counts) against its predicted and measured time share,
    for the GRPO step at other lengths R and batches B: the rows, their table and the bar figure (None without
    the committed runs)."""
    sweep = [n for n in SHARE_SWEEP if n in ref]
    if not have_ref:
        return [], "", None
    shares = generation_shares(ref, sweep, CPU_PROFILE)
    table = format_table(shares, ["run", "B", "R", "gen_flop_share", "gen_time_share_pred", "gen_time_share_meas"])
    return shares, table, share_bars([s["share"] for s in shares], title="GRPO step, cpu size: FLOPs against time")


def gpu_stages_section(data: Path | None = None) -> str:
    """Where a GPU step's time goes: every GPU record of chapter 2's traced GRPO step (one per archive), stage by
    stage, the mean of the archives' medians with its Student-t 95 % interval beside the datasheet prediction of
    the same case (the GPU's datasheet profile, as the archive predicted its total before it ran; the cost model is
    deterministic, so the stages are the prediction the archive made). Empty when there is no GPU record."""
    data = data or repo_root() / "data"
    tables = []
    for d in sorted((data / "runs" / "gpu").glob("ch02_grpo*")):
        if not (d / "record.json").is_file():
            continue
        rec = RunRecord.load(d)
        gpus = ((rec.data.get("provenance") or {}).get("hardware") or {}).get("gpus") or []
        if rec.status != "completed" or not gpus:
            continue
        prof = datasheet_for(gpus[0])
        if prof is None:   # a GPU without a datasheet profile: nothing to predict its stages from
            continue
        pred = predict_case(case_of(rec), prof)
        tables.append((prof, with_bookkeeping(time_table(rec, pred), pred)))   # as chapter 2's CPU tables
    if not tables:
        return ""
    profs = sorted({p for p, _ in tables})
    lines = [f"Where the GPU step's time goes, stage by stage over the {len(tables)} archive(s) of `ch02_grpo` "
             f"(each stage the median of its traced steps; the mean over archives with its 95 % interval), beside "
             f"the prediction from the datasheet profile ({', '.join(profs)}):", "",
             "| stage | predicted (datasheet) | measured, mean [95 % interval] | error at the mean |", "|---|---|---|---|"]
    by_stage = [{r["stage"]: r for r in t} for _, t in tables]
    for stage, row in by_stage[0].items():
        meas = mean_interval([t[stage]["measured"] if stage in t else 0.0 for t in by_stage])
        pred = row["predicted"]
        err = f"{pred / meas.estimate - 1:+.0%}" if meas.estimate > 0 and pred > 0 else "–"
        shown = (f"{meas.estimate * 1e3:.1f} ms [{meas.lo * 1e3:.1f}, {meas.hi * 1e3:.1f}]" if meas.decided
                 else f"{meas.estimate * 1e3:.1f} ms (one archive, no interval)")
        label = "other (predicted: the per-step bookkeeping)" if stage == OTHER else stage
        lines.append(f"| {label} | {pred * 1e3:.1f} ms | {shown} | {err} |")
    return "\n".join(lines)
