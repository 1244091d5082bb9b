"""Chapter 7's techniques as arms of the measurement protocol (``rlm-lab reference --chapter 7``).

Each technique is one comparison of two arms, the technique switched on (arm A) and off (arm B), each repeat a
fresh process (:func:`reference_arm`) that builds the size's model and data exactly as :mod:`.run` does
(:func:`rlm_lab.chapters.ch07_long_tail.run._setup`: same seed, same rows), runs the arm's workload once untimed
(its shapes allocate) and once timed. The metric is ``seconds``, lower is better, so the ratio A / B below 1 is
the technique's gain (the page's "speed-up" is its inverse):

================  ================  ==============  =====================================================
technique         A (on)            B (off)         the timed workload
================  ================  ==============  =====================================================
tail_batching     ``tail_batched``  ``mixed``       the rounds of :func:`rlm_lab.longtail.techniques.tail_rounds`
fusion            ``fused``         ``after``       generate + score each sample (RLHFuse, arXiv 2409.13221)
packing           ``packed``        ``padded``      forward + backward of the same micro-batches
overprovision     ``early``         ``full``        the median step of ``op_steps`` steps (n of n' kept)
================  ================  ==============  =====================================================

Dispatch is left out: on one machine its workers run one after another (a simulation, :func:`.run.dispatch`), so
a fresh process measures the same sequential decode under both policies' shares. Dynamic sampling times nothing.

:func:`predict_arm` is the chapter's prediction of one arm's seconds (:class:`.predict.Predictor`, the roofline of
:mod:`rlm_lab.cost`) from a given hardware profile: ``rlm-lab reference`` asks it with the window's in-situ
profile before the first repeat.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from pathlib import Path

from ...errors import RlmLabError
from ...host import load_average
from ...longtail import engine
from ...longtail import techniques as T
from ...models import build_model, char_tokenizer
from ...record import RunRecord
from ...sizes import check_size
from ...tasks import correctness_reward, parse_task
from ...tasks.chain import answer_length, predicted_length
from .cases import params
from .predict import Predictor
from .run import _setup, _width

# technique -> (arm with it, arm without it)
ARMS = {"tail_batching": ("tail_batched", "mixed"), "fusion": ("fused", "after"), "packing": ("packed", "padded"),
        "overprovision": ("early", "full")}
_TECHNIQUE = {arm: t for t, arms in ARMS.items() for arm in arms}


def technique_of(arm: str) -> str:
    if arm not in _TECHNIQUE:
        raise RlmLabError(f"chapter 7 has no arm {arm!r}; choose from {', '.join(_TECHNIQUE)}")
    return _TECHNIQUE[arm]


def _lengths(rows):
    return [answer_length(r) for r in rows]


def _tail_batching(p, pr, model, tok, task, rows, seed):
    sub = rows[:p["rounds_n"]]
    lengths = _lengths(sub)
    plan = T.tail_rounds(lengths, p["batch"], [predicted_length(r["prompt"]) for r in sub], p["tail_fraction"])
    prompts = engine.encode(tok, [r["prompt"] for r in sub])

    def run(name):
        return lambda: sum(engine.generate(model, [prompts[i] for i in r], [lengths[i] for i in r],
                                           seed=seed).seconds for r in plan[name])
    w = _width(prompts)
    return ({a: run(a) for a in ARMS["tail_batching"]},
            {a: pr.rounds(w, plan["plan"][a]) for a in ARMS["tail_batching"]})


def _fusion(p, pr, model, tok, task, rows, seed):
    import torch

    ref, _ = build_model(p["model"], seed=seed + 1)  # the reference model, scored per sample (as .run.fusion)
    ref.eval()
    reward = correctness_reward(task)
    sub = rows[:p["fusion_n"]]
    lengths = _lengths(sub)
    prompts = engine.encode(tok, [r["prompt"] for r in sub])

    def score(ids):
        with torch.no_grad():
            ref(ids.unsqueeze(0)).logits.log_softmax(-1)
        reward([tok.decode(ids.tolist(), skip_special_tokens=True)], answer=[sub[0]["answer"]])

    pred = pr.fusion(_width(prompts), lengths)
    return ({a: (lambda fused=(a == "fused"): T.fused_scoring(model, prompts, lengths, score, fused=fused,
                                                               seed=seed)["wall_s"]) for a in ARMS["fusion"]},
            {a: pred[a] for a in ARMS["fusion"]})


def _packing(p, pr, model, tok, task, rows, seed):
    sub = rows[:p["pack_n"]]
    seqs = [ids + engine.encode(tok, [r["answer"]])[0] + [engine.EOS]
            for ids, r in zip(engine.encode(tok, [r["prompt"] for r in sub]), sub)]
    chunks = [seqs[i:i + p["micro"]] for i in range(0, len(seqs), p["micro"])]
    pred = pr.packing([[len(s) for s in c] for c in chunks], [])

    def run(how):
        def go():
            model.train()
            try:
                return sum(T.train_forward_backward(model, b, how) for b in chunks)
            finally:
                model.eval()
                model.zero_grad(set_to_none=True)
        return go
    return {a: run(a) for a in ARMS["packing"]}, {a: pred[f"{a}_s"] for a in ARMS["packing"]}


def _overprovision(p, pr, model, tok, task, rows, seed):
    lengths = _lengths(rows)
    prompts = engine.encode(tok, [r["prompt"] for r in rows])
    pred = pr.overprovision(_width(prompts), lengths, p["n"], p["n_prime"])

    def full():  # n fresh prompts per step, every step waits for its longest (as .run.overprovision's baseline)
        return statistics.median(
            engine.generate(model, prompts[s * p["n"]:(s + 1) * p["n"]], lengths[s * p["n"]:(s + 1) * p["n"]],
                            seed=seed + s).seconds for s in range(p["op_steps"]))

    def early():  # a fresh over-provisioner per call: the same steps every time
        op = T.OverProvisioner(prompts, lengths, p["n"], p["n_prime"])
        return statistics.median(op.step(model, seed + s)["seconds"] for s in range(p["op_steps"]))
    return {"full": full, "early": early}, {"full": pred["full_s"], "early": pred["early_s"]}


_PREPARE = {"tail_batching": _tail_batching, "fusion": _fusion, "packing": _packing, "overprovision": _overprovision}


def _workload(arm: str, size: str, profile=None, setup: bool = True):
    """(the arm's timed function or None, its predicted seconds) at ``size``; ``setup=False``: the prediction only
    (no model is built: rows and tokenizer only)."""
    technique = technique_of(arm)
    size = check_size(size)
    if size == "gpu":
        raise RlmLabError("chapter 7 measures on CPU only so far; use --size smoke or --size cpu")
    p = params(size)
    pr = Predictor(size, p["model"], profile)
    if setup:
        model, tok, task, rows = _setup(p, 0)
    else:
        model, tok, task = None, char_tokenizer(), parse_task(p["task"])
        rows, _ = task.split(p["pool"], 1, 0)
    fns, pred = _PREPARE[technique](p, pr, model, tok, task, rows, 0)
    return (fns[arm] if setup else None), pred[arm]


def predict_arm(arm: str, size: str, profile) -> float:
    """The predicted seconds of one arm's workload from ``profile`` (the window's in-situ profile)."""
    return _workload(arm, size, profile, setup=False)[1]


def reference_arm(arm: str, size: str, out) -> dict:
    """One repeat of one arm (this process is a fresh one): the workload once untimed, once timed; its record
    under ``<out>/ch07_<arm>/<UTC time>``; ``{"seconds": ..., "record": folder}``."""
    folder = Path(out) / f"ch07_{arm}" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    with RunRecord(folder, {"size": size, "arm": arm, "technique": technique_of(arm)},
                   command=f"rlm_lab.chapters.ch07_long_tail.reference.reference_arm({arm!r}, {size!r})") as rec:
        run, predicted = _workload(arm, size)
        first = run()
        seconds = run()
        rec.update(seconds=seconds, first_s=first, predicted_s=predicted, load_average=load_average(2))
    return {"seconds": seconds, "record": str(folder)}
