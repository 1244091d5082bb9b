"""``rlm-lab predict --from FRAMEWORK:CONFIG`` and ``rlm-lab advise --from FRAMEWORK:CONFIG`` (the dispatch the two
commands' ``run`` functions hand over to when ``--from`` is given).

With ``--from`` the framework's config is the whole input: ``--model`` and ``--hardware`` replace what the import
chose (no framework config names its GPU), and ``predict``'s ``--prompts``, ``--group-size``, ``--prompt-len``,
``--response-len`` and ``--precision`` replace the imported batch shape; every other input flag is refused, in one
line, because the config already sets it.
"""

from __future__ import annotations

import json

from ...cost.cli import run_workload, validated_line
from ...errors import RlmLabError
from . import import_from
from .advice import advise_imported, format_advice
from .common import format_import_prediction, predict_imported

WORKLOAD_FLAGS = {"prompts": "prompts", "group_size": "group_size", "prompt_len": "prompt_len",
                  "precision": "precision"}   # and run_flags: --micro-batch, --zero, --tp, --gen-tp, ...


def _refuse(args, allowed: set, command: str) -> None:
    if getattr(args, "config", None):
        raise RlmLabError(f"{command}: give either a predict config or --from, not both")
    for name, flag in (("algorithm", "--algorithm"), ("beta", "--beta"), ("lora", "--lora"),
                       ("placement", "--placement"), ("devices", "--devices"), ("kind", "--kind"),
                       ("trl_defaults", "--trl-defaults")):
        if name not in allowed and getattr(args, name, None) not in (None, False):
            raise RlmLabError(f"{command} --from sets {flag.lstrip('-').replace('-', ' ')} from the framework's "
                              f"config; drop {flag} (or edit the config)")


def _import(args):
    imp = import_from(args.from_, model=getattr(args, "model", None), hardware=getattr(args, "hardware", None))
    wl = imp.config.setdefault("workload", {})
    for name, key in WORKLOAD_FLAGS.items():
        if getattr(args, name, None) is not None:
            wl[key] = getattr(args, name)
            if key == "prompt_len":
                imp.assumed = [a for a in imp.assumed if not a.startswith(("prompts of", "every prompt"))]
                imp.prompt_cap = None
    if getattr(args, "response_len", None) is not None:
        wl["response"] = args.response_len
        imp.assumed = [a for a in imp.assumed if "runs to" not in a and "at its cap" not in a]
        imp.assumed.append(f"every response {args.response_len} tokens (--response-len)")
    run_flags(args, imp)
    cl = imp.config.setdefault("cluster", {})
    for name, key in (("memory_gib", "memory_per_device_gib"), ("link_gbps", "link_gbps")):
        if getattr(args, name, None) is not None:
            cl[key] = getattr(args, name)
    return imp


def run_flags(args, imp) -> None:
    """--micro-batch, --zero, --gradient-checkpointing, --offload, --tp, --gen-tp replace what the config set, each
    said in one assumed line."""
    wl = imp.config["workload"]
    before = dict(wl)
    run_workload(args, wl)
    wl.pop("zero_stage", None)                 # the placement's sets carry the ZeRO stage of an import
    for key in ("micro_batch", "gradient_checkpointing", "offload"):
        if wl.get(key) != before.get(key):
            imp.assumed.append(f"{key} {wl[key]} (flag) instead of the config's {before.get(key)}")
    p = imp.config["placement"]
    trainer = [s for s in p["sets"] if any(where == s["name"] and r != "rollout" for r, where in p["roles"].items())]
    rollout = next(s for s in p["sets"] if s["name"] == p["roles"]["rollout"])
    zero, tp, gen_tp = (getattr(args, a, None) for a in ("zero", "tp", "gen_tp"))
    for s in trainer:
        if zero is not None:
            s["zero"] = zero
        if tp is not None:
            pp = s.get("pp", 1)
            if s["devices"] % (tp * pp):
                raise RlmLabError(f"--tp {tp}{f' x its pp {pp}' if pp > 1 else ''} does not divide set "
                                  f"{s['name']!r}'s {s['devices']} GPUs")
            s.update(tp=tp, dp=s["devices"] // (tp * pp))
    if gen_tp is not None:
        if rollout["devices"] % gen_tp:
            raise RlmLabError(f"--gen-tp {gen_tp} does not divide set {rollout['name']!r}'s {rollout['devices']} GPUs")
        if rollout in trainer:
            rollout["gen_tp"] = gen_tp if gen_tp > 1 else 0
        else:
            rollout.update(tp=gen_tp, dp=rollout["devices"] // gen_tp)
    if p.get("reshard") and any((s["zero"] != 3 or s.get("tp", 1) != 1) and s.get("pp", 1) == 1
                                for s in trainer if s is rollout):
        p.update(reshard=False, name="colocated")
        rollout["gen_tp"] = 0
        imp.assumed.append("the flags leave no ZeRO-3 or pipeline-parallel trainer to reshard: generation priced at "
                           "the training layout")
    for flag, v in (("--zero", zero), ("--tp", tp), ("--gen-tp", gen_tp)):
        if v is not None:
            imp.assumed.append(f"{flag} {v} (flag) replaces the config's layout")


def _imported_dict(imp) -> dict:
    return {"framework": imp.framework, "source": imp.source, "config": imp.config, "mode": imp.mode,
            "eta": imp.eta, "used": imp.used, "ignored": imp.ignored, "unknown": imp.unknown, "assumed": imp.assumed}


def run_predict(args) -> int:
    _refuse(args, set(), "predict")
    imp = _import(args)
    ip = predict_imported(imp)
    if args.json:
        print(json.dumps({"imported": _imported_dict(imp), "prediction": ip.row(),
                          "placement": ip.placement.to_dict(), "derived": ip.derived}, indent=2, default=str))
    else:
        print("\n".join(imp.keys_report() + [format_import_prediction(ip), validated_line(imp.config)]))
    return 0 if ip.fits else 1


def run_advise(args) -> int:
    _refuse(args, set(), "advise")
    if not isinstance(args.top, int) or args.top < 1:
        raise RlmLabError(f"--top must be >= 1, got {args.top}")
    if not isinstance(args.max_tp, int) or args.max_tp < 1:
        raise RlmLabError(f"--max-tp must be >= 1, got {args.max_tp}")
    imp = _import(args)
    adv = advise_imported(imp, args.max_tp)
    if args.json:
        best = adv.best
        print(json.dumps({"imported": _imported_dict(imp), "baseline": adv.baseline.row(),
                          "candidates": [{"change": c.change, "kind": c.kind} | c.prediction.row()
                                         for c in adv.ranked[:args.top]],
                          "advice": None if best is None else {"change": best.change, "kind": best.kind}
                          | best.prediction.row()}, indent=2, default=str))
    else:
        counts = imp.keys_report()[0]
        lines = [counts] + [f"  unknown {k}" for k in imp.unknown] + [format_advice(adv, args.top)]
        lines += [f"assumed: {a}" for a in imp.assumed + adv.baseline.derived]
        print("\n".join(lines))
    return 0 if adv.baseline.fits or adv.best is not None else 1
