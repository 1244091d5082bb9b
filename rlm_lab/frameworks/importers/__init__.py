"""``--from`` importers: a verl, OpenRLHF, TRL, NeMo-RL, AReaL or slime config turned into the predictor's run, placement
and mode (:mod:`.common`), one module per framework.

    imp = import_from("verl:configs/frameworks/verl/grpo-qwen2-7b-gsm8k.yaml")
    predict_imported(imp).step_s

:func:`example_predictions` predicts every config shipped under ``configs/frameworks/<framework>/`` (one row each:
framework, config, step time, critical stage, memory per device, fits), for chapter 8;
:func:`.same_workload.same_workload_predictions` one workload written in each framework's format under its default
placement and mode; :func:`.advice.advise_imported` the single change with the largest predicted gain.
"""

from __future__ import annotations

import importlib

from ...errors import RlmLabError
from .common import CONFIGS, MODEL_OVERRIDE, Imported, ImportPrediction, format_import_prediction, predict_imported  # noqa: F401
from .openrlhf import args_from_file

# registry id (as in rlm_lab.frameworks.registry) -> module; what follows "framework:" is a file, except OpenRLHF's
# command-line arguments
IMPORTERS = {"verl": "verl", "openrlhf": "openrlhf", "trl": "trl", "nemo-rl": "nemo_rl", "areal": "areal",
             "slime": "slime"}
SUFFIXES = {"verl": (".yaml", ".yml"), "trl": (".yaml", ".yml"), "nemo-rl": (".yaml", ".yml"),
            "areal": (".yaml", ".yml"), "openrlhf": (".args", ".sh", ".txt"), "slime": (".sh",)}


def parse_from(value: str) -> tuple[str, str]:
    """``"verl:FILE.yaml"`` -> ("verl", "FILE.yaml"); an unknown framework or an empty argument is one line."""
    if not isinstance(value, str) or ":" not in value:
        raise RlmLabError(f"--from needs FRAMEWORK:CONFIG (e.g. verl:run.yaml, openrlhf:\"--actor.num_gpus_per_node 8 "
                          f"...\"), got {value!r}; frameworks: {', '.join(IMPORTERS)}")
    fw, arg = value.split(":", 1)
    fw = fw.strip().lower().replace("_", "-")
    fw = {"nemo": "nemo-rl", "nemorl": "nemo-rl"}.get(fw, fw)
    if fw not in IMPORTERS:
        raise RlmLabError(f"--from {fw!r}: no importer; choose one of {', '.join(IMPORTERS)}")
    if not arg.strip():
        raise RlmLabError(f"--from {fw}: give the config after the colon ({fw}:CONFIG)")
    return fw, arg


def import_from(value: str, **overrides) -> Imported:
    """Import ``FRAMEWORK:CONFIG``; ``overrides`` (model, hardware) replace what the import chose."""
    fw, arg = parse_from(value)
    mod = importlib.import_module(f"{__name__}.{IMPORTERS[fw]}")
    token = MODEL_OVERRIDE.set(overrides.get("model"))
    try:                       # --model replaces the config's model before the config's model is checked
        imp = mod.import_config(arg)
    finally:
        MODEL_OVERRIDE.reset(token)
    for key in ("model", "hardware"):
        if overrides.get(key) is not None:
            if key == "hardware":
                imp.config[key] = overrides[key]
            imp.assumed = [a for a in imp.assumed if not a.startswith(f"{key} ")]
    return imp


def shipped_configs() -> list[tuple[str, str]]:
    """(framework, path) of every config under configs/frameworks/<framework>/ (options.txt is the schema)."""
    out = []
    for fw in IMPORTERS:
        folder = CONFIGS / fw
        for p in sorted(folder.glob("*")):
            if p.is_file() and p.name != "options.txt" and p.suffix in SUFFIXES[fw]:
                out.append((fw, str(p)))
    return out


def _spec(fw: str, path: str) -> str:
    if fw == "openrlhf":
        return f"{fw}:{args_from_file(path)}"
    return f"{fw}:{path}"


def example_predictions(hardware: str | None = None) -> list[dict]:
    """One row per shipped config: framework, config (path under configs/frameworks/), model, devices,
    placement, mode, eta, step_s (None when it does not fit), sync_step_s, critical stage, memory per device and
    capacity (bytes), fits, and how many keys were used / ignored / unknown. All predictions, nothing measured."""
    rows = []
    for fw, path in shipped_configs():
        imp = import_from(_spec(fw, path), hardware=hardware)
        row = predict_imported(imp).row()
        row["config"] = str(__import__("pathlib").Path(path).relative_to(CONFIGS.parents[1]))
        row["hardware"] = imp.config["hardware"]
        rows.append(row)
    return rows
