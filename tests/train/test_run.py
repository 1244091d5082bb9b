"""End-to-end runs on the nano model (a few steps): record contents, parameter updates, determinism,
reward-function errors, RLOO one config away, SFT tokenization identical to TRL's own."""

import json

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.train.config import make_config


def length_reward(completions, **_):
    """A reward with spread inside every group, so that every step has a gradient."""
    return [float(len(c)) / 6 for c in completions]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("RLM_CACHE_DIR", str(root / "cache"))
    mp.setenv("RLM_RUNS_DIR", str(root / "runs"))

    def make(name, **changes):
        base = dict(model="nano", sft_steps=8, sft_batch_size=16, rl_steps=3, batch_size=8, num_generations=4,
                    max_completion_length=4, eval_problems=16, eval_every=2, eval_batch_size=16,
                    eval_max_new_tokens=4, disable_tqdm=True, out=str(root / "runs" / name))
        fields = {**base, **changes}
        return make_config(fields.pop("algo", "grpo"), "smoke", **fields)

    yield make
    mp.undo()


@pytest.fixture(scope="module")
def grpo_run(tiny):
    from rlm_lab.train.run import run

    return run(tiny("grpo"), reward_funcs=[length_reward])


@pytest.mark.slow
def test_sft_then_grpo_writes_a_complete_record_and_updates_every_parameter(tiny, grpo_run):
    import torch

    from rlm_lab.models import load
    from rlm_lab.record import RunRecord
    from rlm_lab.train.run import cache_root

    cfg, rec = tiny("grpo"), grpo_run
    r = RunRecord.load(rec.dir).results
    for key in ("accuracy_before", "accuracy_after", "format_rate_before", "format_rate_after", "sft_seconds",
                "rl_seconds", "rl_train_tokens_per_s", "eval_gen_tokens_per_s", "reward_final"):
        assert r[key] is not None, key
    assert 0 <= r["accuracy_before"] <= 1 and r["rl_steps"] == 3 and r["sft_cached"] is False
    assert "generate" in r["trace"]["stages"] and r["rl_gen_tokens_per_s"] > 0  # the stage tracer ran
    assert (rec.dir / "spans.jsonl").exists()
    prov = RunRecord.load(rec.dir).data["provenance"]
    assert prov["seed"] == cfg.seed and prov["versions"]["trl"] and "cpu_count" in prov["hardware"]
    rows = rec.metrics()
    assert [x["step"] for x in rows if x["phase"] == "grpo" and "reward" in x] == [1, 2, 3]
    assert any(x["phase"] == "sft" and "loss" in x for x in rows)
    assert [x["step"] for x in rows if "eval_accuracy" in x and x["phase"] == "grpo"] == [2]

    sft_model, _ = load(str(cache_root() / "sft" / r["sft_key"]))
    after = rec.trainer.model
    before = dict(sft_model.named_parameters())
    unchanged = [n for n, p in after.named_parameters()
                 if p.requires_grad and torch.equal(p.detach().cpu(), before[n].detach())]
    assert unchanged == []


@pytest.mark.slow
def test_same_seed_same_rewards_and_sft_is_cached(tiny, grpo_run):
    from rlm_lab.train.run import run

    a = grpo_run
    b = run(tiny("seed_b"), reward_funcs=[length_reward])
    rewards = [[x["reward"] for x in rec.metrics() if x["phase"] == "grpo" and "reward" in x] for rec in (a, b)]
    assert rewards[0] == rewards[1] and len(rewards[0]) == 3
    assert b.results["sft_cached"] is True


@pytest.mark.slow
def test_reward_function_that_raises_is_one_clear_error(tiny):
    from rlm_lab.train.run import run

    def parse_answer(completions, **_):
        return [int(c) for c in completions]  # crashes on anything that is not an integer

    with pytest.raises(RlmLabError) as e:
        run(tiny("bad_reward", max_completion_length=2), reward_funcs=[lambda completions, **_: [0.0] * len(completions),
                                                                         parse_answer])
    assert "'parse_answer'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_a_reward_that_scores_nothing_is_not_a_crash(tiny):
    """TRL's reward contract allows None for a completion no function could score; a run where every reward is
    None for every row completes, and its record does not turn the missing rewards into a number."""
    from rlm_lab.train.run import run

    def abstains(completions, **_):
        return [None] * len(completions)

    rec = run(tiny("abstains", rl_steps=2, eval_every=0), reward_funcs=[abstains])
    assert rec.results["rl_steps"] == 2
    first = rec.results["reward_first"]
    assert first is None or first == 0.0  # TRL's nansum over no scored function: 0, never NaN in a record
    assert json.loads((rec.dir / "record.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_rloo_is_one_config_away(tiny):
    from rlm_lab.train.run import run

    rec = run(tiny("rloo", algo="rloo", rl_steps=2), reward_funcs=[length_reward])
    assert rec.results["rl_steps"] == 2 and type(rec.trainer).__name__ == "RLOOTrainer"
    assert [x["phase"] for x in rec.metrics() if "reward" in x] == ["rloo", "rloo"]


@pytest.mark.slow
def test_ppo_dispatch_starts_from_the_same_sft_model_and_holds_four_roles(tiny, grpo_run):
    from rlm_lab.train.run import run

    rec = run(tiny("ppo", algo="ppo", beta=0.05, rl_steps=2), reward_funcs=[length_reward])
    assert type(rec.trainer).__name__ == "PPOTrainer"
    assert set(rec.trainer.models_held) == {"actor", "critic", "reference"}
    assert rec.results["sft_cached"] and rec.results["sft_key"] == grpo_run.results["sft_key"]
    assert rec.results["accuracy_before"] == grpo_run.results["accuracy_before"]


def test_sft_rows_match_trl_preparation():
    """Our pre-tokenized SFT rows are what TRL's own preparation builds (EOS appended, prompt masked)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from rlm_lab.models import build_model
    from rlm_lab.train.sft import sft_dataset

    model, tok = build_model("nano")
    rows = [{"prompt": "37+45=", "answer": "82"}, {"prompt": "9+9=", "answer": "18"}]
    args = SFTConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, completion_only_loss=True, report_to="none",
                     max_length=64)
    trl_ds = SFTTrainer(model=model, args=args, processing_class=tok,
                        train_dataset=Dataset.from_dict({"prompt": [r["prompt"] for r in rows],
                                                         "completion": [r["answer"] for r in rows]})).train_dataset
    ours = sft_dataset(rows, tok)
    for i in range(2):
        assert trl_ds[i]["input_ids"] == ours[i]["input_ids"]
        assert trl_ds[i]["labels"] == ours[i]["labels"]
    assert ours[0]["input_ids"][-1] == tok.eos_token_id


@pytest.mark.slow
def test_plots_and_sweep_summary_read_the_record(grpo_run, tmp_path):
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    from rlm_lab.chapters.ch01_quickstart import report as plots
    from rlm_lab.train import sweep

    steps, acc = plots.accuracy_curve(grpo_run)
    sft_steps = grpo_run.config["sft_steps"]
    assert acc[steps.index(sft_steps)] == grpo_run.results["accuracy_before"]
    assert acc[-1] == grpo_run.results["accuracy_after"] and steps[-1] == sft_steps + 3
    assert len(plots.reward_curve(grpo_run)[0]) == 3
    assert len(plots.plot_runs([grpo_run]).axes) == 2
    assert plots.summary_rows([grpo_run])[0]["acc_after"] == grpo_run.results["accuracy_after"]

    shutil.copytree(grpo_run.dir, tmp_path / "ch01_sweep_base")
    (row,) = sweep.summarize(tmp_path)
    assert row["setting"] == "base" and row["accuracy_rl"] == grpo_run.results["accuracy_after"]
    assert row["end_to_end_cpu_seconds"] > 0 and (tmp_path / "ch01_sweep.json").exists()
