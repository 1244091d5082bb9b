"""`rlm-lab train`: every RunConfig field's type and range, `extra` against TRL's config, config files and the
output location. Every clear error here must come before any work: no model, no data, no run folder."""

import json
from pathlib import Path

from fault_matrix import Case

from rlm_lab.train.validation import RANGES


def train(*sets, extra_args=()):
    argv = ["train", "--size", "smoke", "--out", "{tmp}/run", *extra_args]
    for s in sets:
        argv += ["--set", s]
    return argv


ENV = {"RLM_CACHE_DIR": "{tmp}/cache", "RLM_RUNS_DIR": "{tmp}/runs"}  # default run folders land in {tmp} too
CASES = []


def add(id, what, argv, message, cls="clear-error", **kw):
    if "{tmp}/run" not in argv:  # no --out: nothing may appear in the committed runs or task data either
        kw.setdefault("unchanged", ("data/runs", "data/tasks"))
    CASES.append(Case(id, what, cls=cls, argv=argv, message=message, env=ENV, **kw))


# ---- every numeric field: NaN, infinity, below and (where bounded) above its range --------------------------
FLOATS = {"sft_lr", "rl_lr", "warmup_ratio", "beta", "temperature", "epsilon", "format_weight", "max_grad_norm"}
BELOW = {"seed": -1, "sft_steps": -1, "sft_lr": 0, "sft_batch_size": 0, "rl_steps": -5, "rl_lr": -1e-4,
         "warmup_ratio": -0.1, "beta": -0.5, "num_generations": 0, "batch_size": 0, "num_iterations": 0,
         "max_completion_length": 0, "temperature": 0, "epsilon": 0, "format_weight": -1, "max_grad_norm": -1,
         "eval_problems": 0, "eval_every": -1, "eval_batch_size": 0, "eval_max_new_tokens": 0, "threads": -3}
ABOVE = {"sft_lr": 1.5, "rl_lr": 2, "warmup_ratio": 5, "epsilon": 1.5, "seed": 2**32, "threads": 100000,
         "temperature": 1e9, "beta": 1e9}
for name in RANGES:
    what = "float" if name in FLOATS else "int"
    if name in FLOATS:
        add(f"{name}-nan", f"{name}=nan", train(f"{name}=nan"), rf"^rlm-lab: error: {name} must be in .*got nan")
        add(f"{name}-inf", f"{name}=inf", train(f"{name}=inf"), rf"{name} must be in .*got inf")
    else:
        add(f"{name}-nan", f"{name}=nan (an integer field)", train(f"{name}=nan"), rf"{name} must be an integer")
        add(f"{name}-fraction", f"{name}=2.5 (an integer field)", train(f"{name}=2.5"), rf"{name} must be an integer")
    add(f"{name}-below", f"{name}={BELOW[name]} (below its range)", train(f"{name}={BELOW[name]}"),
        rf"{name} must be .*got {BELOW[name]!r}|{name} must be >= ")
    if name in ABOVE:
        add(f"{name}-above", f"{name}={ABOVE[name]} (above its range)", train(f"{name}={ABOVE[name]}"),
            rf"{name} must be in .*got")
add("num_generations-word", "num_generations=eight (a string for an integer)", train("num_generations=eight"),
    r"num_generations must be a number, got 'eight'")
add("beta-word", "beta=high", train("beta=high"), r"beta must be a number, got 'high'")

# ---- combinations and choices -------------------------------------------------------------------------------
add("rl_steps-zero", "rl_steps=0 for GRPO (TRL would fall back to epochs)", train("rl_steps=0"),
    r"rl_steps must be >= 1 for grpo")
add("num_generations-one", "a group of one completion", train("num_generations=1"), r"num_generations must be >= 2")
add("batch-not-multiple", "batch_size not a multiple of the group size", train("batch_size=10", "num_generations=4"),
    r"batch_size \(10\) must be a multiple of num_generations \(4\)")
add("completion-beyond-positions", "max_completion_length beyond the model's positions",
    train("max_completion_length=600"), r"max_completion_length=600 does not fit model 'nano'.*512 positions")
add("eval-tokens-beyond-positions", "eval_max_new_tokens beyond the model's positions",
    train("eval_max_new_tokens=509"), r"eval_max_new_tokens=509 does not fit")
add("eval-beyond-split", "more eval problems than the test split holds", train("eval_problems=5000", "eval_batch_size=64"),
    r"asked for 5000 eval problems but arithmetic_digits2_opsadd has 1000", unchanged=("data/tasks",))
add("sft-nothing", "algo sft with sft_steps=0", train("sft_steps=0", extra_args=("--algo", "sft")),
    r"sft_steps=0 trains nothing")
add("loss-type", "an unknown loss_type", train("loss_type=ppo"), r"unknown loss_type 'ppo'; choose one of")
add("lr-scheduler", "an unknown lr_scheduler", train("lr_scheduler=cosine_annealing"), r"unknown lr_scheduler")
add("scale-rewards", "an unknown scale_rewards", train("scale_rewards=std"), r"unknown scale_rewards 'std'")
add("bool-maybe", "trace=maybe", train("trace=maybe"), r"trace must be true or false, got 'maybe'")
add("unknown-field", "a misspelt field", train("rl_stepz=3"), r"unknown config field 'rl_stepz'; did you mean 'rl_steps'")
add("set-not-pair", "--set without '='", train("rl_steps"), r"--set 'rl_steps' is not key=value")
add("algo", "an unknown algorithm", ["train", "--algo", "dpo", "--out", "{tmp}/run"], r"unknown algorithm 'dpo'")
add("size", "an unknown size", ["train", "--size", "huge", "--out", "{tmp}/run"], r"unknown size 'huge'")
add("model", "an unknown model", train("model=gigantic"), r"unknown model 'gigantic'")
add("model-folder-no-config", "a model folder without config.json", train("model={tmp}"), r"has no config.json")
add("task", "an unknown task", train("task=sudoku"), r"unknown task 'sudoku'")
add("task-knob", "a task knob that does not exist", train("task=arithmetic:digit=2"), r"has no knob 'digit'")
add("task-knob-range", "arithmetic with 9 digits", train("task=arithmetic:digits=9"), r"digits must be 1..6, got 9")
add("sft-checkpoint", "sft_checkpoint that is not a saved model", train("sft_checkpoint={tmp}/nothing"),
    r"sft_checkpoint .* has no config.json")
add("name-with-slash", "a run name that is a path", train("name=a/b"), r"name 'a/b' must be a plain folder name")
add("seed-word", "--seed abc", ["train", "--seed", "abc", "--out", "{tmp}/run"], r"argument --seed: invalid int")

# ---- extra: TRL's config fields ------------------------------------------------------------------------------
add("extra-max-steps", 'extra={"max_steps": -5} (would replace rl_steps)', train('extra={"max_steps": -5}'),
    r"extra field 'max_steps' is set by rlm_lab; set it with the RunConfig field rl_steps")
add("extra-num-generations", 'extra={"num_generations": "8"}', train('extra={"num_generations": "8"}'),
    r"extra field 'num_generations' is set by rlm_lab")
add("extra-unknown", "extra with a misspelt TRL field", train('extra={"top_kk": 5}'),
    r"extra field 'top_kk' is not an option of GRPOConfig; did you mean 'top_k'")
add("extra-type", "extra top_k as a string", train('extra={"top_k": "five"}'),
    r"extra field 'top_k' of GRPOConfig must be .*got 'five'")
add("extra-float-nan", "extra top_p = NaN", train('extra={"top_p": NaN}'), r"extra field 'top_p' .*got nan")
add("extra-bool", "extra mask_truncated_completions as a number", train('extra={"mask_truncated_completions": 1}'),
    r"extra field 'mask_truncated_completions' .*true or false")
add("extra-rloo", "extra with a GRPO-only field under RLOO", train('extra={"entropy_coef": 0.1}',
    extra_args=("--algo", "rloo")), r"not an option of RLOOConfig")
add("extra-ppo-typo", "a misspelt PPO option", train('extra={"vf_coeff": 0.5}', extra_args=("--algo", "ppo")),
    r"extra field 'vf_coeff' is not an option of PPOConfig; did you mean 'vf_coef'")
add("extra-ppo-type", "PPO's gamma as a string", train('extra={"gamma": "high"}', extra_args=("--algo", "ppo")),
    r"extra field 'gamma' of PPOConfig must be a finite number, got 'high'")
add("extra-ppo-inf", "PPO's lam = inf", train('extra={"lam": Infinity}', extra_args=("--algo", "ppo")),
    r"extra field 'lam' of PPOConfig must be a finite number, got inf")
add("extra-not-mapping", "extra=[1, 2]", train("extra=[1, 2]"), r"extra must be a mapping")
add("extra-not-json", "extra={top_k: 5 (unclosed)", train("extra={top_k: 5"), r"extra must be a JSON/YAML mapping")
add("extra-for-sft", "extra with algo sft (no RL phase)", train('extra={"top_k": 5}', extra_args=("--algo", "sft")),
    r"algo sft has no RL phase")

# ---- config files --------------------------------------------------------------------------------------------


def write(name, data: bytes):
    def setup(tmp: Path):
        (tmp / name).write_bytes(data)
    return setup


def cfg_case(id, what, data, message, cls="clear-error", **kw):
    CASES.append(Case(id, what, cls=cls, argv=["train", "--size", "smoke", "--config", "{tmp}/run.yaml", "--out",
                                               "{tmp}/run", *kw.pop("more", ())],
                      setup=write("run.yaml", data), message=message, env=ENV, **kw))


cfg_case("yaml-binary", "a binary file as --config", bytes(range(256)) * 4, r"run.yaml is not a text file")
cfg_case("yaml-malformed", "YAML with an unclosed bracket", b"rl_steps: [1\n", r"run.yaml is not valid YAML")
cfg_case("yaml-list", "YAML that is a list", b"- rl_steps\n- 3\n", r"run.yaml must hold a mapping")
cfg_case("yaml-unknown-key", "YAML with an unknown key", b"rl_stepz: 3\n", r"run.yaml: unknown config field 'rl_stepz'")
cfg_case("yaml-wrong-type", "YAML with a string for an integer", b"rl_steps: many\n", r"run.yaml: rl_steps must be a number")
cfg_case("yaml-nan", "YAML with beta: .nan", b"beta: .nan\n", r"run.yaml: beta must be in")
cfg_case("yaml-bad-task", "YAML naming an unknown task", b"task: sudoku\n", r"run.yaml: unknown task 'sudoku'")
cfg_case("yaml-extra-list", "YAML with extra as a list", b"extra: [1, 2]\n", r"run.yaml: extra must be a mapping")
cfg_case("yaml-nonstring-key", "YAML with a number as key", b"1: 2\n", r"run.yaml: unknown config field 1")
cfg_case("yaml-empty", "an empty YAML file: the preset as is", b"", r"rl_steps: 6", cls="correct-result",
         more=("--print-config",))
cfg_case("yaml-layers", "YAML value overridden by --set", b"beta: 0.04\nrl_steps: 9\n", r"rl_steps: 3\n(.|\n)*beta: 0.04",
         cls="correct-result", more=("--print-config", "--set", "rl_steps=3"))
add("config-folder", "a folder given as --config", ["train", "--config", "{tmp}", "--out", "{tmp}/run"], r"is a folder")
add("config-missing", "a --config file that does not exist", ["train", "--config", "{tmp}/none.yaml"],
    r"none.yaml does not exist")

# ---- output location -----------------------------------------------------------------------------------------
add("out-is-file", "--out names an existing file", ["train", "--size", "smoke", "--out", "{tmp}/f"],
    r"output location .*/f is a file", setup=write("f", b"x"))
add("out-under-file", "--out under an existing file", ["train", "--size", "smoke", "--out", "{tmp}/f/run"],
    r"/f is a file, so no folder can be made", setup=write("f", b"x"))
add("out-unwritable", "--out on a read-only file system (/proc)", ["train", "--size", "smoke", "--out",
                                                                   "/proc/rlm-lab-fault/run"], r"is not writable")

# ---- valid edge values: accepted, and the config says so -------------------------------------------------------


def shows(**want):
    def check(tmp, out):
        import yaml

        cfg = yaml.safe_load(out)
        for k, v in want.items():
            assert cfg[k] == v, (k, cfg[k], v)
    return check


for id, sets, want in [
    ("ok-grad-norm-zero", ["max_grad_norm=0"], {"max_grad_norm": 0.0}),
    ("ok-warmup-one", ["warmup_ratio=1"], {"warmup_ratio": 1.0}),
    ("ok-eval-off", ["eval_every=0"], {"eval_every": 0}),
    ("ok-beta-zero", ["beta=0"], {"beta": 0.0}),
    ("ok-threads-default", ["threads=0"], {"threads": 0}),
    ("ok-seed-max", [f"seed={2**32 - 1}"], {"seed": 2**32 - 1}),
    ("ok-int-as-float", ["rl_steps=4.0"], {"rl_steps": 4}),
    ("ok-extra", ['extra={"top_k": 5, "top_p": 0.9}'], {"extra": {"top_k": 5, "top_p": 0.9}}),
    ("ok-extra-optional-none", ['extra={"min_p": null}'], {"extra": {"min_p": None}}),
    ("ok-completion-fits", ["max_completion_length=505"], {"max_completion_length": 505}),
]:
    add(id, "valid: " + ", ".join(sets), train(*sets, extra_args=("--print-config",)), "", cls="correct-result",
        check=shows(**want))


def _round_trip(tmp):
    """train --print-config > run.yaml; train --config run.yaml --print-config (the same config back)"""
    import contextlib
    import io

    from rlm_lab.cli import main

    first = io.StringIO()
    with contextlib.redirect_stdout(first):
        assert main(["train", "--algo", "ppo", "--size", "smoke", "--set", 'extra={"vf_coef": 0.25}', "--set",
                     "beta=0.02", "--print-config"]) == 0
    (tmp / "run.yaml").write_text(first.getvalue())
    second = io.StringIO()
    with contextlib.redirect_stdout(second):
        assert main(["train", "--config", str(tmp / "run.yaml"), "--print-config"]) == 0
    assert second.getvalue() == first.getvalue()
    print("same config")


CASES.append(Case("print-config-round-trip", "a printed config fed back as --config", cls="correct-result",
                  call=_round_trip, message="same config", env=ENV))
