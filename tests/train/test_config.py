"""RunConfig: layering (preset <- YAML <- overrides), validation and clear errors. No torch."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.train.config import RunConfig, make_config, parse_overrides, read_yaml
from rlm_lab.train.presets import preset


def test_preset_layers_and_overrides(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("rl_steps: 42\nbeta: 0.04\nextra: {top_k: 5}\n")
    cfg = make_config("rloo", "cpu", config_file=f, overrides=["rl_steps=7", "temperature=0.7"])
    assert cfg.algo == "rloo" and cfg.size == "cpu"
    assert cfg.rl_steps == 7 and cfg.beta == 0.04 and cfg.temperature == 0.7 and cfg.extra == {"top_k": 5}
    assert cfg.model == preset("rloo", "cpu")["model"]


def test_sizes_differ_and_gpu_uses_bf16():
    smoke, cpu, gpu = (make_config("grpo", s) for s in ("smoke", "cpu", "gpu"))
    assert smoke.rl_steps < cpu.rl_steps <= gpu.rl_steps
    assert cpu.eval_problems >= 500
    assert gpu.bf16 and not cpu.bf16


def test_countdown_gets_longer_completions():
    assert make_config("grpo", "cpu", "countdown:numbers=3").max_completion_length > \
        make_config("grpo", "cpu").max_completion_length


def test_config_is_frozen_and_hash_tracks_sft_fields():
    cfg = make_config("grpo", "smoke")
    with pytest.raises(Exception):
        cfg.rl_steps = 3  # type: ignore[misc]
    assert cfg.sft_key() == cfg.replace(algo="ppo", rl_steps=99).sft_key()  # same SFT model for GRPO and PPO
    assert cfg.sft_key() != cfg.replace(sft_steps=cfg.sft_steps + 1).sft_key()


@pytest.mark.parametrize("kwargs, words", [
    ({"algo": "dpo"}, ["unknown algorithm", "grpo"]),
    ({"model": "gigantic"}, ["unknown model", "micro"]),
    ({"task": "sudoku"}, ["unknown task", "arithmetic"]),
    ({"size": "huge"}, ["unknown size", "smoke"]),
    ({"batch_size": 12, "num_generations": 8}, ["multiple of num_generations"]),
    ({"num_generations": 1}, ["num_generations must be >= 2"]),
    ({"rl_lr": 5}, ["learning rate"]),
    ({"loss_type": "ppo"}, ["unknown loss_type"]),
    ({"lr_scheduler": "cosine_annealing"}, ["unknown lr_scheduler", "linear"]),
    ({"sft_checkpoint": "/nonexistent"}, ["config.json"]),
])
def test_bad_values_name_the_fix(kwargs, words):
    with pytest.raises(RlmLabError) as e:
        RunConfig(**kwargs)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


@pytest.mark.parametrize("text, words", [
    ("rl_stepz: 3\n", ["unknown config field 'rl_stepz'", "rl_steps"]),
    ("rl_steps: many\n", ["rl_steps must be a number"]),
    ("rl_steps: 2.5\n", ["must be an integer"]),
    ("trace: maybe\n", ["true or false"]),
    ("- just\n- a list\n", ["must hold a mapping"]),
    ("rl_steps: [1\n", ["not valid YAML"]),
])
def test_malformed_yaml_is_one_clear_line(tmp_path, text, words):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(RlmLabError) as e:
        read_yaml(f)
    assert str(f) in str(e.value) and "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_overrides_parse_types_and_reject_garbage():
    assert parse_overrides(["rl_steps=10", "beta=0", "trace=true", "model=nano"]) == \
        {"rl_steps": 10, "beta": 0.0, "trace": True, "model": "nano"}
    with pytest.raises(RlmLabError, match="key=value"):
        parse_overrides(["rl_steps"])


def test_cli_error_is_one_line_exit_2(capsys):
    from rlm_lab.cli import main

    assert main(["train", "--algo", "dpo", "--size", "smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown algorithm 'dpo'" in err
    assert main(["train", "--set", "bogus=1"]) == 2
    assert "unknown config field 'bogus'" in capsys.readouterr().err


def test_cli_print_config_without_torch(capsys):
    import subprocess
    import sys

    code = ("import sys; from rlm_lab.cli import main; main(['train','--size','smoke','--print-config']); "
            "print('torch' in sys.modules, 'trl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "algo: grpo" in out and out.strip().endswith("False False")


# ---- validation against TRL's own config classes -------------------------------------------------------------

@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_every_trl_default_passes_the_extra_type_check(algo):
    # an independent source of valid values: TRL's own defaults must satisfy the type check built from its hints
    import dataclasses
    import math
    import typing

    from rlm_lab.train.validation import SET_BY_RUNCONFIG, _matches, rl_config_class

    cls = rl_config_class(algo)
    hints = typing.get_type_hints(cls)
    checked = 0
    for f in dataclasses.fields(cls):
        if not f.init or f.name in SET_BY_RUNCONFIG or f.default is dataclasses.MISSING:
            continue
        if isinstance(f.default, float) and not math.isfinite(f.default):
            continue  # e.g. an infinite clip bound: a default we refuse to take as input (stated in validation.py)
        assert _matches(f.default, hints.get(f.name, f.type)), (f.name, f.default, hints.get(f.name))
        checked += 1
    assert checked > 50  # the check ran over TRL's options, not over an empty list


def test_extra_may_not_override_what_rl_args_sets(tmp_path):
    # every TRL field rl_args fills from the RunConfig (or fixes itself) is protected from `extra`
    from rlm_lab.train.rl import rl_args
    from rlm_lab.train.validation import READER_MAY_SET, SET_BY_RUNCONFIG, rl_config_class

    cfg = make_config("grpo", "smoke")
    args = rl_args(cfg, rl_config_class("grpo"), tmp_path)
    from trl import GRPOConfig

    default = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)  # both in SET_BY_RUNCONFIG
    set_here = {k for k in SET_BY_RUNCONFIG if hasattr(default, k)}
    differs = {k for k in vars(args) if k in vars(default) and getattr(args, k) != getattr(default, k)
               and not k.startswith("_")}
    assert differs - set_here - set(READER_MAY_SET) - {"logging_dir", "distributed_state"} == set()


@pytest.mark.parametrize("field_, bad", [
    ("beta", float("nan")), ("temperature", float("inf")), ("warmup_ratio", 5.0), ("max_grad_norm", -1.0),
    ("eval_every", -1), ("threads", -3), ("epsilon", 1.0), ("seed", -1), ("rl_lr", float("nan")),
])
def test_out_of_range_values_are_refused_in_the_api_too(field_, bad):
    with pytest.raises(RlmLabError, match=rf"^{field_} must be in "):
        make_config("grpo", "smoke").replace(**{field_: bad})


def test_completion_length_checked_against_a_saved_models_positions(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 16}))
    # prompts of arithmetic:digits=2 are at most 6 characters: 6 + 9 + EOS = 16 fits, 10 does not
    assert RunConfig(model=str(tmp_path), task="arithmetic:digits=2", max_completion_length=9,
                     eval_max_new_tokens=9).max_completion_length == 9
    with pytest.raises(RlmLabError, match=r"max_completion_length=10 does not fit .* 17 > its 16 positions"):
        RunConfig(model=str(tmp_path), task="arithmetic:digits=2", max_completion_length=10, eval_max_new_tokens=9)


def test_yaml_value_errors_name_the_file_only_when_the_file_is_at_fault(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("batch_size: 10\n")  # smoke's group size is 4
    with pytest.raises(RlmLabError, match=rf"^{f}: batch_size \(10\) must be a multiple"):
        make_config("grpo", "smoke", config_file=f)
    # the file is fine once --set fixes the group size, and a bad --set is not blamed on the file
    assert make_config("grpo", "smoke", config_file=f, overrides=["num_generations=5"]).batch_size == 10
    with pytest.raises(RlmLabError, match=r"^beta must be in"):
        make_config("grpo", "smoke", config_file=f, overrides=["num_generations=5", "beta=-1"])
