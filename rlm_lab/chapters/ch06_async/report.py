"""Chapter 6's report: what its notebook prints, draws and glues, from the committed campaign
(``data/runs/cpu/ch06_*``, read at every size) and the interruptible-rollout record.

:func:`campaign_section` loads the campaign once (``camp``, its cells' summaries and the table's rows); the other
sections take those and return the text the notebook prints, their figures, and ``{glue name: text}`` where the
prose quotes a number ("n/a" where the campaign has no such cell yet).
"""

from __future__ import annotations

from ...asynchrony.modes import mode_eta
from ...cost.asynchrony import advise_mode, async_rate, one_step_off_step, simulate, sync_step
from ...evidence import Interval, largest
from ...record import reference_root, repo_relative
from ...tables import entry_text, ledger_glue, text
from ..ch05_placement.report import timeline
from .cases import CORRECTIONS, MODES, budget, cell_name, corr_label
from .compare import _label, advisor_check, beyond, cell_summary, goal_vs_reference, load_campaign, mean, outlook, table
from .interrupt import latest, plot, report
from .run import latest_in

NA = "n/a"
ETA_X = {0: 0, 1: 1, 2: 2, 4: 3, 8: 4, None: 5}  # where each eta is drawn: infinity right of 8


def eta_text(e) -> str:
    return "∞" if e is None else str(e)


def formulas_text() -> str:
    """The formulas of :mod:`rlm_lab.cost.asynchrony` on round numbers (generation 3 s, training 2 s, exposed
    sync 0.5 s), and the recurrence with a long tail (every fourth batch six times slower) for each eta."""
    lines = [f"sync {sync_step(3, 2, 0.5):.2f} s/step, one-step-off {one_step_off_step(3, 2, 0.5):.2f} s/step, "
             f"async with 2 replicas {1 / async_rate(3, 2, 0.5, replicas=2):.2f} s/step"]
    tail = [1.0, 1.0, 1.0, 6.0] * 25
    for eta in (0, 1, 2, 4, 8, None):
        sim = simulate(tail, 2.25, eta)
        lines.append(f"eta={'inf' if eta is None else eta:>3}: {sim.step_s:.3f} s/step, max staleness {max(sim.staleness)}")
    lines.append(f"advice: { {k: v for k, v in advise_mode(tail, 2.25).items() if k != 'step_s_by_eta'} }")
    return "\n".join(lines)


def campaign_id(row: dict) -> str:
    """The results ledger's id of one cell of the campaign (a mode and a correction): ``ch06.campaign.<mode>.<corr>``
    (``rlm_lab.ledger`` makes its entries: final_accuracy, tokens_per_s, speedup, predicted_speedup, error)."""
    return f"ch06.campaign.{row['mode']}.{corr_label(row['correction'])}"


# the campaign's numbers the page glues, read from the results ledger (``ch06.campaign.*``): glue name -> (ledger id,
# format, scale); the advisor's measured cell and the per-cell trends are read by :func:`campaign_id`
LEDGER_GLUE = {
    "ch06_adv_pred": ("ch06.campaign.advisor.predicted_speedup", "{:.2f}", 1.0),
    "ch06_adv_err": ("ch06.campaign.advisor.error", "{:+.0f}%", 100.0),
    "ch06_goal_ratio_none": ("ch06.campaign.goal.none.tokens_ratio", "{:.2f}", 1.0),
    "ch06_goal_ratio_tis": ("ch06.campaign.goal.tis.tokens_ratio", "{:.2f}", 1.0),
    "ch06_ref_tps": ("ch06.campaign.reference.tokens_per_s", "{:.0f}", 1.0),
}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def campaign_section(root=None) -> dict:
    """The campaign under ``root`` (default the committed cpu records): ``camp`` (:func:`.compare.load_campaign`),
    ``cells`` (their summaries), ``rows`` (the table per mode and correction), ``ref`` (the plain-TRL reference's
    summary or None), ``text`` (what is missing or failed) and ``values`` (``ch06_steps``, ``ch06_runs``,
    ``ch06_failed``)."""
    camp = load_campaign(root or reference_root("cpu"))
    cells = {k: cell_summary(v) for k, v in camp["cells"].items()}
    rows = table(cells, MODES, CORRECTIONS, mode_eta)
    ref = cell_summary(camp["reference"]) if camp["reference"] else None
    lines = [] if rows else ["cpu campaign: not measured yet (commands above)"]
    lines += [f"failed run, kept: {repo_relative(f['dir'])} {f['status'][:120]}" for f in camp["failed"]]
    values = {"ch06_steps": text(budget("cpu")["steps"]),
              "ch06_runs": text(sum(len(v) for v in camp["cells"].values()) + len(camp["reference"])),
              "ch06_failed": text(len(camp["failed"]))}
    return {"camp": camp, "cells": cells, "rows": rows, "ref": ref, "text": "\n".join(lines), "values": values}


def _hist(h) -> str:
    tot = sum(h.values()) or 1
    return " ".join(f"{k}:{v / tot:.0%}" for k, v in h.items())


def throughput_section(rows: list[dict], ref, cells: dict) -> tuple[str, dict]:
    """Per mode and correction (mean over the seeds present): step, steps/s, tokens/s, the idle fractions of the
    trainer's and the rollout worker's cores, the final accuracy (± half its seed range), whether accuracy per
    step degraded, the staleness of the trained samples; the plain-TRL reference's row; and the held-out
    accuracy at step 0 (``ch06_acc_start``)."""
    lines = [f"{'mode':13s} {'eta':>3} {'corr':5s} {'n':>1} {'step s':>7} {'steps/s':>7} {'tok/s':>6} {'idle tr':>7} "
             f"{'idle ro':>7} {'final acc':>15} {'degraded':>8}  staleness"]
    for r in rows:
        idle_ro = [v for k, v in r["idle"].items() if k != "trainer"]
        lines.append(f"{r['mode']:13s} {'inf' if r['eta'] is None else r['eta']!s:>3} {corr_label(r['correction']):5s} "
                     f"{r['seeds']:>1} {r['step_s']:7.3f} {r['steps_per_s']:7.2f} {r['tokens_per_s']:6.0f} "
                     f"{r['idle'].get('trainer', float('nan')):7.0%} {(idle_ro[0] if idle_ro else float('nan')):7.0%} "
                     f"{r['final_accuracy']:7.3f} ± {r['final_spread'] / 2:.3f} {str(r.get('degraded', '')):>8}  "
                     f"{_hist(r['staleness_hist'])}")
    if ref:
        lines.append(f"{'trl reference':13s} {'':>3} {'':5s} {ref['seeds']:>1} {'':>7} {'':>7} {ref['tokens_per_s']:6.0f} "
                     f"{'':>7} {'':>7} {ref['final_accuracy']:7.3f} ± {ref['final_spread'] / 2:.3f}")
    start = next((c["curve"][0]["accuracy"] for c in cells.values() if c["curve"]), None)
    return "\n".join(lines), {"ch06_acc_start": text(start, ".3f") if start is not None else NA}


def eta_figure(rows: list[dict], ref):
    """Throughput (left) and final held-out accuracy (right) against eta, without and with correction; bars are
    the range over seeds, the plain-TRL reference a grey line."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for corr, style in ((None, "o-"), ("token_truncate", "s--")):
        rs = [r for r in rows if r["correction"] == corr]
        if not rs:
            continue
        x = [ETA_X[r["eta"]] for r in rs]
        ax1.errorbar(x, [r["tokens_per_s"] for r in rs], yerr=[r["tokens_per_s_spread"] / 2 for r in rs], fmt=style,
                     label=f"correction: {corr_label(corr)}", capsize=3)
        ax2.errorbar(x, [r["final_accuracy"] for r in rs], yerr=[r["final_spread"] / 2 for r in rs], fmt=style,
                     label=f"correction: {corr_label(corr)}", capsize=3)
    if ref:
        ax1.axhline(ref["tokens_per_s"], color="grey", lw=1, label="plain TRL reference")
        ax2.axhline(ref["final_accuracy"], color="grey", lw=1, label="plain TRL reference")
    for ax, yl in ((ax1, "tokens/s (training wall, no eval)"), (ax2, "final held-out accuracy")):
        ax.set_xticks(list(ETA_X.values()), ["0", "1", "2", "4", "8", "∞"])
        ax.set_xlabel("staleness bound η")
        ax.set_ylabel(yl)
        ax.legend(fontsize=8)
    fig.suptitle("cpu size, 2 cores: throughput and accuracy against η (mean, range over seeds)")
    fig.tight_layout()
    return fig


def curves_figure(rows: list[dict], ref):
    """Held-out accuracy against optimizer steps (left) and against training wall time (right), the uncorrected
    runs' mean over seeds, the plain-TRL reference dotted."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for r in [r for r in rows if r["correction"] is None]:
        c = r["curve"]
        lab = f"η={'∞' if r['eta'] is None else r['eta']}"
        ax1.errorbar([p["step"] for p in c], [p["accuracy"] for p in c], yerr=[p["spread"] / 2 for p in c],
                     label=lab, capsize=2)
        ax2.plot([p["wall_s"] for p in c], [p["accuracy"] for p in c], marker="o", label=lab)
    if ref:
        ax1.plot([p["step"] for p in ref["curve"]], [p["accuracy"] for p in ref["curve"]], "k:", label="plain TRL")
        ax2.plot([p["wall_s"] for p in ref["curve"]], [p["accuracy"] for p in ref["curve"]], "k:", label="plain TRL")
    ax1.set_xlabel("optimizer step")
    ax2.set_xlabel("training wall time, s (evaluations excluded)")
    for ax in (ax1, ax2):
        ax.set_ylabel("held-out accuracy (greedy)")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def is_ratio_text(rows: list[dict]) -> str:
    """Per cell, the importance ratios TRL logged (corrected runs) or the glue re-scored (uncorrected runs)."""
    lines = []
    for r in rows:
        ratios = [x for x in r["is_ratio"] if x]
        if ratios:
            lines.append(f"{r['mode']:13s} {corr_label(r['correction']):5s} source {ratios[0]['source']:4s} "
                         f"mean {mean(x['mean'] for x in ratios):.4f}  min {min(x['min'] for x in ratios):.3f}  "
                         f"max {max(x['max'] for x in ratios):.3f}")
    return "\n".join(lines)


def verdict_section(rows: list[dict], cells: dict, entries=()) -> tuple[str, dict]:
    """Per correction, the bound beyond which accuracy per step degrades (the criterion fixed in advance) and the
    fastest bound; the mean final accuracies against eta; whether the unbounded mode trained as eta 8 did; the
    synchronous runs' finals. Every ``ch06_beyond_*``, ``ch06_best_*``, ``ch06_trend_*`` value and the rest; the
    speed-ups and the mean final accuracies are the results ledger's (``entries``, :func:`campaign_id`)."""
    d = {e.id: e for e in entries}

    def iv(r):
        e = d.get(f"{campaign_id(r)}.speedup")
        return None if e is None else Interval(e.value, e.lo, e.hi, e.n, e.method)

    lines, values = [], {}
    for corr in CORRECTIONS:
        key = corr_label(corr)
        rs = [r for r in rows if r["correction"] == corr and "degraded" in r]
        if len(rs) > 1:
            b = beyond(rows, corr)
            values[f"ch06_beyond_{key}"] = eta_text(b)
            best, why = largest({f"η = {eta_text(r['eta'])}": iv(r) for r in rs if r["mode"] != "sync" and iv(r)})
            values[f"ch06_best_{key}"] = why
            lines.append(f"correction {key}: accuracy per step degrades beyond η = {eta_text(b)}; fastest: {why}")
        else:
            values[f"ch06_beyond_{key}"] = NA
            values[f"ch06_best_{key}"] = NA
    for corr in CORRECTIONS:
        trend = ", ".join(f"η={eta_text(r['eta'])}: {d[f'{campaign_id(r)}.final_accuracy'].value:.3f}" for r in rows
                          if r["correction"] == corr and f"{campaign_id(r)}.final_accuracy" in d)
        values[f"ch06_trend_{corr_label(corr)}"] = trend or NA
    same = [c for c in CORRECTIONS if ("eta8", c) in cells and ("async", c) in cells
            and cells[("eta8", c)]["finals"] == cells[("async", c)]["finals"]]
    values["ch06_async_is_eta8"] = ("the same final accuracies, seed by seed" if len(same) == len(CORRECTIONS)
                                    else "different final accuracies")
    sync_cell = cells.get(("sync", None))
    values["ch06_sync_finals"] = (", ".join(f"{a:.3f}" for a in sync_cell["finals"])
                                  if sync_cell and sync_cell["finals"] else NA)
    return "\n".join(lines), values


def speedup_section(rows: list[dict]) -> tuple[str, dict]:
    """Each mode's speed-up over the synchronous step, predicted (from the synchronous run, before the mode ran)
    and measured, against the goal; and how many cells met it (``ch06_pred_met``)."""
    lines, n_met, n_pred = [], 0, 0
    for r in rows:
        if r["mode"] == "sync" or not r.get("predicted_speedup"):
            continue
        n_pred += 1
        n_met += r.get("met") == "met"
        iv = r.get("speedup_iv")
        lines.append(f"{r['mode']:13s} {corr_label(r['correction']):5s} predicted {r['predicted_speedup']:.2f}x  measured "
                     f"{iv.text() if iv else 'nan'}x ({r.get('speedup_word', '-')})  error "
                     f"{r.get('speedup_error', float('nan')):+.0%}  {r.get('met') or 'undecided'}")
    return "\n".join(lines), {"ch06_pred_met": f"{n_met} of {n_pred}"}


def timelines(root=None) -> list:
    """One Gantt per mode (seed 0, uncorrected): the trainer and the rollout worker, three steps near the median."""
    figures = []
    for m in MODES:
        rec = latest_in((root or reference_root("cpu")) / cell_name(m, None, 0))
        if rec is not None:
            figures.append(timeline(rec, steps=3, title=f"{m}: {rec.results.get('describe')}"))
    return figures


ADVISOR_KEYS = ("ch06_adv_eta", "ch06_adv_pred", "ch06_adv_meas", "ch06_adv_err", "ch06_adv_met", "ch06_fastest",
                "ch06_goal_ratio_none", "ch06_goal_none", "ch06_goal_ratio_tis", "ch06_goal_tis", "ch06_ref_tps")


def advisor_section(camp: dict, rows: list[dict], ref, entries=()) -> tuple[str, dict]:
    """The advisor (``advise_mode``, seeing only each seed's synchronous run) judged against the measured
    speed-up of its pick, and the pick against the plain-TRL reference's tokens/s (the issue's goal: twice, at
    the same accuracy curve); the ``ch06_adv_*``, ``ch06_goal_*`` and ``ch06_ref_tps`` values, their numbers the
    results ledger's (``entries``: :data:`LEDGER_GLUE`, the picked cell's ``ch06.campaign.<mode>.none.*``)."""
    d, led = {e.id: e for e in entries}, ledger_values(entries)
    sync_res = [r["results"] for r in camp["cells"].get(("sync", None), [])]
    out = dict.fromkeys(ADVISOR_KEYS, NA)
    lines = []
    if sync_res and rows:
        adv = advisor_check(sync_res, rows, None)
        lines.append(f"advisor: { {k: (round(v, 3) if isinstance(v, float) else v) for k, v in adv.items()} }")
        out["ch06_adv_eta"] = "∞" if adv["eta"] == "inf" else text(adv["eta"])
        out["ch06_adv_pred"] = f"{led['ch06_adv_pred']}×"
        cell = next((r for r in rows if r["correction"] is None and _label(r["eta"]) == adv["eta"]), None)
        meas = d.get(f"{campaign_id(cell)}.speedup") if cell else None
        err = d.get("ch06.campaign.advisor.error")
        if meas is not None and err is not None:
            out["ch06_adv_meas"] = f"{entry_text(meas)}×"
            out["ch06_adv_err"] = led["ch06_adv_err"]
            out["ch06_adv_met"] = err.verdict
        out["ch06_fastest"] = (f"η = {'∞' if adv['fastest_eta'] == 'inf' else adv['fastest_eta']}"
                               if adv["fastest_eta"] else adv["fastest_why"])
        picked = {corr: next((r for r in rows if r["correction"] == corr and _label(r["eta"]) == adv["eta"]), None)
                  for corr in CORRECTIONS}
        if ref:
            lines.append(f"plain TRL reference: {ref['tokens_per_s']:.0f} tokens/s, final accuracy "
                         f"{ref['final_accuracy']:.3f} (n={ref['seeds']}); TRL defaults recorded: "
                         f"{camp['reference'][0]['results']['trl_defaults']}")
            out["ch06_ref_tps"] = led["ch06_ref_tps"]
            for corr, r in picked.items():
                if r:
                    g = goal_vs_reference(r, ref)
                    lines.append(f"advisor's pick, correction {corr_label(corr)}: {g['tokens_iv'].text()}x the "
                                 f"reference's tokens/s (paired by seed), same curve: {g['same_curve']} -> goal "
                                 f"{g['met']}")
                    e = d.get(f"ch06.campaign.goal.{corr_label(corr)}.tokens_ratio")
                    out[f"ch06_goal_ratio_{corr_label(corr)}"] = f"{led[f'ch06_goal_ratio_{corr_label(corr)}']}×"
                    out[f"ch06_goal_{corr_label(corr)}"] = e.verdict if e is not None else NA
    return "\n".join(lines), out


def outlook_section(camp: dict, devices: int = 64) -> tuple[str, dict]:
    """By prediction only: ``devices`` split between generation replicas and training (``best_split``), the step
    for each eta against a synchronous step colocated on all of them; the ``ch06_out_*`` values."""
    sync_res = [r["results"] for r in camp["cells"].get(("sync", None), [])]
    if not sync_res:
        return "", {key: NA for key in ("ch06_out_eta", "ch06_out_speedup", "ch06_out_split")}
    o = outlook(sync_res[0], devices=devices)
    lines = [f"split: {o['rollout_devices']} generation replicas, {o['train_devices']} training devices; "
             f"colocated synchronous step {o['sync_colocated_step_s'] * 1e3:.1f} ms"]
    for k, v in o["step_s_by_eta"].items():
        lines.append(f"  eta={k:>3}: {v * 1e3:7.1f} ms/step, {o['speedup_by_eta'][k]:.2f}x the colocated synchronous step")
    lines.append(f"advisor at {devices} devices: eta={o['advice_eta']}, {o['advice_speedup_vs_colocated']:.2f}x")
    return "\n".join(lines), {"ch06_out_eta": "∞" if o["advice_eta"] == "inf" else text(o["advice_eta"]),
                              "ch06_out_speedup": f"{o['advice_speedup_vs_colocated']:.2f}×",
                              "ch06_out_split": f"{o['rollout_devices']} + {o['train_devices']}"}


INTERRUPT_KEYS = ("b", "pk", "k", "tokens", "reps", "load", "extra", "extra_q", "extra_pred", "extra_err",
                  "extra_verdict", "keep", "keep_pred", "keep_verdict", "wait_today", "wait_int", "wait_int_max", "step",
                  "step_pred", "prefill", "prefill_pred")
INTERRUPT_COMMAND = ("flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 6 interrupt "
                     "--size cpu --out data/runs/cpu/ch06_interrupt/<UTC time>")


def _ms(s) -> str:
    return f"{s * 1e3:.1f} ms"


def interrupt_section(size: str) -> tuple[str, object, dict]:
    """Interruptible rollouts: the size's committed record (the cpu one where the size has none), each kind of
    request's generation, re-prefill's extra cost against its prediction, the interruption's own cost, an
    update's wait today and when interruptible; the figure; and every ``ch06_int_*`` value of the prose."""
    shown = size if latest(reference_root(size)) is not None else "cpu"
    irec = latest(reference_root(shown))
    if irec is None:
        return f"not measured yet: {INTERRUPT_COMMAND}", None, {f"ch06_int_{key}": NA for key in INTERRUPT_KEYS}
    ir = report(irec)

    def verdict(word, err):
        return f"{word} (error {err:+.0%})"

    lines = [f"record: {repo_relative(irec.path)} ({shown} size), load average at start {ir['load']}"]
    lines += [f"  {kind:9s} generation of the batch: median {_ms(ir[kind + '_s'])}" for kind in ("none", "keep", "reprefill")]
    lines += [f"  reprefill - keep: {_ms(ir['reprefill_extra_s'])} (quartiles {_ms(ir['reprefill_extra_iqr'][0])}-"
              f"{_ms(ir['reprefill_extra_iqr'][1])}), predicted {_ms(ir['reprefill_extra_pred_s'])}: "
              f"{verdict(ir['reprefill_met'], ir['reprefill_error'])}",
              f"  keep - none:      {_ms(ir['keep_extra_s'])}, predicted {_ms(ir['keep_extra_pred_s'])}: "
              f"{verdict(ir['keep_met'], ir['keep_error'])}",
              f"  an update's wait: today {_ms(ir['wait_today_s'])}, interruptible {_ms(ir['wait_interruptible_s'])} "
              f"(max {_ms(ir['wait_interruptible_max_s'])}); one decode step {_ms(ir['decode_step_s'])}"]
    values = {
        "ch06_int_b": text(ir["batch"]), "ch06_int_pk": text(ir["prompt_len"] + ir["at_token"]),
        "ch06_int_k": text(ir["at_token"]), "ch06_int_tokens": text(ir["tokens"]), "ch06_int_reps": text(ir["repeats"]),
        "ch06_int_load": " / ".join(f"{x:.1f}" for x in ir["load"][:2]),
        "ch06_int_extra": _ms(ir["reprefill_extra_s"]),
        "ch06_int_extra_q": f"{_ms(ir['reprefill_extra_iqr'][0])} to {_ms(ir['reprefill_extra_iqr'][1])}",
        "ch06_int_extra_pred": _ms(ir["reprefill_extra_pred_s"]), "ch06_int_extra_err": f"{ir['reprefill_error']:+.0%}",
        "ch06_int_extra_verdict": ir["reprefill_met"],
        "ch06_int_keep": _ms(ir["keep_extra_s"]), "ch06_int_keep_pred": _ms(ir["keep_extra_pred_s"]),
        "ch06_int_keep_verdict": verdict(ir["keep_met"], ir["keep_error"]),
        "ch06_int_wait_today": _ms(ir["wait_today_s"]), "ch06_int_wait_int": _ms(ir["wait_interruptible_s"]),
        "ch06_int_wait_int_max": _ms(ir["wait_interruptible_max_s"]), "ch06_int_step": _ms(ir["decode_step_s"]),
        "ch06_int_step_pred": _ms(ir["t_step_pred_s"]), "ch06_int_prefill": _ms(ir["prefill_implied_s"]),
        "ch06_int_prefill_pred": _ms(ir["t_prefill_pred_s"])}
    return "\n".join(lines), plot(irec), values
