"""verl's Hydra configs composed with Hydra's own compose API and resolved with OmegaConf's (``defaults:`` lists,
config groups such as ``model_engine=megatron``, ``${oc.select:...}`` and every other interpolation), against verl's
config tree at a pinned commit shipped in ``configs/frameworks/verl/hydra/`` (its SOURCES file names the commit).

:func:`compose` takes a primary config name (``ppo_trainer``, a recipe's ``fully_async_ppo_trainer``, or a user's
YAML that lists ``defaults:``) and the command line's overrides, exactly as ``python3 -m verl.trainer.main_ppo
key=value ...`` hands them to Hydra; a failure (an override of a key verl does not have, a missing group option, an
interpolation that does not resolve) is one line naming the source.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import RlmLabError
from .common import CONFIGS

VERL_TREE = CONFIGS / "verl" / "hydra"


def _one_line(e: Exception) -> str:
    msg = str(e).strip().splitlines()
    cause = e.__cause__ or e.__context__
    extra = f" ({str(cause).strip().splitlines()[0]})" if cause is not None and str(cause).strip() else ""
    return (msg[0] if msg else type(e).__name__) + extra


def compose(config_name: str, overrides: list[str], where: str, user_dir: Path | None = None) -> tuple[dict, set]:
    """The composed, resolved config as a plain mapping, and the dotted keys whose value is ``null`` (unset)."""
    from hydra import compose as hydra_compose  # noqa: PLC0415  optional: hydra is not a dependency every install has
    from hydra import initialize_config_dir  # noqa: PLC0415  optional: hydra is not a dependency every install has
    from hydra.errors import HydraException  # noqa: PLC0415  optional: hydra is not a dependency every install has
    from omegaconf import OmegaConf  # noqa: PLC0415  optional: omegaconf is not a dependency every install has
    from omegaconf.errors import OmegaConfBaseException  # noqa: PLC0415  optional: omegaconf is not a dependency every install has

    search = [f"file://{VERL_TREE.resolve()}"]
    primary = (user_dir or VERL_TREE).resolve()
    try:
        with initialize_config_dir(config_dir=str(primary), version_base=None, job_name="rlm_lab"):
            cfg = hydra_compose(config_name=config_name,
                                overrides=[f"hydra.searchpath=[{','.join(search)}]"] + list(overrides))
        data = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException, ValueError, KeyError) as e:
        raise RlmLabError(f"verl {where}: Hydra cannot compose it as verl would: {_one_line(e)}") from None
    data.pop("hydra", None)
    nulls: set = set()

    def walk(d, prefix=""):
        for k, v in list(d.items()):
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif v is None:
                nulls.add(f"{prefix}{k}")
    walk(data)
    return data, nulls


SCHEMA_CONFIGS = (("ppo_trainer", ()), ("ppo_trainer", ("model_engine=megatron",)), ("fully_async_ppo_trainer", ()),
                  ("one_step_off_ppo_trainer", ()))


def option_names() -> list[str]:
    """Every option of verl's composed configs (:data:`SCHEMA_CONFIGS`), flattened with '.', mappings included;
    an empty mapping (``engine_kwargs: {}``) written ``name.*`` (it takes any key). ``options.txt`` is this list."""
    names: set = set()

    def walk(d, prefix=""):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                names.add(key)
                walk(v, key + ".")
            elif isinstance(v, dict):
                names.add(key + ".*")
            else:
                names.add(key)
    for name, overrides in SCHEMA_CONFIGS:
        walk(compose(name, list(overrides), f"schema {name}")[0])
    return sorted(names)
