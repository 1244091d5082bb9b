"""Reading a verl run for :mod:`.verl`: a run script's trainer command (its Hydra overrides composed onto the trainer
main's config, :mod:`.hydra_compose`; nothing run), a YAML with a Hydra ``defaults:`` list (composed), or a partial
YAML of verl keys (read as it is, verl's defaults below)."""

from __future__ import annotations

from pathlib import Path

from ...errors import RlmLabError
from .bounded import read_text
from .common import flatten, load_yaml, resolve_refs
from .hydra_compose import VERL_TREE, compose
from .shell import commands

NAME = "verl"

# the trainer mains a run script may launch -> the Hydra config they compose (their @hydra.main config_name)
MAINS = {"verl.trainer.main_ppo": "ppo_trainer", "verl.trainer.main_ppo_sync": "ppo_trainer",
         "verl.experimental.fully_async_policy.fully_async_main": "fully_async_ppo_trainer",
         "verl.experimental.one_step_off_policy.main_ppo": "one_step_off_ppo_trainer"}
# what other verl entry points run: refused in one line naming it
NOT_TRAINING = {"verl.trainer.main_generation": "a generation (inference) run", "verl.trainer.main_generation_server":
                "a generation (inference) run", "verl.trainer.sft_trainer": "an SFT run (not RL)",
                "verl.trainer.fsdp_sft_trainer": "an SFT run (not RL)", "verl.trainer.sft_trainer_ray": "an SFT run (not RL)",
                "verl.trainer.main_eval": "an evaluation run", "verl.model_merger": "a checkpoint merge",
                "verl.trainer.main_distill": "a distillation run"}


def _from_script(text: str, path: str) -> tuple[dict, list, set, list]:
    """A run script's training command: the Hydra overrides after ``-m MAIN`` (shell variables expanded, nothing
    run), composed onto MAIN's config; returns (flat config, keys the script wrote, null keys, notes)."""
    for words, _env in commands(text, f"verl script {path}"):
        mods = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-m"]
        mods += [w[:-3].replace("/", ".").lstrip(".") for w in words if w.endswith(".py")]
        main = next((m for m in mods if m in MAINS or m in NOT_TRAINING or m.startswith("verl.")), None)
        if main is None:
            continue
        if main in NOT_TRAINING or main not in MAINS:
            what = NOT_TRAINING.get(main, "not one of verl's RL trainer mains (" + ", ".join(MAINS) + ")")
            raise RlmLabError(f"verl script {path} launches {main}: {what}; nothing to price as an RL step")
        args = words[words.index(main) + 1:] if main in words else words[[w.endswith(".py") for w in words].index(True) + 1:]
        name, overrides = MAINS[main], []
        it = iter(args)
        for a in it:
            if a in ("--config-name", "--config-path", "-cn", "-cp"):
                val = next(it, "")
                name = val if a in ("--config-name", "-cn") else name
            elif a.startswith(("--config-name=", "-cn=")):
                name = a.split("=", 1)[1]
            elif a.startswith(("--config-path=", "-cp=")):
                continue
            elif "=" in a or a.startswith("~"):
                overrides.append(a)
            else:
                raise RlmLabError(f"verl script {path}: {a!r} after {main} is not a Hydra override (key=value)")
        name = name.removesuffix(".yaml")
        if not (VERL_TREE / f"{name}.yaml").is_file():
            raise RlmLabError(f"verl script {path}: config {name!r} is a recipe's own config, not verl's trainer "
                              f"configs shipped in configs/frameworks/verl/hydra/")
        data, nulls = compose(name, overrides, f"script {path}")
        written = [o.lstrip("+~").split("=", 1)[0] for o in overrides]
        notes = [f"composed by Hydra: {name} with the script's {len(overrides)} overrides ({main})"]
        return flatten(data), written, nulls, notes
    raise RlmLabError(f"verl script {path} runs no verl trainer (python3 -m verl.trainer.main_ppo key=value ...)")


def load(path: str) -> tuple[dict, list | None, set, list]:
    """(flat config, keys the user wrote or None, null keys, notes) of a run script, a YAML with Hydra
    ``defaults:`` (composed) or a partial YAML of verl keys (read as it is, verl's defaults below)."""
    text = read_text(path, "verl config")
    p = Path(path)
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    if p.suffix in (".sh", ".bash") or text.startswith("#!") or any("-m verl." in ln for ln in code):
        return _from_script(text, path)
    raw = load_yaml(path, NAME)
    if "defaults" in raw:
        data, nulls = compose(p.stem, [], f"config {path}", user_dir=p.parent)
        written = [k.lstrip("+") for k in flatten({k: v for k, v in raw.items() if k not in ("defaults", "hydra")})]
        return flatten(data), written, nulls, [f"composed by Hydra with its defaults list (verl's tree at the "
                                               f"pinned commit)"]
    return resolve_refs(flatten(raw), path), None, set(), []
