"""Chapter 5's runs: GRPO and PPO under each placement on this machine, predicted first, then measured.

- :func:`predict` -- ``rlm_lab.cost.placement.predict_placement`` with the committed CPU profile on the
  workload of :func:`workload`, made *before* the run and stored in its record;
- :func:`measure` -- one run per placement of :mod:`.cases` into a new folder ``<root>/ch05_<key>/<UTC time>``;
  :func:`latest` reads the newest completed one back; :func:`reference_arm` is one repeat of one placement
  for ``rlm-lab reference --chapter 5``;
- :func:`measure_reshard`, :func:`measure_hybrid`, :func:`measure_lora_accuracy`, :func:`measure_lora_memory` --
  the hybrid engine's reshard and GRPO run (the mechanism: :mod:`rlm_lab.placement.hybrid`), LoRA's accuracy
  and its memory with a reference model (beta > 0);
- :func:`predicted_memory`, :func:`gpu_outlook` -- the cost model's memory of a record's placement, and a
  cluster by prediction only.

``rlm-lab place`` (:mod:`.cli`) is the command; :mod:`.sync_calibration` the weight-sync calibration.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from ...cost.hardware import CPU_PROFILE as PROFILE  # $RLM_CPU_PROFILE: e.g. a reference window's in-situ profile
from ...cost.placement import predict_placement
from ...cost.placement_spec import Cluster, get_placement, placement_from_dict
from ...cost.run_input import from_run
from ...cost.workload import ResponseLengths, Workload, algorithm
from ...errors import RlmLabError
from ...host import load_average
from ...models import load
from ...placement.hybrid import check_hybrid, run_hybrid
from ...placement.reshard import measure as reshard
from ...placement.runtime import LORA, RaySession, _sft_checkpoint, algo_roles, check_placement, run_placement
from ...record import RunRecord
from ...sizes import get
from ...tasks import parse_task
from ...train.config import from_dict
from ...train.evaluate import evaluate, test_rows
from .cases import KEYS, LORA_LR, cluster, configs, placements, run_config, run_config_preset_steps

PROMPT_LEN = 6  # "99+99=" is the longest prompt; TRL left-pads a batch to its longest


def workload(cfg):
    """The cost model's workload for ``cfg`` (:func:`rlm_lab.cost.run_input.from_run`: response lengths at
    ``max_completion_length``, the prediction being made before the run)."""
    return from_run(cfg, PROMPT_LEN)[1]


GPU_PROFILE = "h100-sxm"  # gpu size until the lent GPU has a calibrated profile of its own


def predict(placement, cfg, profile: str | None = None) -> dict:
    """The placement predictor's numbers for ``placement`` (plain JSON, stored in the run record)."""
    profile = profile or (PROFILE if placement.sets[0].kind == "cpu" else GPU_PROFILE)

    lora = {"rank": LORA["r"], "targets": tuple(LORA["target_modules"])} if placement.lora else None
    alg, wl = from_run(cfg, PROMPT_LEN)  # the runtime's PPO scores with the rule-based verifier: no reward model
    pp = predict_placement(placement, cfg.model, alg, wl, profile,
                           cluster(placement.devices, placement.sets[0].kind), lora=lora)
    return {"profile": profile, "step_s": pp.step_s, "sync_s": pp.sync_s, "sync_bytes": pp.sync_bytes,
            "reshard_bytes": pp.reshard_bytes, "phases": {k: v[0] for k, v in pp.phases.items()},
            "sets": {s.name: {"busy_s": s.busy_s, "stages": {str(k): v for k, v in s.stages.items()}}
                     for s in pp.sets},
            "reason": pp.reason(), "made": _now()}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def measure(size: str, root: str | Path, keys=KEYS, session=None, **overrides) -> dict:
    """Predict, then run, each placement of ``keys``; one new record folder per run. Returns key -> results."""
    cfgs, chosen = configs(size, keys, **overrides)
    own = session is None
    session = session or RaySession(num_cpus=max(p.devices for p in chosen.values()))
    out = {}
    try:
        for key in keys:
            prediction = predict(chosen[key], cfgs[key])  # before the run
            folder = Path(root) / f"ch05_{key}" / _now()
            out[key] = run_placement(chosen[key], cfgs[key], folder, session=session, prediction=prediction)
            out[key]["dir"] = str(folder)
    finally:
        if own:
            session.close()
    return out


def predict_arm(arm: str, size: str, profile: str) -> float:
    """The predicted step of one placement of ``rlm-lab reference --chapter 5`` from ``profile`` (the window's)."""
    cfgs, chosen = configs(size, (arm,))
    return predict(chosen[arm], cfgs[arm], profile)["step_s"]


def reference_arm(arm: str, size: str, out) -> dict:
    """One repeat of one placement for ``rlm-lab reference --chapter 5`` (:data:`.cases.REFERENCES`): predicted,
    then run on a local Ray of its own (this process is a fresh one); ``{"step_s": median step after the
    first, "record": its folder}``."""
    res = measure(size, out, (arm,))[arm]
    return {"step_s": res["step_seconds_median"], "record": res["dir"]}


def latest(root: str | Path, key: str):
    """The newest completed record under ``<root>/ch05_<key>/`` (folders are UTC-time names)."""
    base = Path(root) / f"ch05_{key}"
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            return RunRecord.load(d)
        except RlmLabError:
            continue
    raise RlmLabError(f"no completed run under {base}; run `rlm-lab place --size cpu --out {root}`")


def gpu_outlook(devices=(8, 16, 64), model: str = "large", profile: str = "h100-sxm") -> list[dict]:
    """By prediction only: one synchronous GRPO step (64 prompts x 8, 256 + 1024 tokens, bf16) colocated
    against disaggregated with a quarter, half and three quarters of the GPUs generating."""
    wl = Workload(prompts=64, group_size=8, prompt_len=256, response=ResponseLengths("fixed", length=1024),
                  micro_batch=8, gen_batch=512, precision="bf16")
    alg = algorithm("grpo", 0)
    rows = []
    for n in devices:
        c = Cluster(n, "gpu")
        options = [("colocated", {})] + [("disaggregated", {"rollout_devices": g}) for g in (n // 4, n // 2, 3 * n // 4)]
        for name, kw in options:
            p = get_placement(name, c, alg, **kw)
            pp = predict_placement(p, model, alg, wl, profile, c)
            rows.append({"gpus": n, "placement": p.describe(), "step_s": pp.step_s if pp.fits else None,
                         "sync_s": pp.sync_s, "reason": pp.reason() if pp.fits else pp.memory_error()})
    return rows


def measure_reshard(size: str, root: str | Path, world: int = 2, command=None):
    """The hybrid engine's reshard (``rlm_lab.placement.reshard``) on ``world`` gloo ranks, recorded in a new
    folder ``<root>/ch05_hybrid_reshard/<UTC time>``; returns the record."""
    folder = Path(root) / "ch05_hybrid_reshard" / _now()
    model = get(size).reshard_model  # the size registry
    with RunRecord(folder, {"model": model, "world": world, "gen_tp": 1, "zero": 3, "size": size}, command) as rec:
        rec.update(load_average_start=load_average(2))
        res = reshard(model, world)
        rec.update(**res, load_average_end=load_average(2))
    return RunRecord.load(folder)


def measure_lora_accuracy(size: str, root: str | Path, session=None) -> dict:
    """Full fine-tuning against LoRA, both disaggregated, the size's full GRPO run (``rl_steps`` of the preset),
    greedy held-out accuracy after training; records in ``<root>/ch05_accuracy_{full,lora}/<UTC time>``.
    The accuracy before RL (the shared SFT start) is evaluated here and stored in both records."""
    base = run_config(size, rl_steps=run_config_preset_steps(size))
    runs = {"full": (base, placements(base)["disaggregated"]),
            "lora": (base.replace(rl_lr=LORA_LR), placements(base)["disaggregated_lora"])}
    model, tok = load(str(_sft_checkpoint(base)))
    task = parse_task(base.task)
    before = evaluate(model, tok, task, test_rows(task, base.eval_problems), base.eval_max_new_tokens,
                      base.eval_batch_size)["accuracy"]
    own = session is None
    session = session or RaySession(num_cpus=2)
    out = {}
    try:
        for key, (cfg, p) in runs.items():
            folder = Path(root) / f"ch05_accuracy_{key}" / _now()
            res = run_placement(p, cfg, folder, session=session, prediction=predict(p, cfg), evaluate=True,
                                extra_results={"accuracy_before": before})
            out[key] = {**res, "dir": str(folder)}
    finally:
        if own:
            session.close()
    return out


def measure_lora_memory(size: str, root: str | Path, model: str = "small", steps: int = 3, beta: float = 0.04,
                        session=None) -> dict:
    """Memory with a KL term (``beta > 0``): full fine-tuning holds a separate reference model, LoRA none (the
    reference is the base with its adapter disabled: TRL's GRPOTrainer with ``peft_config``). Both colocated
    on every core, a larger zoo model (``model``) so that the model states stand out of the runtime's RSS,
    no SFT warm start (memory does not depend on the weights' values), ``steps`` steps. Records in
    ``<root>/ch05_memory_{full,lora}/<UTC time>``: the trainer's peak RSS, the tracer's per-stage peaks and
    the state counted from the live objects (:func:`rlm_lab.placement.workers.state_bytes`)."""
    cfg = run_config(size, model=model, sft_steps=0, beta=beta, rl_steps=steps)
    algo = algo_roles(cfg)  # the reference role stays on the actor's set; with LoRA it is the adapter-less base
    runs = {"full": get_placement("colocated", cluster(), algo),
            "lora": get_placement("colocated", cluster(), algo, lora=True)}
    own = session is None
    session = session or RaySession(num_cpus=2)
    out = {}
    try:
        for key, p in runs.items():
            folder = Path(root) / f"ch05_memory_{key}" / _now()
            c = cfg.replace(rl_lr=LORA_LR) if p.lora else cfg
            out[key] = {**run_placement(p, c, folder, session=session, prediction=predict(p, c)), "dir": str(folder)}
    finally:
        if own:
            session.close()
    return out


def predicted_memory(record, profile: str | None = None) -> dict:
    """The cost model's memory per device of the record's (single-set) placement, from its config alone:
    set name -> ``MemoryBreakdown.to_dict()`` (weights, gradients, optimizer, ...)."""
    cfg = from_dict(record.config["run"])
    p = placement_from_dict(record.config["placement"])
    alg, wl = from_run(cfg, PROMPT_LEN)
    lora = {"rank": LORA["r"], "targets": tuple(LORA["target_modules"])} if p.lora else None
    pp = predict_placement(p, cfg.model, alg, wl, profile or PROFILE, cluster(p.devices), lora=lora)
    return {s.name: s.memory.to_dict() for s in pp.sets}


def measure_hybrid(size: str, root, steps: int | None = None, session=None, command=None, timeout_s: float = 120.0,
                   key: str = "hybrid", **overrides):
    """Predict, then run, the hybrid placement of the size's GRPO run (chapter 5's config and SFT start, or
    ``overrides`` of it: ``key="hybrid_memory", **MEMORY_RUN``) into a new folder ``<root>/ch05_<key>/<UTC
    time>``; bad input is one error before Ray starts. Returns the results (plus ``dir``)."""
    cfg = run_config(size, **{**overrides, **({"rl_steps": steps} if steps else {})})
    if cfg.size == "gpu":
        raise RlmLabError("the hybrid run is measured on CPU ranks (gloo); use --size smoke or cpu")
    p = get_placement("hybrid", cluster(2), algo_roles(cfg))
    check_placement(p, cfg)
    check_hybrid(p, cfg)
    prediction = predict(p, cfg)  # before the run
    folder = Path(root) / f"ch05_{key}" / _now()
    res = run_hybrid(p, cfg, folder, session=session, prediction=prediction, command=command, timeout_s=timeout_s)
    return {**res, "dir": str(folder)}
