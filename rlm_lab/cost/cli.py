"""``rlm-lab predict [CONFIG.yaml] [flags]``: the per-stage table of one predicted RL iteration.

Config (YAML), every key optional; flags override it::

    model: micro                # zoo name or path to a model config.json (configs/models/)
    algorithm: grpo             # ppo | grpo | rloo | reinforce_pp | dapo
    hardware: cpu-2core-epyc    # profile name in data/hardware/ or a JSON path
    beta: 0.04                  # 0 drops the reference model
    critic: micro               # PPO only (default: the actor's backbone)
    reward_model: micro         # PPO only
    workload: {prompts: 8, group_size: 4, prompt_len: 8, response: {kind: uniform, low: 4, high: 16}}
    lora: {rank: 8, targets: [q_proj, v_proj]}   # train LoRA adapters (cost/lora.py)
    placement: disaggregated    # or {name: disaggregated, rollout_devices: 2} or {sets: [...], roles: {...}}
    cluster: {devices: 8, kind: gpu, memory_per_device_gib: 80, link_gbps: 50, devices_per_node: 8, network_gbps: 50}
    mode: async                 # sync | one_step_off | stale | async (modes.py); with a placement
    eta: 4                      # staleness bound of stale / async (async: omitted = unbounded)
    assume: {eta_F: 0.5, engine_step_s: 0.001}   # override named assumptions (assumed.ASSUMPTIONS)

Every ``assumed:`` line names a constant of the hardware profile that is not a measurement, and the step
time without it. The default hardware of ``predict`` is this machine's profile, measured in situ (the entry point resolves it:
:mod:`rlm_lab.insitu.this_machine`, which calibrates a machine that has none; ``--no-calibrate`` refuses that);
called without the entry point, and for ``advise``, it is the committed profile of the chapters' machine
(``DEFAULTS``). A report names the profile it used, says when it is the default and whose machine it is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from ..errors import RlmLabError
from ..models.zoo import ZOO
from ..records.files import json_text
from .assumed import apply_assumptions, assumption_lines, fitted_assumptions, parse_assume
from .hardware import CPU_PROFILE, load_profile
from .lora import lora_params
from .mode_memory import mode_memory, mode_memory_line
from .modes import check_mode
from .placement import predict_placement
from .placement_config import format_placement, predict_placement_from_config
from .predict import predict
from .spec import model_spec
from .table9 import table9_rows
from .units import _bytes, _count, _seconds, _si  # noqa: F401 - the report formats
from .validated import validated_error
from .workload import Workload, offline_group_size

CONFIG_KEYS = ("model", "algorithm", "hardware", "beta", "critic", "reward_model", "workload", "brent_p", "lora",
               "placement", "cluster", "mode", "eta", "assume")
DEFAULTS = {"model": "micro", "algorithm": "grpo", "hardware": CPU_PROFILE}


def hardware_line(cfg: dict, given: bool, origin: dict | None = None) -> str:
    """One line naming the hardware profile a report used, whether it is the default (issue 21 item 5) and,
    with ``origin`` (``rlm_lab.insitu.this_machine.origin``, given by the entry point), whose machine it is."""
    prof = load_profile(cfg["hardware"])
    if origin is not None:
        k = origin.get("machine_key") or {}
        whose = ("no machine's measurement" if origin["method"] in ("datasheet", "fitted") else "this machine's"
                 if origin["this_machine"] else f"another machine's ({k.get('cpu_model')}, {k.get('cores')} cores)")
        return (f"hardware: {prof.name} [{prof.kind}] ({'given' if given else 'the default'}: {whose}, "
                f"{origin['method']}; --hardware NAME for another, e.g. h100-sxm, h200, b200)")
    return (f"hardware: {prof.name} [{prof.kind}] " + ("(given)" if given else
            "(the default: the committed profile of the machine the chapters' runs were made on; --hardware NAME "
            "for another, e.g. h100-sxm, h200, b200)"))


def load_config(path) -> dict:
    """Read a predict config; a folder, binary or malformed YAML, a model config.json and unknown keys are named."""
    p = Path(path)
    if p.is_dir():
        raise RlmLabError(f"config {path} is a folder; pass a predict config YAML (see configs/predict/)")
    if not p.is_file():
        raise RlmLabError(f"config file {path} not found")
    try:
        cfg = yaml.safe_load(p.read_bytes().decode("utf-8")) or {}
    except UnicodeDecodeError as e:
        raise RlmLabError(f"config {path} is not a text file (byte {e.start} is not UTF-8)") from None
    except yaml.YAMLError as e:
        raise RlmLabError(f"config {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise RlmLabError(f"config {path} must be a mapping of {', '.join(CONFIG_KEYS)}")
    if "model_type" in cfg or "hidden_size" in cfg:
        raise RlmLabError(f"{path} is a model config (transformers config.json), not a predict config; "
                          f"pass it as --model {path}")
    bad = sorted(set(map(str, cfg)) - set(CONFIG_KEYS))
    if bad:
        raise RlmLabError(f"config {path}: unknown key(s) {', '.join(bad)}; known: {', '.join(CONFIG_KEYS)}")
    return cfg


def check_inputs(cfg: dict) -> None:
    """What the cost model cannot catch itself: a finite beta >= 0, no more devices than sequences, Brent's p."""
    beta = cfg.get("beta")
    if beta is not None and (isinstance(beta, bool) or not isinstance(beta, (int, float))
                             or not math.isfinite(beta) or beta < 0):
        raise RlmLabError(f"beta must be a finite number >= 0 (0 drops the reference model), got {beta!r}")

    wl = cfg.get("workload") or {}
    if isinstance(wl, dict) and any(k in wl for k in WORKLOAD_GIVEN):  # none given: refused as missing instead
        # an omitted field takes the Workload's default (8 prompts x 4), not 1
        b, g = (wl.get(k, Workload.__dataclass_fields__[k].default) for k in ("prompts", "group_size"))
        n = b * g if all(isinstance(v, int) for v in (b, g)) else None
        d = wl.get("devices", 1)
        if n is not None and isinstance(d, int) and not isinstance(d, bool) and d > n >= 1:
            raise RlmLabError(f"{d} devices for {n} sequences ({b} prompts x {g}): data parallelism needs at "
                              f"least one sequence per device")
    for key in ("model", "hardware", "critic", "reward_model"):
        v = cfg.get(key)
        if isinstance(v, str) and Path(v).is_file():
            try:
                text = Path(v).read_bytes().decode("utf-8")
            except UnicodeDecodeError as e:
                raise RlmLabError(f"{key} file {v} is not a text (JSON) file (byte {e.start} is not UTF-8)") from None
            try:
                data = json.loads(text)
            except ValueError:
                continue  # the loader names the file and the JSON error
            if not isinstance(data, dict):
                raise RlmLabError(f"{key} file {v} must hold a JSON object, got {type(data).__name__}")
    bp = cfg.get("brent_p", (1, 2, 4, 8))
    if not isinstance(bp, (list, tuple)) or not bp or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 1 for p in bp):
        raise RlmLabError(f"brent_p must be a list of processor counts >= 1, got {bp!r}")


def predict_from_config(cfg: dict):
    cfg = DEFAULTS | {k: v for k, v in cfg.items() if v is not None}
    return predict(cfg["model"], cfg["algorithm"], cfg.get("workload") or {},
                   apply_assumptions(cfg["hardware"], cfg.get("assume")),
                   critic=cfg.get("critic"), reward_model=cfg.get("reward_model"), beta=cfg.get("beta"),
                   lora=cfg.get("lora"))


def format_prediction(pred, brent_p=(1, 2, 4, 8)) -> str:
    """Text report: header, per-stage table, memory, W, D and Brent's bounds."""
    wl, prof = pred.workload, pred.profile
    lines = [f"prediction: {pred.algo.name} on {pred.spec.name} ({_count(pred.spec.params)} params), "
             f"n = {wl.prompts}x{wl.group_size} sequences, P = {wl.prompt_len}, {wl.precision}, "
             f"{wl.devices} device(s) of {prof.name} [{prof.kind}]"]
    if getattr(pred, "lora", None):
        lines.append(f"LoRA r={pred.lora.rank} on {', '.join(pred.lora.targets)}: "
                     f"{_count(lora_params(pred.spec, pred.lora))} trainable params (base frozen, no reference copy)")
    head = f"{'stage':<15}{'model':<11}{'FLOPs':>11}{'bytes':>11}{'memory':>11}{'time':>11}{'calls':>7}" \
           f"{'FLOP %':>8}{'time %':>8}"
    lines += [head, "-" * len(head)]
    for r in pred.table():
        t = "-" if r["seconds"] is None else _seconds(r["seconds"])
        ts = "-" if r["time_share"] is None else f"{100 * r['time_share']:.1f}"
        lines.append(f"{r['stage']:<15}{r['model']:<11}{_si(r['flops']):>11}{_bytes(r['bytes']):>11}"
                     f"{_bytes(r['memory_bytes']):>11}{t:>11}{r['calls']:>7}{100 * r['flop_share']:>8.1f}{ts:>8}")
    m = pred.memory
    lines.append(f"peak memory per device: {_bytes(m.total)} (weights {_bytes(m.weights)}, gradients "
                 f"{_bytes(m.gradients)}, optimizer {_bytes(m.optimizer)}, KV cache {_bytes(m.kv_cache)}, "
                 f"activations {_bytes(m.activations)}) of {_bytes(pred.capacity)}")
    if not pred.fits:
        lines.append(str(pred.memory_error()).replace("does not fit", "DOES NOT FIT", 1))
        return "\n".join(lines)
    lines.append(f"iteration time: {_seconds(pred.total_time)}")
    lines.append(f"work W = {_seconds(pred.work)} (device-seconds), depth D = {_seconds(pred.depth)}, "
                 f"W/D = {pred.work / pred.depth:.3g}; critical path: {' -> '.join(pred.critical_path())}")
    for p in brent_p:
        lo, hi = pred.brent(p)
        lines.append(f"  Brent p={p:<3} {_seconds(lo)} <= T_p <= {_seconds(hi)}")
    return "\n".join(lines)


def add_run_flags(p, tp: bool = True) -> None:
    """The flags that describe how a real run trains (predict and advise, with or without --from)."""
    p.add_argument("--micro-batch", type=int, help="sequences per GPU per forward/backward (default: a whole "
                                                   "mini-batch)")
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage of the trained models (3 = FSDP)")
    if tp:
        p.add_argument("--tp", type=int, help="training tensor-parallel size (a colocated set of --devices)")
        p.add_argument("--gen-tp", type=int, help="generation tensor-parallel size (the hybrid engine: ZeRO-3 "
                                                  "resharded into it)")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None,
                   help="recompute every decoder layer in the backward")
    p.add_argument("--offload", metavar="KINDS", help="comma-separated: params, optimizer, frozen, host_optimizer, sleep "
                                                      "(rlm_lab/cost/offload.py)")


def run_workload(args, wl: dict) -> dict:
    """--micro-batch, --zero, --gradient-checkpointing, --offload into a workload mapping."""
    for attr, key in (("micro_batch", "micro_batch"), ("zero", "zero_stage"),
                      ("gradient_checkpointing", "gradient_checkpointing")):
        if getattr(args, attr, None) is not None:
            wl[key] = getattr(args, attr)
    if getattr(args, "offload", None):
        wl["offload"] = [x.strip() for x in args.offload.split(",") if x.strip()]
    return wl


def shipped_model(name):
    """``--model qwen2.5-7b``: a model config shipped in configs/models/ by its short name (a zoo name or a path
    is left as it is)."""
    if not isinstance(name, str) or name in ZOO or Path(name).exists():
        return name
    p = Path(__file__).resolve().parents[2] / "configs" / "models" / f"{name}.config.json"
    return str(p) if p.is_file() else name


def layout_placement(args, cfg: dict) -> None:
    """--tp / --gen-tp: a one-set placement of --devices (colocated at tp, or the hybrid engine at gen-tp)."""
    tp, gen_tp = getattr(args, "tp", None), getattr(args, "gen_tp", None)
    if tp is None and gen_tp is None:
        return
    if cfg.get("placement") is not None and not isinstance(cfg["placement"], str):
        raise RlmLabError("--tp / --gen-tp describe a one-set layout; the config's placement mapping already sets it")
    if gen_tp is not None:
        if (tp or 1) != 1:
            raise RlmLabError(f"--gen-tp {gen_tp} reshards a ZeRO-3 (FSDP) trainer; training --tp {tp} cannot "
                              f"be resharded by the predictor: give one of them")
        cfg["placement"] = {"name": "hybrid", "gen_tp": gen_tp}
    else:
        cfg["placement"] = {"name": cfg.get("placement") or "colocated", "tp": tp} | (
            {"zero": args.zero} if getattr(args, "zero", None) is not None else {})
    wl = cfg.get("workload") or {}
    cfg.setdefault("cluster", {"devices": wl.get("devices", 1), "kind": "gpu"})


WORKLOAD_GIVEN = ("prompts", "group_size", "prompt_len", "response")


def require_workload(cfg: dict, command: str) -> None:
    """One rule, predict and advise alike: a missing workload is refused, naming the flags, for every model (a zoo
    toy too): neither tool prices a default workload (the toy one, 8 prompts x 4 with 8-token prompts, that the
    Python API's ``predict`` keeps for chapters 1-3, is no run's). A workload is given when a config's workload: or
    the flags set any of prompts, group_size, prompt_len, response."""
    wl = cfg.get("workload") or {}
    model_spec(cfg.get("resolved_model") or cfg.get("model") or DEFAULTS["model"])   # a bad model file is named first
    if isinstance(cfg.get("hardware"), str):
        load_profile(cfg["hardware"])                                                   # and an unknown profile
    if isinstance(wl, dict) and not any(k in wl for k in WORKLOAD_GIVEN):
        raise RlmLabError(f"{command} needs a workload for {cfg.get('model') or DEFAULTS['model']}: give a config "
                          f"with workload: or --prompts, --group-size, --prompt-len and --response-len; it prices no "
                          f"default workload")


def validated_line(cfg: dict) -> str:
    """The validated error band that applies to a prediction's regime: the published GPU-cluster validation for a
    GPU profile, none for a CPU one (chapters 2-3 compare CPU predictions with measurements case by case)."""
    if not load_profile(cfg.get("hardware") or DEFAULTS["hardware"]).overlap_overhead:   # placement_config's GPU test
        return ("validated error: none applies to a CPU profile's prediction (the published validation is of GPU "
                "clusters; chapters 2-3 compare CPU predictions with their measurements)")
    return validated_error()


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="predict the per-stage cost of one RL iteration",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", help="YAML config (see configs/predict/)")
    p.add_argument("--model", help="zoo name or path to a transformers config.json (e.g. configs/models/qwen2.5-7b.config.json)")
    p.add_argument("--algorithm", "--algo", dest="algorithm", help="ppo | grpo | rloo | reinforce_pp | dapo | dpo")
    p.add_argument("--hardware", help="hardware profile name or JSON path")
    p.add_argument("--beta", type=float, help="KL coefficient; 0 drops the reference model")
    p.add_argument("--critic", help="PPO's critic: a zoo name or config.json, or 'shared' (a value head on the actor's "
                                    "backbone: shared actor-critic)")
    p.add_argument("--prompts", type=int)
    p.add_argument("--group-size", type=int)
    p.add_argument("--prompt-len", type=int)
    p.add_argument("--response-len", type=int, help="fixed response length")
    p.add_argument("--devices", type=int)
    p.add_argument("--precision", help="fp32 | bf16-mixed | bf16")
    p.add_argument("--trl-defaults", action="store_true",
                   help="TRL's defaults kept: bf16 autocast (bf16=True; on CPU accelerate's autocast) and gradient "
                        "checkpointing (workload autocast / gradient_checkpointing)")
    p.add_argument("--lora", type=int, metavar="RANK", help="train LoRA adapters of this rank (q_proj, v_proj)")
    p.add_argument("--placement", help="colocated | disaggregated | split | hybrid: predict that placement")
    p.add_argument("--mode", help="execution mode of a placement: sync | one_step_off | stale | async (modes.py)")
    p.add_argument("--eta", type=int, help="staleness bound of --mode stale (default 2) or async (default unbounded)")
    p.add_argument("--assume", action="append", metavar="NAME=VALUE",
                   help="override a named assumption (eta_F, eta_A, eta_B, eta_N, eta_H, engine_step_s, network_alpha_s); "
                        "repeatable")
    p.add_argument("--fitted", action="store_true",
                   help="use the efficiencies fitted on the published calibration cases (data/published/fit.json) "
                        "instead of the datasheet profile's assumed ones; --assume still overrides one")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--no-calibrate", action="store_true",
                   help="without --hardware, never calibrate this machine in situ: use its cached or the chapters' "
                        "committed profile (said in one line)")
    p.add_argument("--table9", action="store_true",
                   help="with --placement: also the survey's Table 9 rows (stage fusion, asynchronous, combined) on "
                        "the placement's stage times (table9.py)")
    p.add_argument("--check-machine", action="store_true",
                   help="time a few-second check of this machine against the profile even when its machine key "
                        "matches (a calibrated profile of another key is always checked)")
    p.add_argument("--from", dest="from_", metavar="FRAMEWORK:CONFIG",
                   help="import a verl, openrlhf, trl, nemo-rl, areal or slime config (rlm_lab/frameworks/importers), e.g. "
                        "verl:run.yaml or openrlhf:\"--actor.num_gpus_per_node 8 ...\"")
    add_run_flags(p)
    p.set_defaults(func=run)


def mode_inputs(cfg: dict, args) -> None:
    """``--mode``, ``--eta`` and ``--assume`` into the config, checked before any work (one line each)."""
    for key in ("mode", "eta"):
        if getattr(args, key, None) is not None:
            cfg[key] = getattr(args, key)
    if getattr(args, "assume", None):
        cfg["assume"] = dict(cfg.get("assume") or {}) | parse_assume(args.assume)
    if getattr(args, "fitted", False):
        cfg["assume"] = fitted_assumptions(cfg.get("hardware") or DEFAULTS["hardware"]) | dict(cfg.get("assume") or {})
    if cfg.get("eta") is not None and cfg.get("mode") is None:
        raise RlmLabError(f"--eta {cfg['eta']} bounds the staleness of --mode stale or async; give the mode too")
    if cfg.get("mode") is not None:
        check_mode(cfg["mode"], cfg.get("eta"))
    if cfg.get("assume"):
        apply_assumptions(cfg.get("hardware") or DEFAULTS["hardware"], cfg["assume"])


def run(args) -> int:
    cfg = load_config(args.config) if args.config else {}
    for key in ("model", "algorithm", "hardware", "beta", "lora", "placement", "critic"):
        if getattr(args, key, None) is not None:
            cfg[key] = getattr(args, key)
    given_hw = cfg.get("hardware") is not None
    mode_inputs(cfg, args)
    if not isinstance(cfg.get("workload") or {}, dict):
        raise RlmLabError(f"config {args.config}: workload must be a mapping of workload fields, "
                          f"got {cfg['workload']!r}")
    wl = dict(cfg.get("workload") or {})
    for key in ("prompts", "group_size", "prompt_len", "devices", "precision"):
        if getattr(args, key) is not None:
            wl[key] = getattr(args, key)
    if args.response_len is not None:
        wl["response"] = {"kind": "fixed", "length": args.response_len}
    if args.trl_defaults:
        wl.update(autocast=True, gradient_checkpointing=True)

    cfg["workload"] = offline_group_size(cfg.get("algorithm"), run_workload(args, wl))
    given_model = cfg.get("model")
    if cfg.get("model") is not None:
        cfg["model"] = shipped_model(cfg["model"])
    layout_placement(args, cfg)
    check_inputs(cfg)
    if getattr(args, "table9", False) and cfg.get("placement") is None:
        raise RlmLabError("--table9 evaluates the survey's Table 9 on a placement's stage times: give --placement")
    if cfg.get("placement") is None and cfg.get("mode") not in (None, "sync"):
        raise RlmLabError(f"--mode {cfg['mode']} prices a placement: give one (--placement disaggregated, or "
                          f"placement: in the config); without one the step is a single synchronous set")
    if not any(k in cfg["workload"] for k in WORKLOAD_GIVEN):
        _dry_run(cfg)   # every other input is one line first (checked at the API's toy size, then thrown away)
    require_workload(cfg | {"model": given_model or DEFAULTS["model"], "resolved_model": cfg.get("model")}, "predict")
    origin = None
    if not given_hw and getattr(args, "default_profile", None):  # the entry point's: this machine, in situ
        _dry_run(cfg)  # bad input is one line before a calibration starts
        cfg["hardware"], origin = args.default_profile()
    # the entry point checks this profile's machine against this one after the prediction (rlm_lab.cli)
    args.profile_used = cfg.get("hardware") or DEFAULTS["hardware"]
    if origin is None and getattr(args, "origin_of", None):
        origin = args.origin_of(args.profile_used, fitted=bool(getattr(args, "fitted", False)))
    args.profile_origin = origin
    if cfg.get("placement") is not None:
        return _run_placement(DEFAULTS | {k: v for k, v in cfg.items() if v is not None}, args.json, given_hw, origin,
                              getattr(args, "table9", False))
    pred = predict_from_config(cfg)

    step = None
    if pred.fits:
        def step(prof):
            return predict(pred.spec, pred.algo, pred.workload, prof, critic=cfg.get("critic"),
                           reward_model=cfg.get("reward_model"), lora=pred.lora).total_time
    assumed = assumption_lines(pred.profile, step, engine=pred.workload.engine == "continuous")
    if args.json:
        print(json_text(pred.to_dict() | {"assumed": assumed} | ({"profile_origin": origin} if origin else {})))
    else:
        head, _, rest = format_prediction(pred, tuple(cfg.get("brent_p", (1, 2, 4, 8)))).partition("\n")
        hw = [] if given_hw and origin is None else [hardware_line(DEFAULTS | cfg, given_hw, origin)]
        print("\n".join([head] + hw + [rest] + assumed + [validated_line(cfg)]))
    return 0 if pred.fits else 1


def _dry_run(cfg: dict) -> None:
    """The prediction with the default profile, thrown away: every input the predictor checks is checked."""
    if cfg.get("placement") is None:
        predict_from_config(cfg)
    else:
        predict_placement_from_config(DEFAULTS | {k: v for k, v in cfg.items() if v is not None})


def _run_placement(cfg: dict, as_json: bool, given_hw: bool = True, origin: dict | None = None,
                   table9: bool = False) -> int:
    """``predict`` with a placement: per-set times, exposed sync and reshard, memory per set (placement.py)."""
    pp = predict_placement_from_config(cfg)
    step = None
    if pp.fits:
        def step(prof):
            return predict_placement(pp.placement, cfg["model"], pp.algo, pp.workload, prof,
                                     pp.cluster, critic=cfg.get("critic"),
                                     reward_model=cfg.get("reward_model"), lora=pp.lora, mode=pp.mode,
                                     eta=pp.eta).step_s
    assumed = [f"assumed: {a}" for a in pp.assumptions]
    assumed += assumption_lines(apply_assumptions(cfg["hardware"], cfg.get("assume")), step,
                                engine=pp.workload.engine == "continuous")

    extra = mode_memory(pp, pp.mode, cfg["model"])
    mem = [mode_memory_line(extra, pp.mode)] if any(m.shadow or m.reshard for m in extra.values()) else []
    rows = {}
    if table9 and pp.fits:
        rows = table9_rows(pp)
    if as_json:
        print(json_text(pp.to_dict() | {"assumed": assumed} | ({"profile_origin": origin} if origin else {})
                        | ({"table9_s": rows} if rows else {})
                        | {"mode_memory_bytes": {k: {"shadow": m.shadow, "reshard": m.reshard, "total": m.total,
                                                     "fits": m.fits} for k, m in extra.items()}}))
    else:
        head, _, rest = format_placement(pp).partition("\n")
        hw = [] if given_hw and origin is None else [hardware_line(cfg, given_hw, origin)]
        t9 = ["the survey's Table 9 on these stage times (each model on its own devices; table9.py): " +
              ", ".join(f"{k} {_seconds(v)}" for k, v in rows.items())] if rows else []
        print("\n".join([head] + hw + [rest] + t9 + mem + assumed + [validated_line(cfg)]))
    return 0 if pp.fits and all(m.fits for m in extra.values()) else 1
