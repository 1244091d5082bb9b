"""The advice, applied (issue 35, item 8): ``rlm-lab advise`` for chapter 1's GRPO workload on this machine,
applied where the code can run it, measured against plain ``trl.GRPOTrainer`` with chapter 1's preset.

Two arms, one run per process, paired under :mod:`rlm_lab.protocol` (ABBA, fresh processes, load gate):

``plain``    chapter 1's own run, :func:`rlm_lab.train.run` on the size's GRPO preset: TRL's ``GRPOTrainer``
             generating in-process, the preset's one torch thread; nothing else.
``advised``  the advisor's first pick (:func:`advice`, the cost model's ranking of placements x modes on this
             machine's cores) mapped by :func:`apply` onto chapter 6's runtime (:func:`rlm_lab.asynchrony.modes.run_mode`:
             the same ``GRPOTrainer`` and preset, its generation on a Ray rollout worker, staleness bound eta).

Both arms start from one SFT checkpoint (the placement runtime's cache, :func:`rlm_lab.placement.runtime._sft_checkpoint`)
and train the preset's ``rl_steps`` steps: **equal steps**, not time to an accuracy target (chapter 1's cpu
curves reach their final accuracy only at the end of the budget, so a target would be met by neither arm or at the
last step by both); the held-out accuracy of both arms after those steps is reported with the paired difference's
interval. The metric is RL steps per second: the preset's steps over ``trainer.train()``'s wall time without
evaluations (plain: the preset with ``eval_every = 0``, its ``rl_seconds``; advised: the trainer actor's
``train_seconds`` less the two evaluations of chapter 6's held-out curve, at step 0 and at the end); the whole
process's wall time of both (Ray's start-up and the final evaluation included) is reported beside it.

The prediction (:func:`predict`) is written to a file before the measurement and the measurement's record names
it. The verdict (:func:`verdict`) is fixed here before the run: ``met`` when the Student-t interval of the paired
speed-up lies at or above :data:`GOAL` and the paired accuracy difference's interval is not wholly below 0;
``not met`` when the speed-up's interval lies wholly below the goal or the accuracy's wholly below 0; else
``undecided`` (n <= 2 pairs decides nothing: :mod:`rlm_lab.evidence`).

Commands (the committed record: ``--out data/runs/<size>``)::

    rlm-lab chapter 1 advised --predict --size cpu --out data/runs/cpu
    flock -x /tmp/rlm-lab-measure.lock rlm-lab chapter 1 advised --measure --pairs 4 \\
        --size cpu --out data/runs/cpu
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path

from ...asynchrony.modes import run_mode
from ...cost.advise import advise
from ...cost.hardware import INSITU_PROFILE
from ...cost.modes import MODES
from ...cost.placement_spec import Cluster
from ...cost.run_input import from_run
from ...errors import RlmLabError, unknown
from ...evidence import at_least_word, mean_interval, ratio_interval, sign_word
from ...host import load_average
from ...insitu import this_machine
from ...placement.runtime import _sft_checkpoint
from ...protocol import Arm, child_main, compare
from ...record import RunRecord, atomic_write_json, reference_root, runs_root
from ...sizes import check_size
from ...tables import entry_text, ledger_glue
from ...train import make_config, run
from ..registry import step_argv

GOAL = 2.0           # the goal: at least 2x plain TRL's steps per second (fixed before any run)
RECORDS = "ch01_advised"  # under data/runs/<size>/: prediction.json, then <UTC>/ (the protocol's record) and runs/
PROMPT_LEN = 6       # "99+99=": the longest prompt of chapter 1's task (TRL left-pads a batch to it)
ARMS = ("advised", "plain")
CORRECTION = "token_truncate"  # a stale mode's off-policy correction: chapter 6's pick (TRL's truncated IS)

# What the advisor may recommend that this code does not run, and why (the record and the page list them).
NOT_APPLIED = {
    "long-tail techniques": "the advisor ranks placements x execution modes only and names no long-tail technique; "
                            "chapter 1's completions are at most 8 tokens (answers of 2-3 digits), so there is no "
                            "tail to cut, and over-provisioning, tail batching and packing are not hooks of "
                            "GRPOTrainer here (rlm_lab.longtail: over-provisioning needs a sampler hook not written, "
                            "TRL's padding_free is not in GRPOConfig)",
    "collective weight sync": "the runtime's stale modes push weights through Ray's object store (a push that does "
                              "not wait for the generation in flight); the advisor priced a collective broadcast",
}


def plain_config(size: str):
    """Chapter 1's GRPO preset at ``size``, quiet, with no evaluation inside the RL phase (``eval_every = 0``)."""
    return make_config("grpo", check_size(size), disable_tqdm=True, eval_every=0)


def _workload(cfg):
    return from_run(cfg, PROMPT_LEN)[1]


def advice(size: str, profile, devices: int = 2):
    """The advisor's ranking for chapter 1's workload at ``size`` on ``devices`` cores (every mode), with the
    preset's beta (0: no reference model)."""
    cfg = plain_config(size)
    return advise(cfg.model, "grpo", _workload(cfg), Cluster(devices, "cpu"), profile, modes=MODES, beta=cfg.beta)


def plain_prediction(size: str, profile):
    """The cost model's step for the plain arm: the preset's TRL on one core (``threads = 1``), colocated, sync."""
    cfg = plain_config(size)
    adv = advise(cfg.model, "grpo", _workload(cfg), Cluster(cfg.threads, "cpu"), profile, modes=("sync",),
                 beta=cfg.beta)
    return adv.ranked[0]


def apply(pick) -> dict:
    """How the advised arm runs the advisor's pick (a ``PlacementPrediction`` or its ``to_dict()``): ``{"runner",
    "mode", "rollout_devices", "threads", "applied", "not_applied"}``. A pick the runtime cannot run is one
    :class:`RlmLabError` line naming what."""
    d = pick if isinstance(pick, dict) else pick.to_dict()
    sets = d["placement"]["sets"]
    roles = d["placement"]["roles"]
    mode, eta = d["mode"], d["eta"]
    layouts = [s for s in sets if s["tp"] > 1 or s["pp"] > 1 or s["zero"] or s["ep"] > 1 or s["sp"] > 1]
    if layouts:
        raise RlmLabError(f"advised pick {d['describe']!r}: a parallel layout inside a set (tp/pp/zero/ep/sp), "
                          "which chapter 1's one-process trainer does not run")
    applied = {"placement": d["describe"], "mode": mode, "eta": eta}
    if len(sets) == 1:
        if mode != "sync":
            raise RlmLabError(f"advised pick {d['describe']!r} in mode {mode}: one set runs only sync here "
                              "(partial rollouts on one set are not built)")
        return {"runner": "trl", "mode": "sync", "rollout_devices": 0, "threads": sets[0]["devices"],
                "applied": applied, "not_applied": dict(NOT_APPLIED)}
    gen = {roles["rollout"]}
    trainer_sets = [s for s in sets if s["name"] not in gen]
    if "actor" not in roles or roles["actor"] in gen or any("actor" not in s["name"].split("+")
                                                             for s in trainer_sets):
        raise RlmLabError(f"advised pick {d['describe']!r}: more than a trainer set and a rollout set, which "
                          "chapter 6's runtime does not run")
    rollout = next(s for s in sets if s["name"] in gen)
    if mode == "sync":
        run_as = "sync"
    elif mode == "one_step_off":
        run_as = "one_step_off"
    elif mode == "stale":
        run_as = f"eta{eta}"
    elif mode == "async":
        raise RlmLabError(f"advised pick in mode async: partial rollouts are not built in chapter 6's runtime "
                          f"({d['describe']})")
    else:
        raise unknown("mode", mode, MODES)
    return {"runner": "ray", "mode": run_as, "rollout_devices": rollout["devices"],
            "threads": sum(s["devices"] for s in sets), "applied": applied, "not_applied": dict(NOT_APPLIED),
            "correction": None if run_as == "sync" else CORRECTION}


def predict(size: str, profile, origin: dict | None = None) -> dict:
    """The prediction, before any run: the advisor's pick and its step, the plain arm's step and their ratio."""
    adv = advice(size, profile)
    pick = adv.ranked[0]
    plain = plain_prediction(size, profile)
    return {"size": size, "profile": pick.profile_name, "profile_origin": origin or {},
            "pick": pick.to_dict(), "pick_step_s": pick.step_s, "plain": plain.to_dict(), "plain_step_s": plain.step_s,
            "speedup": plain.step_s / pick.step_s, "goal": GOAL, "apply": apply(pick),
            "ranked": [{"describe": p.placement.describe(), "mode": p.mode, "eta": p.eta, "step_s": p.step_s}
                       for p in adv.top(8)],
            "made": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


# ---- one arm, in its own process ---------------------------------------------------------------
def run_arm(arm: str, size: str, out, plan: dict, command=None, seed: int = 0, correction: str = "plan") -> dict:
    """One run of ``arm`` (``plan``: :func:`apply`'s output, read from the prediction) with RL seed ``seed`` (the
    SFT start is seed 0's in every run); ``correction``: ``"plan"`` (the plan's), ``"none"`` or a TRL mode. Returns
    ``{"steps_per_s", "accuracy", "rl_seconds", "seed", "correction", "record"}``."""
    if arm not in ARMS:
        raise unknown("arm", arm, ARMS)
    cfg = plain_config(size)
    cfg = cfg.replace(sft_checkpoint=str(_sft_checkpoint(cfg)), seed=seed)  # one SFT start for both arms
    correction = plan.get("correction") if correction == "plan" else (None if correction == "none" else correction)
    folder = Path(out) / f"{arm}_{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    if arm == "plain" or plan["runner"] == "trl":
        if arm == "advised":
            cfg = cfg.replace(threads=plan["threads"])
        rec = run(cfg.replace(out=str(folder)), command=command)
        res = rec.results
        seconds, acc = res["rl_seconds"], res["accuracy_after"]
    else:
        curve = {"task": cfg.task, "every": cfg.rl_steps, "problems": cfg.eval_problems,
                 "max_new_tokens": cfg.eval_max_new_tokens, "batch_size": cfg.eval_batch_size}
        res = run_mode(plan["mode"], cfg, folder, devices=plan["threads"], importance=False, curve=curve,
                       correction=correction, command=command,
                       prediction={"note": "the advised arm: its prediction is the page's prediction.json"})
        curve_rec = (res.get("glue") or {}).get("curve") or {}
        if not curve_rec.get("points"):
            raise RlmLabError(f"arm advised: the run recorded no held-out curve ({folder})")
        # trainer.train()'s wall time, as plain's rl_seconds, less the curve's two evaluations (plain runs none)
        seconds, acc = res["train_seconds"] - curve_rec["eval_seconds"], curve_rec["points"][-1]["accuracy"]
    if not seconds or seconds <= 0:
        raise RlmLabError(f"arm {arm}: no training seconds in {folder}")
    return {"steps_per_s": cfg.rl_steps / seconds, "accuracy": acc, "rl_seconds": seconds, "seed": seed,
            "correction": correction if arm == "advised" else None, "record": str(folder),
            "load_average_end": load_average(2)}


# ---- the verdict -------------------------------------------------------------------------------
def verdict(results: dict, goal: float = GOAL) -> dict:
    """The word from a protocol record's results (arm A = advised, B = plain): the paired speed-up (steps per
    second, A / B) with its interval, the same for whole-process wall time, the accuracies and their paired
    difference, and ``met`` / ``not met`` / ``undecided`` (module docstring)."""
    rows = results["repeats"]
    pairs = sorted({r["pair"] for r in rows})
    by = {(r["pair"], r["name"]): r for r in rows}
    missing = [p for p in pairs if (p, "advised") not in by or (p, "plain") not in by]
    if missing:
        raise RlmLabError(f"verdict: pair {missing[0]} lacks an arm")
    a = [by[(p, "advised")]["report"] for p in pairs]
    b = [by[(p, "plain")]["report"] for p in pairs]
    speed = ratio_interval([x["steps_per_s"] for x in a], [x["steps_per_s"] for x in b])
    wall = ratio_interval([by[(p, "plain")]["wall_s"] for p in pairs], [by[(p, "advised")]["wall_s"] for p in pairs])
    # accuracy: one paired difference per RL seed (pairs of one seed train the same run again: deterministic
    # repeats of one run, not independent samples of the accuracy; a record without seeds trained seed 0)
    by_seed: dict = {}
    for x, y in zip(a, b):
        by_seed.setdefault(x.get("seed", 0), []).append(x["accuracy"] - y["accuracy"])
    diff = mean_interval([sum(d) / len(d) for d in by_seed.values()])
    goal_word = at_least_word(speed, goal)
    acc_word = sign_word(diff)
    if goal_word == "not met" or acc_word == "lower":
        word = "not met"
    elif goal_word == "met" and acc_word != "lower":
        word = "met"
    else:
        word = "undecided"
    return {"n": len(pairs), "goal": goal, "speedup": _iv(speed), "wall_speedup": _iv(wall),
            "accuracy": {"advised": [x["accuracy"] for x in a], "plain": [x["accuracy"] for x in b],
                         "seeds": sorted(by_seed),
                         "difference": _iv(diff), "word": acc_word},
            "goal_word": goal_word, "word": word}


def _iv(iv) -> dict:
    return {"estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "method": iv.method, "text": iv.text()}


# ---- reading the committed record --------------------------------------------------------------
def latest(size: str = "cpu", root=None) -> dict | None:
    """``{"prediction", "verdict", "record", "load"}`` of the newest finished measurement under
    ``<root>/ch01_advised`` (default the committed records), None when there is none."""
    base = Path(root or reference_root(size)) / RECORDS
    pred_file = base / "prediction.json"
    if not pred_file.is_file():
        return None
    prediction = json.loads(pred_file.read_text())
    found = []
    for d in sorted((p for p in base.iterdir() if p.is_dir() and p.name[:1].isdigit()), reverse=True):
        try:
            rec = RunRecord.load(d)
        except RlmLabError:
            continue
        if not (d / "verdict.json").is_file():
            continue
        loads = [r["load_before"]["per_core"] for r in rec.results["repeats"]]
        found.append({"verdict": json.loads((d / "verdict.json").read_text()), "record": f"{RECORDS}/{d.name}",
                      "load": {"min": min(loads), "max": max(loads),
                               "gate_timeouts": rec.results.get("gate_timeouts", 0)},
                      "arms": rec.config["arms"]["A"]["command"][3:]})
    if not found:
        return {"prediction": prediction, "verdict": None, "record": None, "load": None, "earlier": []}
    return {"prediction": prediction, **found[0], "earlier": found[1:]}


# the numbers the page glues, read from the results ledger (``rlm_lab.ledger``, ``ch01.advised.*``): glue name ->
# (ledger id, format, scale); ``tests/test_ledger_glue.py`` checks each glued text against its entry
LEDGER_GLUE = {
    "ch01_advised_predicted": ("ch01.advised.predicted_speedup", "{:.2f}", 1.0),
    "ch01_advised_measured": ("ch01.advised.speedup", "{:.2f}", 1.0),
    "ch01_advised_wall": ("ch01.advised.wall_speedup", "{:.2f}", 1.0),
    "ch01_advised_acc_advised": ("ch01.advised.accuracy.advised", "{:.3f}", 1.0),
    "ch01_advised_acc_plain": ("ch01.advised.accuracy.plain", "{:.3f}", 1.0),
    "ch01_advised_acc_diff": ("ch01.advised.accuracy_difference", "{:+.1f}", 100.0),
}


def ledger_values(entries) -> dict:
    """The glued values :data:`LEDGER_GLUE` names, from the ledger ``entries`` (``rlm_lab.ledger.build``)."""
    return ledger_glue(entries, LEDGER_GLUE)


def section(size: str = "cpu", entries=(), root=None) -> tuple[str, dict]:
    """The page's text (the pick, what was applied and what not, predicted beside measured) and its glued values
    ``ch01_advised_*``. The numbers are the results ledger's (``entries``: ``rlm_lab.ledger.build(size)``, whose
    ``ch01.advised.*`` entries read :func:`latest`); the plan's words are read from the prediction ("not measured
    yet" where there is no record)."""
    got = latest(size, root)
    keys = ("pick", "profile", "predicted", "measured", "n", "verdict", "goal", "wall", "acc_advised", "acc_plain",
            "acc_diff", "acc_word", "load", "record", "method")
    if got is None:
        return "no prediction committed yet", dict.fromkeys((f"ch01_advised_{k}" for k in keys), "n/a")
    d = {e.id: e for e in entries}
    led = {k[len("ch01_advised_"):]: v for k, v in ledger_values(entries).items()}
    plan = got["prediction"]["apply"]
    origin = got["prediction"].get("profile_origin") or {}
    whose = "this machine's in-situ profile" if origin.get("this_machine") else "another machine's profile"
    lines = [f"advisor's pick: {plan['applied']['placement']} in mode {plan['applied']['mode']} "
             f"(eta {plan['applied']['eta']}); run as chapter 6's {plan['mode']} on {plan['threads']} cores"]
    lines += [f"not applied: {k}: {why}" for k, why in plan["not_applied"].items()]
    step = {a: d.get(f"ch01.advised.predicted_step.{a}") for a in ("plain", "advised")}
    ms = {a: "n/a" if e is None else f"{1e3 * e.value:.1f}" for a, e in step.items()}
    lines.append(f"predicted ({got['prediction']['profile']}, {whose}): plain {ms['plain']} ms/step, advised "
                 f"{ms['advised']} ms/step, speed-up {led['predicted']}x")
    vals = {"pick": f"{plan['applied']['placement']}, {plan['applied']['mode']}", "profile": whose,
            "predicted": led["predicted"], "goal": f"{GOAL:g}"}
    sp, diff = d.get("ch01.advised.speedup"), d.get("ch01.advised.accuracy_difference")
    if got["verdict"] is None or sp is None:
        lines.append("measured: not yet")
        return "\n".join(lines), {f"ch01_advised_{k}": vals.get(k, "n/a") for k in keys}
    vals |= {k: led[k] for k in ("measured", "wall", "acc_advised", "acc_plain", "acc_diff")}
    vals |= {"n": str(sp.n), "verdict": sp.verdict, "method": sp.method, "acc_word": diff.verdict,
             "load": sp.load.replace("-", " to "), "record": sp.records[0]}
    lines.append(f"measured ({vals['record']}, {sp.n} pairs, load per core {vals['load']}): steps/s advised / plain "
                 f"{vals['measured']} ({sp.method}); whole process {vals['wall']}; accuracy advised "
                 f"{vals['acc_advised']}, plain {vals['acc_plain']}, difference {vals['acc_diff']} points "
                 f"({diff.verdict}); goal {GOAL:g}x: {sp.verdict}")
    for e in got["earlier"]:
        old = d.get(f"ch01.advised.{e['record'].rsplit('/', 1)[-1]}.speedup")
        lines.append(f"earlier ({e['record']}, {_options(e['arms'])}): {entry_text(old)}, "
                     f"{'n/a' if old is None else old.verdict}")
    return "\n".join(lines), {f"ch01_advised_{k}": vals.get(k, "n/a") for k in keys}


def _options(argv) -> str:
    """The arm options of a measurement's advised command (before the options existed: the plan's, seed 0)."""
    argv = list(argv)
    if "--seed" not in argv:
        return "seed 0 in every pair, the prediction plan's correction"
    i = argv.index("--seed")
    return " ".join(argv[i:])


# ---- the command -------------------------------------------------------------------------------
def _profile():
    """This machine's profile (:func:`rlm_lab.insitu.this_machine.default_profile`: cached, or calibrated in situ
    behind its load gate); where the calibration is refused (a busy machine), the chapters' committed in-situ
    profile, its origin saying it is another machine's and why it was used."""
    try:
        return this_machine.default_profile(say=lambda s: print(s, file=sys.stderr))
    except RlmLabError as e:
        print(f"rlm-lab: {e}; predicting with {INSITU_PROFILE} instead", file=sys.stderr)
        return INSITU_PROFILE, this_machine.origin(INSITU_PROFILE) | {"used_because": str(e)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 1 advised",
                                 description="chapter 1's workload: the advisor's pick against plain TRL")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None, help="root of the records (default _build/runs/<size>)")
    ap.add_argument("--predict", action="store_true", help="write <out>/ch01_advised/prediction.json (before any run)")
    ap.add_argument("--measure", action="store_true", help="run the protocol: advised against plain")
    ap.add_argument("--pairs", type=int, default=None, help="paired repeats (default: the size's protocol_repeats)")
    ap.add_argument("--arm", default=None, help="one run of one arm (what the protocol's children run)")
    ap.add_argument("--seed", default="0", help="RL seed of --arm; with --measure, 'pair' gives pair i seed i")
    ap.add_argument("--correction", default="plan", help="the advised arm's off-policy correction: plan (the "
                                                         "prediction's), none, or a TRL importance-sampling mode")
    a = ap.parse_args(argv)
    size = check_size(a.size)
    base = Path(a.out or runs_root(size)) / RECORDS
    pred_file = base / "prediction.json"

    def work():
        if a.predict:
            if pred_file.exists():
                raise RlmLabError(f"{pred_file} exists: a prediction is made once, before its measurement")
            profile, origin = _profile()
            atomic_write_json(pred_file, predict(size, profile, origin))
            print(f"prediction written to {pred_file}")
            return 0
        if not pred_file.is_file():
            raise RlmLabError(f"{pred_file}: no prediction; run --predict first (it is made before the measurement)")
        plan = json.loads(pred_file.read_text())["apply"]
        if a.arm:
            if not a.seed.isdigit():
                raise RlmLabError(f"--seed {a.seed!r}: an RL seed is an integer >= 0")
            return run_arm(a.arm, size, base / "runs", plan, command=sys.argv, seed=int(a.seed),
                           correction=a.correction)
        if not a.measure:
            ap.error("say --predict, --measure or --arm")
        cmd = [*step_argv(1, "advised"), "--size", size, "--out", str(base.parent), "--seed", "{pair}" if a.seed == "pair" else a.seed, "--correction", a.correction]
        folder = base / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        res = compare(Arm("advised", cmd + ["--arm", "advised"]), Arm("plain", cmd + ["--arm", "plain"]), "steps_per_s",
                      folder, size=size, repeats=a.pairs, higher_is_better=True)
        v = verdict(res)
        atomic_write_json(folder / "verdict.json", v | {"prediction_file": f"{RECORDS}/prediction.json"})
        print(f"advised / plain: {v['speedup']['text']} (goal {GOAL:g}x: {v['goal_word']}); accuracy "
              f"difference {v['accuracy']['difference']['text']}; verdict {v['word']} ({res['dir']})")
        return 0

    return child_main(work, lambda out: print(f"{a.arm}: {out['steps_per_s']:.2f} steps/s, accuracy "
                                              f"{out['accuracy']:.3f} -> {out['record']}"))
