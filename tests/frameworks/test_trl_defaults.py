"""The TRL importer's defaults are TRL's own, read from its config dataclasses (``rlm_lab.compat.trl.config_defaults``:
``GRPOConfig``, ``ModelConfig``, ``AsyncGRPOConfig``, ``trl vllm-serve``'s ``ScriptArguments``), never typed in
``frameworks/importers/trl.py``: a TRL upgrade that moves a default moves the price with it. Checked twice: no
``k.get("<TRL field>", <value>)`` with a typed value in the importer's source, and a patched field default followed."""

import ast
import dataclasses
from pathlib import Path

import pytest

from rlm_lab.compat.trl import config_defaults

IMPORTER = Path(__file__).resolve().parents[2] / "rlm_lab/frameworks/importers/trl.py"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "frameworks"
QUICKSTART = CONFIGS / "trl" / "grpo-qwen2.5-0.5b-quickstart.yaml"


def defaults_in(src: str) -> dict[str, object]:
    """``{name: default}`` of every ``k.get("name", <constant>, ...)`` call in ``src``."""
    out = {}
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "k" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[1], ast.Constant)):
            out[node.args[0].value] = node.args[1].value
    return out


def typed(src: str) -> dict[str, object]:
    """The TRL fields ``src`` gives a typed default other than None (None: "not set", as TRL's own None defaults)."""
    fields = config_defaults() | config_defaults(True)
    return {n: v for n, v in defaults_in(src).items() if n in fields and v is not None}


def test_no_typed_trl_default_in_the_importer():
    assert not typed(IMPORTER.read_text()), "read these from TRL's dataclasses (compat.config_defaults)"


def test_a_typed_default_creeping_back_is_caught():
    assert typed('k.get("num_generations", 8, "workload.group_size")\nk.get("max_staleness", 4)\n'
                 'k.get("generation_batch_size", None)\nk.get("env.CUDA_VISIBLE_DEVICES", "0")\n') == {
        "num_generations": 8, "max_staleness": 4}


def test_the_scan_reads_constant_defaults_only():
    src = 'k.get("beta", 0.0, "x")\nk.get("model", to="m")\nk.get("lora_target_modules", None)\nother.get("a", 1)\n'
    assert defaults_in(src) == {"beta": 0.0, "lora_target_modules": None}


@pytest.fixture
def patched_field(monkeypatch):
    """Set a TRL dataclass field's default for one test (and the compat cache around it)."""
    def patch(cls, name, value):
        monkeypatch.setattr(cls.__dataclass_fields__[name], "default", value)
        config_defaults.cache_clear()

    yield patch
    monkeypatch.undo()
    config_defaults.cache_clear()


def test_the_importer_follows_grpo_configs_defaults(patched_field):
    import trl

    from rlm_lab.frameworks.importers import import_from

    before = import_from(f"trl:{QUICKSTART}")
    assert not {"num_generations", "beta", "max_completion_length"} & set(before.used)  # the quickstart sets none
    group = before.config["workload"]["group_size"]
    assert group == {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}["num_generations"]
    patched_field(trl.GRPOConfig, "num_generations", group // 2)
    patched_field(trl.GRPOConfig, "beta", 0.04)
    patched_field(trl.GRPOConfig, "max_completion_length", 64)
    after = import_from(f"trl:{QUICKSTART}")
    assert after.config["workload"]["group_size"] == group // 2 and after.config["beta"] == 0.04
    assert after.config["workload"]["response"]["max"] == 64 and after.config["workload"]["logprob_chunk"] == 65
    assert "reference" in after.config["placement"]["roles"]  # beta > 0: a reference model, as TRL loads one


def test_an_async_config_takes_async_grpo_configs_defaults(tmp_path):
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from rlm_lab.frameworks.importers import import_from

    c = tmp_path / "c.yaml"
    c.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nweight_sync_steps: 2\n")
    imp = import_from(f"trl:{c}")
    d = {f.name: f.default for f in dataclasses.fields(AsyncGRPOConfig)}
    assert (imp.mode, imp.eta) == ("async", d["max_staleness"])
    assert imp.config["workload"]["response"]["max"] == d["max_completion_length"]  # 2048 in trl 1.16, not 512
