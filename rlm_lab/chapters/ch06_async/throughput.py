"""Chapter 6's throughput goal, fixed by issue 20 before it was measured: the advisor's pick gives at least 2x
plain TRL's tokens per second at equal held-out accuracy (their intervals overlapping), on the same 2 cores.

Two arms, one run per process, paired by seed under :mod:`rlm_lab.protocol` (``--seed {pair}``: both members of a
pair train the same seed):

``plain``  plain ``trl.GRPOTrainer`` with its own defaults, generating in-process
           (:func:`rlm_lab.chapters.ch06_async.reference.run_reference`, chapter 6's reference).
``pick``   the advisor's pick (:data:`PICK`: the staleness bound ``rlm_lab.cost.asynchrony.advise_mode`` picks from
           the committed synchronous runs' stage times, :func:`rlm_lab.chapters.ch06_async.compare.advisor_check`: eta = 2)
           with TRL's truncated importance sampling, on the Ray runtime, without the glue's record-only
           re-scoring, and with the generation settings :func:`generation` gives (what transformers offers, chosen
           by the rule of :func:`rlm_lab.chapters.ch06_async.generation_options.choose` from the committed
           exploration at the run's size; TRL's own where none is committed).

Both train chapter 6's campaign config (60 steps at cpu size, its held-out curve). Tokens per second: TRL's
``num_tokens`` over the training wall time without the evaluations (:func:`rlm_lab.chapters.ch06_async.compare.tokens_per_s`,
the chapter's definition, whole run); accuracy: the final held-out accuracy. :func:`goal` turns a protocol record
into the word: ``met`` when the interval of the median paired tokens ratio is wholly at or above 2 and the
accuracy intervals overlap (or the pick's lies above), ``not met`` when the ratio's interval is wholly below 2 or
the pick's accuracy interval lies wholly below plain TRL's, else ``undecided``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...asynchrony.modes import run_mode
from ...errors import RlmLabError, unknown
from ...evidence import at_least_word, overlap, ratio_interval, repeat_interval
from ...protocol import Arm, child_main, compare
from ...record import RunRecord, atomic_write_json, reference_root, runs_root
from ...sizes import check_size
from ..registry import step_argv
from . import compare as ch06_compare  # the module; compare (protocol) is the window comparison
from .cases import _now, campaign_config, curve_spec
from .generation_options import chosen
from .reference import run_reference

GOAL = 2.0
PICK = {"mode": "eta2", "correction": "token_truncate"}
RECORDS = "ch06_throughput"  # the goal's committed measurement under data/runs/<size>/ (--out of the command)


def generation(size: str) -> tuple[dict, str]:
    """The rollout workers' generation settings beyond TRL's for ``size``, and why (the committed exploration read
    through :func:`rlm_lab.chapters.ch06_async.generation_options.chosen`)."""
    return chosen(size)
ARMS = ("plain", "pick")


def run_arm(arm: str, size: str, seed: int, out, steps: int | None = None, command=None) -> dict:
    """One run of ``arm``; returns ``{"tokens_per_s", "accuracy", "record"}``."""
    if arm not in ARMS:
        raise unknown("arm", arm, ARMS)
    size = check_size(size)
    root = Path(out or runs_root(size))
    folder = root / f"ch06_goal_{arm}_seed{seed}" / _now()
    if arm == "plain":
        res = run_reference(size, seed, folder, steps, command=command)
    else:
        cfg = campaign_config(size, seed, steps)
        settings, _ = generation(size)
        res = run_mode(PICK["mode"], cfg, folder, importance=False, correction=PICK["correction"],
                       curve=curve_spec(cfg, size), command=command, generation=settings or None,
                       prediction={"note": "the throughput goal's pick: measured against plain TRL, not predicted"})
    tps, acc = ch06_compare.tokens_per_s(res), ch06_compare.final_accuracy(res)
    if not tps or acc is None:
        raise RlmLabError(f"arm {arm}: the run recorded no tokens per second or no accuracy ({folder})")
    return {"tokens_per_s": tps, "accuracy": acc, "record": str(folder)}


def goal(results: dict) -> dict:
    """The goal's word from a protocol record's results (arm A = pick, arm B = plain): the tokens ratio's median
    and interval, both arms' accuracy medians and intervals, and ``met`` / ``not met`` / ``undecided``."""
    rows = results["repeats"]
    pairs = sorted({r["pair"] for r in rows})
    by = {(r["pair"], r["arm"]): r["report"] for r in rows}
    if any((p, s) not in by for p in pairs for s in "AB"):
        raise RlmLabError("the throughput goal needs complete pairs (a repeat is missing)")
    a_tps = [by[(p, "A")]["tokens_per_s"] for p in pairs]
    b_tps = [by[(p, "B")]["tokens_per_s"] for p in pairs]
    ratio = ratio_interval(a_tps, b_tps)
    acc_a = repeat_interval([by[(p, "A")]["accuracy"] for p in pairs])
    acc_b = repeat_interval([by[(p, "B")]["accuracy"] for p in pairs])
    speed = at_least_word(ratio, GOAL)
    over = overlap(acc_a, acc_b)
    above = acc_a.decided and acc_b.decided and acc_a.lo > acc_b.hi
    below = acc_a.decided and acc_b.decided and acc_a.hi < acc_b.lo
    if speed == "not met" or below:
        word = "not met"
    elif speed == "met" and (over or above):
        word = "met"
    else:
        word = "undecided"
    iv = lambda i: {"estimate": i.estimate, "lo": i.lo, "hi": i.hi, "n": i.n}  # noqa: E731
    return {"goal": GOAL, "tokens_ratio": iv(ratio), "speed_word": speed, "accuracy_pick": iv(acc_a),
            "accuracy_plain": iv(acc_b), "accuracy_overlap": over, "word": word}


def command(arm: str, size: str, out, steps: int | None = None) -> tuple:
    """The argv of one repeat of ``arm``; ``{pair}`` (the protocol's pair index) is its seed."""
    argv = [*step_argv(6, "throughput"), "--arm", arm, "--size", size, "--seed", "{pair}", "--out", str(out)]
    return tuple(argv + (["--steps", str(steps)] if steps else []))


def measure_goal(size: str, out, steps: int | None = None, say=print) -> dict:
    """The pick against plain TRL under the protocol (paired by seed, ABBA, fresh processes, the load gate), then
    :func:`goal`; the protocol's record under ``<out>/ch06_goal/<UTC>`` holds both, the runs under ``<out>/runs``."""
    runs = Path(out) / "runs"
    folder = Path(out) / "ch06_goal" / _now()
    settings, why = generation(size)
    say(f"the pick's generation settings: {settings or 'TRL own'} ({why})")
    res = compare(Arm("pick", command("pick", size, runs, steps)), Arm("plain", command("plain", size, runs, steps)),
                  "tokens_per_s", folder, size=size, higher_is_better=True, say=say)
    g = goal(res)

    atomic_write_json(folder / "goal.json", g | {"pick": PICK, "generation": settings, "generation_why": why})
    say(f"throughput goal: pick / plain TRL tokens/s {g['tokens_ratio']['estimate']:.2f} "
        f"[{g['tokens_ratio']['lo']:.2f}, {g['tokens_ratio']['hi']:.2f}] (goal >= {GOAL:g}), accuracy "
        f"{g['accuracy_pick']['estimate']:.3f} against {g['accuracy_plain']['estimate']:.3f} -> {g['word']}")
    return res | {"goal": g}


def section(size: str = "cpu", root=None) -> tuple[str, dict]:
    """The page's text and glue values from the newest committed goal measurement at ``size`` (under
    ``data/runs/<size>/ch06_throughput/ch06_goal/``, or ``root``): the pick's tokens ratio to plain TRL with its
    interval, both arms' final accuracy with theirs, the generation settings and the word."""
    base = Path(root) if root is not None else reference_root(size) / RECORDS / "ch06_goal"
    found = None
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            rec = RunRecord.load(d)
        except RlmLabError:
            continue
        if rec.data.get("status") == "completed" and (d / "goal.json").is_file():
            found = (d, rec, json.loads((d / "goal.json").read_text()))
            break
    if found is None:
        text = (f"The goal has not been measured at {size} size (no committed record under "
                f"{RECORDS}/ch06_goal/): undecided.")
        return text, {"ch06_tg_word": "undecided (not measured at this size)", "ch06_tg_ratio": "n/a",
                      "ch06_tg_pairs": "0", "ch06_tg_acc_pick": "n/a", "ch06_tg_acc_plain": "n/a",
                      "ch06_tg_generation": "n/a", "ch06_tg_window": "n/a"}
    d, rec, g = found
    r, a, b = g["tokens_ratio"], g["accuracy_pick"], g["accuracy_plain"]
    iv = lambda x, f: f"{x['estimate']:{f}} [{x['lo']:{f}}, {x['hi']:{f}}]"  # noqa: E731
    settings = g.get("generation") or {}
    gen = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "TRL's own"
    values = {"ch06_tg_ratio": iv(r, ".2f"), "ch06_tg_word": g["word"], "ch06_tg_pairs": str(r["n"]),
              "ch06_tg_acc_pick": iv(a, ".3f"), "ch06_tg_acc_plain": iv(b, ".3f"), "ch06_tg_generation": gen,
              "ch06_tg_window": str(rec.results.get("window", d.name))}
    text = "\n".join([
        f"measurement {d.name} (window {values['ch06_tg_window']}), {r['n']} pairs, pick = eta {PICK['mode'][3:]} "
        f"with {PICK['correction']}, generation: {gen}",
        f"  why these settings: {g.get('generation_why', 'n/a')}",
        f"  pick / plain TRL tokens/s, median of paired ratios [95 %]: {values['ch06_tg_ratio']} (goal >= {GOAL:g}: "
        f"{g['speed_word']})",
        f"  final held-out accuracy, median [95 %]: pick {values['ch06_tg_acc_pick']}, plain TRL "
        f"{values['ch06_tg_acc_plain']} (intervals overlap: {'yes' if g['accuracy_overlap'] else 'no'})",
        f"  the goal: {g['word']}"])
    return text, values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 throughput",
                                 description="one arm of chapter 6's throughput goal (one process, one run)")
    ap.add_argument("--arm", default=None, help=f"one of {', '.join(ARMS)} (one run)")
    ap.add_argument("--goal", action="store_true", help="measure the goal: pick against plain under the protocol")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="root of the records (default _build/runs/<size>)")
    ap.add_argument("--steps", type=int, default=None)
    a = ap.parse_args(argv)

    def work():
        if a.goal:
            measure_goal(a.size, a.out or runs_root(a.size), a.steps)
            return 0
        if a.arm is None:
            raise RlmLabError("give --arm (one run) or --goal (the comparison)")
        return run_arm(a.arm, a.size, a.seed, a.out, a.steps, command=sys.argv)

    return child_main(work, lambda out: print(f"{a.arm} seed {a.seed}: {out['tokens_per_s']:.0f} tokens/s, accuracy "
                                              f"{out['accuracy']:.3f} -> {out['record']}"))
