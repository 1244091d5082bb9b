"""Chapter-1 figures and tables from run records: train reward and held-out accuracy curves, the runs' summary
and provenance, the tuning sweep and the aim judged on its reference run, and the values the page glues.

Everything here reads ``RunRecord`` folders (``record.json`` + ``metrics.jsonl``), so the same
functions draw this build's run and the committed reference runs in ``data/runs/cpu``.
Matplotlib only; torch only to count a zoo model's parameters (:func:`config_text`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...models import build_model, count_parameters
from ...record import load_records, reference_root, repo_root
from ...tables import format_table


def _rows(record, key: str, phase: str | None = None) -> list[dict]:
    return [r for r in record.metrics() if key in r and (phase is None or r.get("phase") == phase)]


def reward_curve(record, smooth: int = 10) -> tuple[list[int], list[float]]:
    """(RL step, train reward averaged over a trailing window of ``smooth`` steps)."""
    rows = [r for r in _rows(record, "reward") if r.get("phase") != "sft"]
    steps, vals, out = [r["step"] for r in rows], [r["reward"] for r in rows], []
    for i in range(len(vals)):
        window = vals[max(0, i - smooth + 1):i + 1]
        out.append(sum(window) / len(window))
    return steps, out


def accuracy_curve(record) -> tuple[list[int], list[float]]:
    """(global step counting SFT steps first, greedy held-out accuracy): periodic evals plus before/after."""
    res, cfg = record.results, record.config
    sft_steps = res.get("sft_steps", cfg.get("sft_steps", 0)) or 0
    points = {r["global_step"]: r["eval_accuracy"] for r in _rows(record, "eval_accuracy")}
    if "accuracy_before" in res:
        points[sft_steps] = res["accuracy_before"]
    if "accuracy_after" in res and cfg.get("algo") != "sft":
        points[sft_steps + res.get("rl_steps", cfg.get("rl_steps", 0))] = res["accuracy_after"]
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def label(record) -> str:
    cfg, prov = record.config, record.data.get("provenance", {})
    where = prov.get("hardware", {}).get("cpu_model") or "?"
    return f"{cfg.get('algo', '?')} · {cfg.get('size', '?')} · {Path(str(record.dir)).name} ({where[:24]})"


def plot_runs(records, title: str = "", smooth: int = 10):
    """Two panels: train reward per RL step (sampled, T = temperature) and greedy held-out accuracy
    over SFT + RL steps (the dashed line marks the end of SFT)."""
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_a) = plt.subplots(1, 2, figsize=(11, 3.8))
    for rec in records:
        lab = label(rec)
        steps, reward = reward_curve(rec, smooth)
        line, = ax_r.plot(steps, reward, label=lab)
        s, acc = accuracy_curve(rec)
        ax_a.plot(s, acc, marker="o", ms=3, color=line.get_color(), label=lab)
        sft = rec.results.get("sft_steps", rec.config.get("sft_steps"))
        if sft:
            ax_a.axvline(sft, color=line.get_color(), ls="--", lw=0.8, alpha=0.6)
    ax_r.set(xlabel="RL step", ylabel=f"train reward (mean of last {smooth})", title="reward (sampled completions)")
    ax_a.set(xlabel="step (SFT, then RL)", ylabel="greedy accuracy", title="held-out accuracy", ylim=(0, 1))
    for ax in (ax_r, ax_a):
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# the committed runs' numbers the page shows, as the results ledger holds them (``rlm_lab.ledger.RUN_FIELDS``)
LEDGER_KEYS = {"acc_before": "accuracy_before", "acc_after": "accuracy_after", "s_per_step": "rl_seconds_per_step"}


def summary_rows(records, entries=None) -> list[dict]:
    """One row per run: the numbers chapter 1 reports. A committed run's accuracies and seconds per step are read
    from the results ledger when ``entries`` (``rlm_lab.ledger.build("cpu")``) are given, its id in the row
    (``ch01.run.<folder>``: one value per quantity across the book); the other columns, and this build's own runs,
    straight from each record."""
    d = {e.id: e for e in entries or ()}
    rows = []
    for rec in records:
        r, prov = rec.results, rec.data.get("provenance", {})
        where = rel_to_repo(rec.dir)
        parts = Path(where).parts   # data/runs/<size>/<folder>[/<run>]
        base = f"ch01.run.{parts[3]}" if len(parts) > 3 and parts[:2] == ("data", "runs") else "-"
        led = {k: d[f"{base}.{key}"].value for k, key in LEDGER_KEYS.items()
               if f"{base}.{key}" in d and d[f"{base}.{key}"].records == (where,)}
        before = led.get("acc_before", r.get("accuracy_before"))
        after = led.get("acc_after", r.get("accuracy_after"))
        rows.append({
            "run": Path(str(rec.dir)).name,
            "ledger id": base if len(led) == len(LEDGER_KEYS) else "-",
            "algo": rec.config.get("algo"),
            "size": rec.config.get("size"),
            "model": rec.config.get("model"),
            "acc_before": before,
            "acc_after": after,
            "gain_points": None if before is None or after is None else round(100 * (after - before), 1),
            "eval_n": r.get("eval_problems"),
            "sft_s": r.get("sft_seconds"),
            "rl_s": r.get("rl_seconds"),
            "s_per_step": led.get("s_per_step", r.get("rl_seconds_per_step")),
            "train_tok_s": r.get("rl_train_tokens_per_s"),
            "gen_tok_s": r.get("rl_gen_tokens_per_s"),
            "eval_gen_tok_s": r.get("eval_gen_tokens_per_s"),
            "commit": (prov.get("git", {}).get("commit") or "")[:8],
            "date": prov.get("date"),
        })
    return rows


def rel_to_repo(path) -> str:
    """A record folder relative to the repository (as the ledger names records), else its absolute path."""
    p = Path(str(path)).resolve()
    return str(p.relative_to(repo_root().resolve())) if p.is_relative_to(repo_root().resolve()) else str(p)


def reference_records(names=("ch01_grpo", "ch01_ppo", "ch01_rloo", "ch01_grpo_aim"), size: str = "cpu") -> list:
    """The committed reference runs ``data/runs/<size>/<name>``, as RunRecords: each must exist and be a
    finished training run (a RecordError naming the folder otherwise, never a shorter list)."""
    return list(load_records(reference_root(size), names, require=("accuracy_after", "total_seconds")).values())


def _dirty(git: dict) -> str:
    """What the record says about uncommitted changes when the run started (run records excluded)."""
    if not git.get("dirty"):
        return ""
    if git.get("dirty_paths"):
        return f" (uncommitted changes in {', '.join(git['dirty_paths'])})"
    return " (dirty: the tree had uncommitted changes; this older record does not say which files)"


def provenance_line(record) -> str:
    p = record.data.get("provenance", {})
    hw, v, git = p.get("hardware", {}), p.get("versions", {}), p.get("git", {})
    return (f"{Path(str(record.dir)).name}: {p.get('date')} · {hw.get('cpu_model')} ({hw.get('cpu_count')} cores, "
            f"{hw.get('torch_threads')} torch threads) · torch {v.get('torch')} · trl {v.get('trl')} · "
            f"commit {(git.get('commit') or '?')[:8]}{_dirty(git)} · seed {p.get('seed')} · "
            f"load average at the end {record.results.get('load_average')}")


CONFIG_KEYS = ("model", "task", "sft_steps", "rl_steps", "batch_size", "num_generations", "rl_lr", "eval_problems")


def config_text(cfg) -> tuple[str, dict]:
    """The fields of ``cfg`` a reader checks first and its model's parameter count, as text; and the glued value
    ``ch01_micro_params`` (the ``micro`` model's parameters, thin-space thousands: the cpu size's model)."""
    lines = [f"{key:>16}: {getattr(cfg, key)}" for key in CONFIG_KEYS]
    n_params = {name: count_parameters(build_model(name)[0]) for name in {cfg.model, "micro"}}
    lines.append(f"{cfg.model} model: {n_params[cfg.model]:,} parameters")
    return "\n".join(lines), {"ch01_micro_params": f"{n_params['micro']:,}".replace(",", "\u2009")}


SWEEP_COLUMNS = ["setting", "what", "accuracy_sft", "accuracy_rl", "gain_points", "meets_gain_bar", "end_to_end_seconds",
                 "end_to_end_cpu_seconds", "load_1min"]
AIM = {"accuracy": 0.95, "seconds": 180.0}  # the longer-term aim, fixed before the sweep (when its file has none)


def sweep_section(refs, root=None) -> tuple[str, dict]:
    """The tuning sweep's table (``<root>/ch01_sweep.json``, default the committed cpu records; columns no row
    fills are left out) and the aim judged on the reference run ``ch01_grpo_aim`` of ``refs``, as text; and the
    values the page glues (``ch01_aim_*``: "n/a" without that run)."""
    sweep_file = (root or reference_root("cpu")) / "ch01_sweep.json"
    sweep_data = json.loads(sweep_file.read_text()) if sweep_file.exists() else {"rows": [], "aim": {}}
    sweep = [{**r, "load_1min": (r.get("load_average") or [None])[0]} for r in sweep_data["rows"]]
    lines = [format_table(sweep, [c for c in SWEEP_COLUMNS if any(r.get(c) is not None for r in sweep)])]
    aim = sweep_data.get("aim") or AIM
    by_name = {r.dir.name: r for r in refs}
    if "ch01_grpo_aim" not in by_name:
        return "\n".join(lines), dict.fromkeys(("ch01_aim_accuracy", "ch01_aim_seconds", "ch01_aim_verdict",
                                                "ch01_aim_load"), "n/a")
    res = by_name["ch01_grpo_aim"].results
    # one reference run: no interval of its time (fresh processes differ by up to 1.7x on 2 cores), so the aim is
    # "undecided" whatever the point says (rlm_lab.evidence: a single run decides nothing); the point is shown
    inside = res["accuracy_after"] >= aim["accuracy"] and res["total_seconds"] <= aim["seconds"]
    verdict = f"undecided (one run, no interval; its point is {'inside' if inside else 'outside'} the aim)"
    lines.append(f"aim ({aim['accuracy']:.0%} within {aim['seconds']:.0f} s), judged on the reference run "
                 f"ch01_grpo_aim: {res['accuracy_after']:.1%} in {res['total_seconds']:.0f} s: {verdict}")
    return "\n".join(lines), {"ch01_aim_accuracy": format(res["accuracy_after"], ".1%"),
                              "ch01_aim_seconds": format(res["total_seconds"], ".0f"), "ch01_aim_verdict": verdict,
                              "ch01_aim_load": " / ".join(f"{x:.1f}" for x in res["load_average"][:2])}
