"""Chapter 5's comparison: predicted against measured step time and sync bytes per placement, the verdict
against the goal fixed in advance, the sync bytes' formula, and the predictor as an advisor (its ranking)."""

from __future__ import annotations

from ...evidence import bar_word, error_interval, repeat_interval, undecided_reason
from ...models import load
from ...placement.runtime import LORA


def comparison(records: dict) -> list[dict]:
    """Per placement: predicted and measured step time (median over the steps after the first) and the
    sync bytes of one step: the formula (parameter bytes), the predictor's and the counted ones."""
    rows = []
    for key, rec in records.items():
        res = rec.results
        pred = res.get("prediction") or {}
        sync = res.get("sync", {})
        measured = res["step_seconds_median"]
        rows.append({
            "placement": key, "describe": res.get("describe"),
            "predicted_s": pred.get("step_s"), "measured_s": measured,
            "rel_error": (pred["step_s"] - measured) / measured if pred.get("step_s") and measured else None,
            "sync_bytes_predicted": pred.get("sync_bytes"), "sync_bytes_measured": sync.get("bytes_per_sync", 0),
            "sync_bytes_counted": sync.get("counted_bytes_per_sync"),
            "sync_s_measured": sync.get("seconds_mean", 0.0), "sync_s_predicted": pred.get("sync_s"),
            "load_start": (res.get("load_average_start") or [None])[0],
            "load_end": (res.get("load_average_end") or [None])[0],
            "dir": str(rec.dir),
        })
    return rows


GOAL = 0.25  # the step-time error goal, fixed before the measurements (as chapters 2-4)


def step_word(row: dict, goal: float = GOAL) -> str:
    """The goal's word for one placement's step time, from an interval (:mod:`rlm_lab.evidence`): a record is ONE
    run (its steps share one process, and fresh processes differ by more than its steps do), so it decides nothing
    and the word is "undecided (one run, no interval)"; a row with ``measured_runs`` (the step medians of repeats in
    fresh processes, e.g. a reference window of ``rlm-lab reference --chapter 5``) is judged on the bootstrap
    interval of their median: "met" only when the whole error interval lies within the goal, "not met" only when
    wholly outside it."""
    if row.get("predicted_s") is None or not row.get("measured_s"):
        return "undecided (nothing predicted)"
    err = error_interval(row["predicted_s"], repeat_interval(row.get("measured_runs") or [row["measured_s"]]))
    word = bar_word(err, goal)
    return word if word != "undecided" else f"undecided ({undecided_reason(err)})"


def verdict(row: dict, goal: float = GOAL) -> str:
    """One line per placement from the live numbers: error against the goal (:func:`step_word`), sync bytes
    against the formula."""
    err = row["rel_error"]
    met = step_word(row, goal)
    sync = ""
    if row["sync_bytes_measured"]:
        shipped = {row["sync_bytes_predicted"], row["sync_bytes_measured"]}
        if row["sync_bytes_counted"] is not None:  # the object store is no collective: nothing to count
            shipped.add(row["sync_bytes_counted"])
        same = len(shipped) == 1
        sync = f"; sync {row['sync_bytes_measured']:,} B/step, {'equal to' if same else 'NOT equal to'} the formula"
    return (f"{row['placement']}: measured {row['measured_s']:.3f} s/step, predicted {row['predicted_s']:.3f} s "
            f"({100 * err:+.1f} %: goal <= {100 * goal:.0f} % {met}){sync}")


def formula_sync_bytes(record) -> int:
    """The formula for one sync of the record's run, computed from a fresh model: the bytes of every
    parameter (full fine-tuning) or of the LoRA adapters only (PEFT's trainable parameters)."""
    model = load(record.config["run"]["model"])[0]
    if record.config["placement"].get("lora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**LORA))
        return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def ranking(rows: list[dict]) -> dict:
    """The predictor as an advisor over the measured placements: Kendall's tau between predicted and
    measured step times (tau-a: (concordant - discordant) / pairs), and the regret of its first pick
    (that placement's measured step over the best measured one)."""
    pairs = [(r["predicted_s"], r["measured_s"]) for r in rows]
    n = len(pairs)
    c = d = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (pairs[i][0] - pairs[j][0]) * (pairs[i][1] - pairs[j][1])
            c, d = c + (s > 0), d + (s < 0)
    pick = min(rows, key=lambda r: r["predicted_s"])
    best = min(rows, key=lambda r: r["measured_s"])
    return {"kendall_tau": (c - d) / (n * (n - 1) / 2) if n > 1 else float("nan"),
            "predicted_order": [r["placement"] for r in sorted(rows, key=lambda r: r["predicted_s"])],
            "measured_order": [r["placement"] for r in sorted(rows, key=lambda r: r["measured_s"])],
            "first_pick": pick["placement"], "best_measured": best["placement"],
            "regret": pick["measured_s"] / best["measured_s"]}
