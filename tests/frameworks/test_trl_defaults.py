"""The TRL importer's defaults are TRL's own: every ``k.get("<GRPOConfig field>", <default>, ...)`` in
``frameworks/importers/trl.py`` is checked against ``dataclasses.fields(trl.GRPOConfig)`` (and LoRA's against
``trl.ModelConfig``), so a TRL upgrade that moves a default fails here instead of mispricing a config. The importer
itself stays free of TRL (it runs where TRL is not installed); this test reads its defaults from its source."""

import ast
import dataclasses
from pathlib import Path

import pytest

IMPORTER = Path(__file__).resolve().parents[2] / "rlm_lab/frameworks/importers/trl.py"
# GRPOConfig fields whose None default the trainer resolves later (bf16: on unless fp16), priced as resolved
RESOLVED = {"bf16"}


def defaults_in(src: str) -> dict[str, object]:
    """``{name: default}`` of every ``k.get("name", <constant>, ...)`` call in ``src``."""
    out = {}
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "k" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[1], ast.Constant)):
            out[node.args[0].value] = node.args[1].value
    return out


def test_the_importers_defaults_are_grpo_configs():
    trl = pytest.importorskip("trl")
    fields = {f.name: f.default for cls in (trl.GRPOConfig, trl.ModelConfig) for f in dataclasses.fields(cls)}
    found = {name: v for name, v in defaults_in(IMPORTER.read_text()).items() if name in fields and name not in RESOLVED}
    assert len(found) >= 10, f"the importer's default table moved; found only {sorted(found)}"
    wrong = {name: (v, fields[name]) for name, v in found.items() if v != fields[name]}
    assert not wrong, f"(importer, TRL) defaults differ: {wrong}"


def test_the_scan_reads_constant_defaults_only():
    src = 'k.get("beta", 0.0, "x")\nk.get("model", to="m")\nk.get("lora_target_modules", None)\nother.get("a", 1)\n'
    assert defaults_in(src) == {"beta": 0.0, "lora_target_modules": None}
