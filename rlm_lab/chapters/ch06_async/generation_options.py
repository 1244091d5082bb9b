"""What transformers offers for generation on a CPU, timed on chapter 6's rollout: one worker's ``generate`` of a
GRPO batch (the campaign's prompts, ``num_generations`` completions each, up to ``max_completion_length`` tokens,
sampled at temperature 1 from the SFT start) under each option of :data:`OPTIONS`:

``dynamic``         TRL's own: ``DynamicCache``, SDPA attention, no compilation (TRL builds its
                    ``GenerationConfig`` with ``disable_compile=True``; grpo_trainer.py).
``eager``           the same with eager attention (``attn_implementation="eager"``).
``static``          a pre-allocated ``StaticCache`` (``cache_implementation="static"``,
                    https://huggingface.co/docs/transformers/main/en/kv_cache).
``static_compiled`` the static cache with the decode step compiled by ``torch.compile`` (transformers compiles
                    ``forward`` itself when the cache is compilable and ``compile_config`` allows every device;
                    https://huggingface.co/docs/transformers/main/en/llm_optims).
``batch2x``         TRL's own settings, two GRPO batches in one ``generate`` call (the batch shape an
                    asynchronous worker could use when two requests are queued).

Measured in one process, options interleaved round by round (the first call of each is its warm-up: the compile
happens there), ``reps`` rounds, each round on fresh prompts (the next of the training prompts, the same for every
option), as a training run's steps meet them: a first exploration that repeated one batch found the compiled
option 22 % faster, and the pick then ran at 0.55x plain TRL in training (record 20261204T030723Z, the goal's
interrupted first pair), where every step's new prompt lengths met the compiled step; the figure is completion tokens per second (tokens up to and including the first
EOS, what TRL trains on). Exploration for chapter 6's throughput goal, not a prediction: the options worth it are
then measured end to end under :mod:`rlm_lab.protocol`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from ...errors import RlmLabError, unknown
from ...host import load_average
from ...models import load
from ...placement.rollout import RolloutEngine
from ...placement.runtime import _sft_checkpoint
from ...record import RunRecord, reference_root
from ...tasks import ensure_data, parse_task
from .cases import campaign_config

OPTIONS = ("dynamic", "eager", "static", "static_compiled", "batch2x")
# the options a rollout worker can be given (GenerationConfig fields and ``compile``, ``TRLRolloutFunc.generation``),
# as those settings; ``eager`` (the model's attention, not a generation field) and ``batch2x`` (two queued requests in
# one call, which the glue does not make) are measured for the chapter, not picked
SETTINGS = {"dynamic": {}, "static": {"cache_implementation": "static"},
            "static_compiled": {"cache_implementation": "static", "compile": True}}
RECORDS = "ch06_generation_options"  # the exploration's records under data/runs/<size>/


def choose(options: dict) -> tuple[str, dict, str]:
    """The rule, fixed before the exploration it reads was run: among :data:`SETTINGS`, the option with the highest
    median tokens/s, kept only when its slowest round beats the fastest round of ``dynamic`` (TRL's own, the
    default); otherwise ``dynamic``. Returns ``(option, settings, reason)``; ``options`` is :func:`measure`'s
    ``"options"`` (each with its ``rounds``)."""
    if "dynamic" not in options or not options["dynamic"].get("rounds"):
        raise RlmLabError("choose: the exploration has no rounds of 'dynamic' (TRL's own), the baseline of the rule")
    tps = lambda o: [r["tokens_per_s"] for r in options[o]["rounds"]]  # noqa: E731
    cands = [o for o in SETTINGS if o in options and options[o].get("rounds")]
    best = max(cands, key=lambda o: statistics.median(tps(o)))
    if best != "dynamic" and min(tps(best)) > max(tps("dynamic")):
        return best, dict(SETTINGS[best]), (f"{best}: every round ({min(tps(best)):.0f} tokens/s at the slowest) "
                                            f"above dynamic's fastest ({max(tps('dynamic')):.0f})")
    return "dynamic", {}, (f"dynamic (TRL's own): {best} is not faster in every round "
                           f"({min(tps(best)):.0f} tokens/s at its slowest, dynamic's fastest {max(tps('dynamic')):.0f})"
                           if best != "dynamic" else "dynamic (TRL's own): the fastest median")


def chosen(size: str, root=None) -> tuple[dict, str]:
    """``(settings, why)`` from the newest completed exploration record of ``size`` (under
    ``data/runs/<size>/ch06_generation_options`` or ``root``); ``({}, why)`` (TRL's own) when there is none."""
    folder = Path(root) if root is not None else reference_root(size) / RECORDS
    rec = None
    for d in sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True) if folder.is_dir() else []:
        try:
            r = RunRecord.load(d)
        except RlmLabError:
            continue
        if r.data.get("status") == "completed" and "options" in r.results:
            rec = r
            break
    if rec is None:
        return {}, f"TRL's own generation settings (no exploration committed under {folder.name}/ at {size} size)"
    name, settings, reason = choose(rec.results["options"])
    return settings, f"{reason} (exploration {Path(rec.dir).name})"


def _engine(option: str, model_path: str, gen: dict, pad: int, eos):
    model, _ = load(model_path)
    if option == "eager":
        model.set_attn_implementation("eager")
    g = dict(gen)
    if option in ("static", "static_compiled"):
        g["cache_implementation"] = "static"
    # the worker's own switch (RolloutEngine(compile=True)), so the exploration measures what a pick would run
    engine = RolloutEngine(model, g, pad, eos, compile=option == "static_compiled")
    return engine


def measure(size: str = "cpu", options=OPTIONS, reps: int = 3, seed: int = 0, say=print) -> dict:
    """``{option: {"tokens_per_s": median, "rounds": [...], "first_s": warm-up seconds}}``."""
    import torch

    bad = [o for o in options if o not in OPTIONS]
    if bad:
        raise unknown("generation option", bad[0], OPTIONS)
    if reps < 1:
        raise RlmLabError(f"reps must be at least 1, got {reps}")
    cfg = campaign_config(size, seed)
    path = str(_sft_checkpoint(cfg))
    _, tok = load(path)
    rows = ensure_data(parse_task(cfg.task))["train"]
    n = cfg.batch_size // cfg.num_generations
    if len(rows) < n * (reps + 1):
        raise RlmLabError(f"the task has {len(rows)} training prompts, fewer than {reps + 1} rounds of {n}")

    def batch_of(r):  # round r's prompts: fresh ones every round, as a training run's steps see them (their
        # lengths, so the shapes a compiled decode step meets, change from round to round); every option the same
        prompts = [x["prompt"] for x in rows[r * n:(r + 1) * n] for _ in range(cfg.num_generations)]
        return tok(prompts, add_special_tokens=False)["input_ids"]
    gen = {"max_new_tokens": cfg.max_completion_length, "do_sample": True, "temperature": cfg.temperature,
           "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    engines = {o: _engine(o, path, gen, tok.pad_token_id, tok.eos_token_id) for o in options}
    out = {o: {"rounds": []} for o in options}
    torch.set_num_threads(torch.get_num_threads())
    for r in range(reps + 1):  # round 0: warm-up (compilation)
        ids = batch_of(r)
        for o, eng in engines.items():
            batch = ids * 2 if o == "batch2x" else ids
            t0 = time.perf_counter()
            res = eng.generate(batch, seed * 1000 + r)
            dt = round(time.perf_counter() - t0, 6)  # the record's seconds; its rate is derived from them
            tokens = sum(len(c) for c in res["completion_ids"])
            if r == 0:
                out[o]["first_s"] = round(dt, 3)
            else:
                out[o]["rounds"].append({"seconds": dt, "tokens": tokens, "tokens_per_s": tokens / dt})
            say(f"round {r} {o}: {tokens} tokens in {dt:.3f} s")
    for o in options:
        out[o]["tokens_per_s"] = statistics.median(x["tokens_per_s"] for x in out[o]["rounds"]) if reps else None
    return {"options": out, "threads": torch.get_num_threads(), "batch": n * cfg.num_generations, "model": cfg.model,
            "prompts": "fresh every round (rounds of the training prompts in order)",
            "max_new_tokens": cfg.max_completion_length}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 generation-options")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--options", nargs="+", default=list(OPTIONS))
    ap.add_argument("--out", default=None, help="a record folder (default: print only)")
    a = ap.parse_args(argv)
    try:
        if a.out:
            with RunRecord(a.out, {"size": a.size, "reps": a.reps, "options": a.options}) as rec:
                rec.update(load_average_start=load_average(2))
                res = measure(a.size, a.options, a.reps)
                rec.update(**res, load_average_end=load_average(2))
        else:
            res = measure(a.size, a.options, a.reps)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    for o, v in res["options"].items():
        print(f"{o}: {v['tokens_per_s']:.0f} completion tokens/s (first call {v['first_s']:.2f} s)")
    return 0
