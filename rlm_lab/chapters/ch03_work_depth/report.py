"""Chapter 3's report: what its notebook prints, draws and glues into the prose, from the committed records
(``head`` is :func:`.compare.headline` of them) and, for section 4, from the cost model alone.

Each section returns the text the notebook prints, its figures, and ``{glue name: text}`` where the prose
quotes a number ("n/a" without the committed records).
"""

from __future__ import annotations

from ...compare import BAR, GOAL
from ...cost import load_profile
from ...cost.engine import engine_step_overhead
from ...tables import format_table, ledger_glue, text
from ...trace_plots import curve
from .scale import scaling

NA = "n/a"


# the numbers the page glues, read from the results ledger (``ch03.*``, made by ``rlm_lab.ledger`` from
# :func:`..compare.headline`): glue name -> (ledger id, format, scale)
LEDGER_GLUE = {
    **{f"ch03_{k}_error": (f"ch03.{k}_error", "{:.1f}%", 100.0) for k in ("whole", "step", "all")},
    "ch03_real_over_sim": ("ch03.replicas.real_over_sim.max", "{:.1f}", 1.0),
}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def knee_section(ref: dict, head: dict) -> tuple[str, list]:
    """Decode step time against batch size: the knees, measured and predicted, one curve per model, and the
    table of every batch in milliseconds."""
    cfg = ref["decode_knee"].config
    figures = []
    for model in ref["decode_knee"].results["step_s"]:
        rows = [r for r in head["knee_rows"] if r["model"] == model]
        k = next(x for x in head["knees"] if x["model"] == model)
        figures.append(curve(cfg["batches"], {
            f"measured (knee b={k['knee_measured']})": [r["measured"] * 1e3 for r in rows],
            f"predicted (knee b={k['knee_predicted']})": [r["predicted"] * 1e3 for r in rows]},
            xlabel="sequences per decode step", ylabel="ms per step", logx=True, logy=True,
            title=f"{model}: decode step time (cpu, committed)"))
    lines = [format_table(head["knees"], ["model", "knee_measured", "knee_predicted"]),
             format_table([{**r, "predicted_ms": r["predicted"] * 1e3, "measured_ms": r["measured"] * 1e3}
                           for r in head["knee_rows"]], ["model", "batch", "predicted_ms", "measured_ms", "rel_error"])]
    return "\n".join(lines), figures


def tail_section(head: dict) -> tuple[str, object]:
    """The long tail: one row per length distribution (same mean, growing tails) and the slowdown against
    R_max / mean R, measured and by the bubble law 1 / (1 - bubble)."""
    tail_rows = head["tail_rows"]
    table = format_table(tail_rows, ["lengths", "mean_R", "max_R", "bubble", "predicted", "measured", "rel_error",
                                     "slowdown_measured", "slowdown_law"])
    return table, curve([r["max_R"] / r["mean_R"] for r in tail_rows],
                        {"measured T / T(fixed)": [r["slowdown_measured"] for r in tail_rows],
                         "predicted 1 / (1 - bubble)": [r["slowdown_law"] for r in tail_rows]},
                        xlabel="R_max / mean R", ylabel="generation time relative to fixed lengths",
                        title="The tail sets the time (cpu, committed)")


def replica_section(ref: dict, head: dict | None, entries=()) -> tuple[str, list, dict]:
    """Replicas and Brent's bounds: the table, the measured and the predicted T_p between their bounds (round
    robin), the rows above the upper bound and real processes against the simulation; and the values the prose
    quotes (``ch03_n_above`` ... ``ch03_replicas_load``; the real / simulated ratio the results ledger's,
    ``entries``). ``head`` is None without the committed records."""
    have_ref = head is not None
    lines, figures = [], []
    if have_ref:
        rep = head["replica_rows"]
        lines.append(format_table(rep, ["assignment", "replicas", "lower", "measured_sim", "measured_real", "upper",
                                        "predicted", "pred_lower", "pred_upper", "rel_error"]))
        rr = [r for r in rep if r["assignment"] == "round_robin"]
        ps = [r["replicas"] for r in rr]
        figures.append(curve(ps, {k: [r[k] for r in rr] for k in ("measured_sim", "lower", "upper")},
                             xlabel="generation replicas p", ylabel="seconds", logx=True,
                             title="Measured T_p and the bounds from measured W, D (cpu, committed; simulated replicas)"))
        figures.append(curve(ps, {"predicted T_p": [r["predicted"] for r in rr],
                                  "predicted lower": [r["pred_lower"] for r in rr],
                                  "predicted upper": [r["pred_upper"] for r in rr]},
                             xlabel="generation replicas p", ylabel="seconds", logx=True,
                             title="Predicted T_p and the bounds from predicted W, D"))
        above = ", ".join(f"{how} p={n}" for how, n in head["above_upper"]) or "none"
        ratio = head["real_over_sim"]
        lines.append(f"simulated T_p above the measured W/p + D: {above}")
        lines.append(f"real processes against the simulation (round robin): "
                     f"{ {n: f'{x:.2f}x' for n, x in ratio.items()} }")
    values = {
        "ch03_n_above": text(len(head["above_upper"]) if have_ref else NA),
        "ch03_n_replica_rows": text(len(head["replica_rows"]) if have_ref else NA),
        "ch03_real_over_sim": ledger_values(entries)["ch03_real_over_sim"] if have_ref else NA,
        "ch03_replicas_load": text(" / ".join(f"{x:.1f}" for x in ref["replicas"].results["loadavg"])
                                   if have_ref else NA)}
    return "\n".join(lines), figures, values


def scale_section(profile: str = "h200") -> tuple[str, object, dict]:
    """What depth means at scale, by prediction only (:func:`.scale.scaling` on a datasheet profile): the table,
    the critical path, W, D and the average parallelism W / D, the engine's assumed cost per decode step, the curve;
    and the two values the prose quotes."""
    scale = scaling(profile)
    prof = load_profile(profile)
    lines = [format_table(scale, ["devices", "lower_s", "predicted_s", "upper_s"]),
             f"critical path: {scale[0]['critical_path']} | W = {scale[0]['work_s']:.1f} s, D = "
             f"{scale[0]['depth_s']:.1f} s, average parallelism W/D = {scale[0]['work_s'] / scale[0]['depth_s']:.1f}",
             f"profile kind: {prof.kind}; assumed engine cost per decode step: {engine_step_overhead(prof) * 1e3:.2f} ms "
             f"(eager PyTorch: {prof.overhead['decode_step_layer_s'] * 1e3:.2f} ms per layer + "
             f"{prof.overhead['decode_step_base_s'] * 1e3:.1f} ms per step)"]
    figure = curve([r["devices"] for r in scale], {k: [r[k] for r in scale] for k in ("predicted_s", "lower_s", "upper_s")},
                   xlabel="devices", ylabel="seconds per iteration", logx=True,
                   title="GRPO iteration on H200s (prediction)")
    return "\n".join(lines), figure, {
        "ch03_h200_step_ms": text(engine_step_overhead(prof) * 1e3, ".2f"),
        "ch03_h200_avg_parallelism": text(scale[0]["work_s"] / scale[0]["depth_s"], ".1f")}


def closing_section(head: dict | None, entries=()) -> tuple[str, dict]:
    """The whole generation times first, then single decode steps, then every comparison of the chapter, each
    median |error| with its interval and its verdict against the goals fixed in advance, read from the results
    ledger (``entries``: ``ch03.whole_error``, ``ch03.step_error``, ``ch03.all_error``); and the values the prose
    quotes. ``head`` is None without the committed records."""
    have_ref = head is not None
    d, led = {e.id: e for e in entries}, ledger_values(entries)
    values = {"ch03_bar": text(BAR, ".0%"), "ch03_goal": text(GOAL, ".0%")}
    for key in ("whole", "step", "all"):
        e = d.get(f"ch03.{key}_error")
        values[f"ch03_{key}_error"] = led[f"ch03_{key}_error"] if have_ref else NA
        values[f"ch03_{key}_verdict"] = (e.verdict if e is not None else NA) if have_ref else NA
    lines = [] if not have_ref else [
        f"whole generation times (long tail + replicas): median |error| {values['ch03_whole_error']}: "
        f"{values['ch03_whole_verdict']}",
        f"single decode steps: median |error| {values['ch03_step_error']}: {values['ch03_step_verdict']}",
        f"all comparisons: median |error| {values['ch03_all_error']}: {values['ch03_all_verdict']}"]
    return "\n".join(lines), values
