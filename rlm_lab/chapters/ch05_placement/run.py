"""Chapter 5's experiment: GRPO under each placement on this machine, predicted first, then measured.

- :func:`run_config` -- the GRPO run every placement shares (the size's preset, fewer steps: a placement
  changes *when* things happen, not what is learned, so a few dozen steps time it).
- :func:`placements` -- the placements measured: ``colocated`` (one set of all cores),
  ``disaggregated`` (1 core rollout, the rest training; weights by a gloo broadcast) and
  ``disaggregated`` with the naive object-store sync (``ray.put`` of the weights), the baseline.
- :func:`ppo_placements` -- PPO colocated and ``split`` (critic on its own core), keys :data:`PPO_KEYS`;
  :func:`configs` pairs every key with its run config (GRPO's or PPO's);
- :func:`measure_lora_memory` -- full fine-tuning against LoRA with a reference model (beta > 0): memory;
- :func:`predict` -- ``rlm_lab.cost.placement.predict_placement`` with the committed CPU profile, made
  *before* the run and stored in its record.
- :func:`measure` -- one run per placement into a new folder ``<root>/ch05_<key>/<UTC time>``.
- :func:`comparison` -- predicted against measured step time and sync bytes, per placement.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from ...errors import RlmLabError
from ...sizes import get
from ...cost.placement_spec import Cluster, get_placement
from ...host import load_average

PROFILE = "cpu-2core-epyc"
KEYS = ("colocated", "disaggregated", "disaggregated_object_store", "disaggregated_lora")
PPO_KEYS = ("ppo_colocated", "ppo_split")  # PPO (our TRL subclass): critic beside the actor, or on its own core
ALL_KEYS = KEYS + PPO_KEYS


def run_config(size: str, algo: str = "grpo", **overrides):
    from ...train.config import make_config

    fields = dict(rl_steps=get(size).placement_steps, disable_tqdm=True, eval_every=0)
    fields.update(overrides)
    return make_config(algo, size, **fields)


def cluster(devices: int = 2, kind: str = "cpu") -> Cluster:
    return Cluster(devices, kind)


def size_cluster(cfg) -> Cluster:
    """The cluster a size's placements are laid on: the 2 cores of this machine at smoke and cpu size; at
    gpu size the GPUs torch sees (at least 2, so that a disaggregated placement exists to ask for)."""
    if cfg.size != "gpu":
        return cluster()
    from ...placement.resources import local_gpus

    return cluster(max(2, local_gpus()), "gpu")


def placements(cfg, devices: int | None = None) -> dict:
    """key -> Placement for the keys of :data:`KEYS` on ``devices`` CPU cores (default: :func:`size_cluster`)."""
    from ...placement.runtime import algo_roles

    algo = algo_roles(cfg)
    c = cluster(devices) if devices else size_cluster(cfg)
    return {
        "colocated": get_placement("colocated", c, algo),
        "disaggregated": get_placement("disaggregated", c, algo, rollout_devices=1, sync="collective"),
        "disaggregated_object_store": get_placement("disaggregated", c, algo, rollout_devices=1,
                                                    sync="object_store"),
        # LoRA (PEFT through TRL's peft_config): only the adapters are trained, so only they are synced
        "disaggregated_lora": get_placement("disaggregated", c, algo, rollout_devices=1, sync="collective",
                                            lora=True),
    }


def ppo_placements(cfg, devices: int | None = None) -> dict:
    """key -> Placement for :data:`PPO_KEYS`: PPO colocated on every core, and ``split`` (NeMo-Aligner style):
    actor + reference (+ TRL's generation) on ``devices - 1`` cores, the critic on one (the reward is the
    rule-based verifier, no model, so the value set holds the critic alone)."""
    from ...placement.runtime import algo_roles

    algo = algo_roles(cfg)
    c = cluster(devices) if devices else size_cluster(cfg)
    return {"ppo_colocated": get_placement("colocated", c, algo),
            "ppo_split": get_placement("split", c, algo, value_devices=1)}


def configs(size: str, keys, **overrides) -> tuple[dict, dict]:
    """(key -> RunConfig, key -> Placement) for ``keys`` (GRPO's and PPO's); an unknown key is one error."""
    unknown_keys = [k for k in keys if k not in ALL_KEYS]
    if unknown_keys:
        raise RlmLabError(f"unknown placement(s) {', '.join(unknown_keys)}; choose from {', '.join(ALL_KEYS)}")
    grpo = run_config(size, **overrides)
    ppo = run_config(size, "ppo", **overrides) if any(k in PPO_KEYS for k in keys) else None
    chosen = {**placements(grpo), **(ppo_placements(ppo) if ppo is not None else {})}
    return ({k: ppo if k in PPO_KEYS else grpo for k in keys}, {k: chosen[k] for k in keys})


def workload(cfg):
    """The cost model's workload for ``cfg``. Prediction made before the run, so the response length is
    not known: it is taken as ``max_completion_length`` (TRL's static ``generate`` runs until the longest
    row of the batch ends, and at temperature 1 some row of a batch usually runs to the limit)."""
    from ...cost.workload import ResponseLengths, Workload

    prompt_len = 6  # "99+99=" is the longest prompt; TRL left-pads a batch to its longest
    return Workload(prompts=cfg.batch_size // cfg.num_generations, group_size=cfg.num_generations,
                    prompt_len=prompt_len, response=ResponseLengths("fixed", length=cfg.max_completion_length),
                    micro_batch=cfg.batch_size, gen_batch=cfg.batch_size, precision="fp32", padding="batch",
                    engine="static", logits="completion", weight_sync="none")


GPU_PROFILE = "h100-sxm"  # gpu size until the lent GPU has a calibrated profile of its own


def predict(placement, cfg, profile: str | None = None) -> dict:
    """The placement predictor's numbers for ``placement`` (plain JSON, stored in the run record)."""
    profile = profile or (PROFILE if placement.sets[0].kind == "cpu" else GPU_PROFILE)
    from ...cost.placement import predict_placement
    from ...cost.workload import algorithm

    from ...placement.runtime import LORA

    lora = {"rank": LORA["r"], "targets": tuple(LORA["target_modules"])} if placement.lora else None
    import dataclasses

    alg = algorithm(cfg.algo, cfg.beta)
    if cfg.algo == "ppo":  # the runtime's PPO scores with the rule-based verifier: no reward model to price
        alg = dataclasses.replace(alg, models=tuple(m for m in alg.models if m != "reward"))
    pp = predict_placement(placement, cfg.model, alg, workload(cfg), profile,
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
    from ...placement.runtime import RaySession, run_placement

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


def latest(root: str | Path, key: str):
    """The newest completed record under ``<root>/ch05_<key>/`` (folders are UTC-time names)."""
    from ...record import RunRecord

    base = Path(root) / f"ch05_{key}"
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            return RunRecord.load(d)
        except RlmLabError:
            continue
    raise RlmLabError(f"no completed run under {base}; run `rlm-lab place --size cpu --out {root}`")


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


def verdict(row: dict, goal: float = GOAL) -> str:
    """One line per placement from the live numbers: error against the goal, sync bytes against the formula."""
    err = row["rel_error"]
    met = "met" if err is not None and abs(err) <= goal else "not met"
    sync = ""
    if row["sync_bytes_measured"]:
        shipped = {row["sync_bytes_predicted"], row["sync_bytes_measured"]}
        if row["sync_bytes_counted"] is not None:  # the object store is no collective: nothing to count
            shipped.add(row["sync_bytes_counted"])
        same = len(shipped) == 1
        sync = f"; sync {row['sync_bytes_measured']:,} B/step, {'equal to' if same else 'NOT equal to'} the formula"
    return (f"{row['placement']}: measured {row['measured_s']:.3f} s/step, predicted {row['predicted_s']:.3f} s "
            f"({100 * err:+.1f} %: goal <= {100 * goal:.0f} % {met}){sync}")


def representative_window(durations: list[float], steps: int) -> int:
    """The first index of the ``steps`` consecutive steps whose total is closest to ``steps`` x the median
    step (the earliest such run of steps on a tie): the steps a timeline shows beside a table of median step
    times, so that a warm-up or a final checkpoint's step does not stand for the run."""
    import statistics

    if len(durations) <= steps:
        return 0
    target = steps * statistics.median(durations)
    sums = [sum(durations[i:i + steps]) for i in range(len(durations) - steps + 1)]
    return min(range(len(sums)), key=lambda i: (abs(sums[i] - target), i))


def timeline(record, steps: int = 3, title: str | None = None):
    """The merged Gantt (every actor of the run) of the record's trace.json, over ``steps`` consecutive steps
    chosen by :func:`representative_window` (their numbers are in the title)."""
    import json

    from ...trace_merge import gantt

    trace = json.loads((Path(record.dir) / "trace.json").read_text())
    spans = sorted((e for e in trace["traceEvents"] if e.get("cat") == "step"), key=lambda e: e["ts"])
    window, shown = None, ""
    if len(spans) > steps:
        i = representative_window([e["dur"] for e in spans], steps)
        sel = spans[i:i + steps]
        window = (sel[0]["ts"] / 1e6, (sel[-1]["ts"] + sel[-1]["dur"]) / 1e6)
        shown = f" (steps {i + 1}-{i + steps} of {len(spans)}: the {steps} closest to the median step)"
    return gantt(trace, title=(title or record.results.get("describe") or "") + shown, window=window)


def gpu_outlook(devices=(8, 16, 64), model: str = "large", profile: str = "h100-sxm") -> list[dict]:
    """By prediction only: one synchronous GRPO step (64 prompts x 8, 256 + 1024 tokens, bf16) colocated
    against disaggregated with a quarter, half and three quarters of the GPUs generating."""
    from ...cost.placement import predict_placement
    from ...cost.workload import ResponseLengths, Workload, algorithm

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


def formula_sync_bytes(record) -> int:
    """The formula for one sync of the record's run, computed from a fresh model: the bytes of every
    parameter (full fine-tuning) or of the LoRA adapters only (PEFT's trainable parameters)."""
    from ...models import load

    model = load(record.config["run"]["model"])[0]
    if record.config["placement"].get("lora"):
        from peft import LoraConfig, get_peft_model

        from ...placement.runtime import LORA

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


def measure_reshard(size: str, root: str | Path, world: int = 2, command=None):
    """The hybrid engine's reshard (``rlm_lab.placement.reshard``) on ``world`` gloo ranks, recorded in a new
    folder ``<root>/ch05_hybrid_reshard/<UTC time>``; returns the record."""
    from ...record import RunRecord
    from ...placement.reshard import measure as reshard

    folder = Path(root) / "ch05_hybrid_reshard" / _now()
    model = get(size).reshard_model  # the size registry
    with RunRecord(folder, {"model": model, "world": world, "gen_tp": 1, "zero": 3, "size": size}, command) as rec:
        rec.update(load_average_start=load_average(2))
        res = reshard(model, world)
        rec.update(**res, load_average_end=load_average(2))
    return RunRecord.load(folder)


LORA_LR = 1e-3  # adapters train at a higher learning rate than full fine-tuning (1e-4); the usual PEFT practice


def measure_lora_accuracy(size: str, root: str | Path, session=None) -> dict:
    """Full fine-tuning against LoRA, both disaggregated, the size's full GRPO run (``rl_steps`` of the preset),
    greedy held-out accuracy after training; records in ``<root>/ch05_accuracy_{full,lora}/<UTC time>``.
    The accuracy before RL (the shared SFT start) is evaluated here and stored in both records."""
    from ...models import load
    from ...tasks import parse_task
    from ...train.evaluate import evaluate, test_rows
    from ...placement.runtime import RaySession, _sft_checkpoint, run_placement

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


def run_config_preset_steps(size: str) -> int:
    from ...train.presets import preset

    return preset("grpo", size)["rl_steps"]


def measure_lora_memory(size: str, root: str | Path, model: str = "small", steps: int = 3, beta: float = 0.04,
                        session=None) -> dict:
    """Memory with a KL term (``beta > 0``): full fine-tuning holds a separate reference model, LoRA none (the
    reference is the base with its adapter disabled: TRL's GRPOTrainer with ``peft_config``). Both colocated
    on every core, a larger zoo model (``model``) so that the model states stand out of the runtime's RSS,
    no SFT warm start (memory does not depend on the weights' values), ``steps`` steps. Records in
    ``<root>/ch05_memory_{full,lora}/<UTC time>``: the trainer's peak RSS, the tracer's per-stage peaks and
    the state counted from the live objects (:func:`rlm_lab.placement.workers.state_bytes`)."""
    from ...placement.runtime import RaySession, algo_roles, run_placement

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
    import dataclasses

    from ...cost.placement import predict_placement
    from ...cost.workload import algorithm
    from ...train.config import from_dict
    from ...placement.runtime import LORA
    from ...cost.placement_spec import placement_from_dict

    cfg = from_dict(record.config["run"])
    p = placement_from_dict(record.config["placement"])
    alg = algorithm(cfg.algo, cfg.beta)
    if cfg.algo == "ppo":
        alg = dataclasses.replace(alg, models=tuple(m for m in alg.models if m != "reward"))
    lora = {"rank": LORA["r"], "targets": tuple(LORA["target_modules"])} if p.lora else None
    pp = predict_placement(p, cfg.model, alg, workload(cfg), profile or PROFILE, cluster(p.devices), lora=lora)
    return {s.name: s.memory.to_dict() for s in pp.sets}
