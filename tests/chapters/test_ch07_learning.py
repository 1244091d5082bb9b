"""Chapter 7's learning arms: over-provisioning's group selection inside a GRPO rollout_func, checked against
the lengths forced on each prompt (the kept groups are the ones whose longest member is shortest, computed
here from the prompts alone), the recycling of the others, and its bad input."""

import types

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.chapters.ch07_long_tail.learning import OverProvisionRollout
from rlm_lab.longtail.trl_hooks import FIELD
from rlm_lab.tasks import Chain
from rlm_lab.tasks.chain import predicted_length


def test_overprovision_rollout_keeps_the_groups_that_finish_first_and_recycles_the_rest():
    from rlm_lab.models import build_model

    model, tok = build_model("nano", seed=0)
    rows, _ = Chain(steps=4).split(32, 1, seed=3)
    prompts = [r["prompt"] for r in rows]
    g, n = 2, 4
    trainer = types.SimpleNamespace(num_generations=g, processing_class=tok, model=model,
                                    args=types.SimpleNamespace(max_completion_length=40))
    # the reward: the parity of the prompt's length, so the returned rewards can be matched to their rows
    roll = OverProvisionRollout(lambda c, prompt=None, **kw: [float(len(x) % 2) for x in prompt], prompts[n:],
                                ratio=2.0, seed=0, force_length=predicted_length)
    batch = [p for p in prompts[:n] for _ in range(g)]
    out = roll(batch, trainer)
    drawn = roll.last["prompts"]
    assert len(out["completion_ids"]) == n * g == len(out[FIELD])
    # independent: every prompt's group finishes at its forced length; the kept n are the shortest of 2n
    candidates = [roll.last["prompts"][k * g] for k in range(n)] + roll.recycled
    assert len(candidates) == 2 * n and len(roll.recycled) == n
    kept_len = sorted(predicted_length(p) for p in drawn[::g])
    assert max(kept_len) <= min(predicted_length(p) for p in roll.recycled)
    assert [len(c) for c in out["completion_ids"]] == [min(predicted_length(p), 40) for p in drawn]
    assert out[FIELD] == [float(len(p) % 2) for p in drawn]
    # the next call starts with the recycled prompts before drawing fresh ones
    first_recycled = list(roll.recycled)
    roll(batch, trainer)
    assert not set(first_recycled) - set(roll.last["prompts"]) - set(roll.recycled)
    # the lengths logged per step: the kept ones are the short end of what was generated
    assert max(roll.kept[0]) <= sorted(roll.generated[0])[n * g] and len(roll.generated[0]) == 2 * n * g


def test_overprovision_rollout_bad_input():
    with pytest.raises(RlmLabError, match="pool of prompts"):
        OverProvisionRollout(lambda c, **kw: [0.0] * len(c), [])
    with pytest.raises(RlmLabError, match="n' >= n"):
        OverProvisionRollout(lambda c, **kw: [0.0] * len(c), ["1+2="], ratio=0.5)


def test_gain_spread_outside_noise_and_accuracy_bar():
    from rlm_lab.chapters.ch07_long_tail import report
    from rlm_lab.chapters.ch07_long_tail.run import _spread

    # per-repeat gains from paired times, by hand: 2/1, 3/2, 1/2
    sp = _spread({"a": [2.0, 3.0, 1.0], "b": [1.0, 2.0, 2.0]}, "a", "b")
    assert sp["reps"] == [2.0, 1.5, 0.5] and (sp["min"], sp["max"]) == (0.5, 2.0)

    class Rec:
        def __init__(self, spread):
            self.results = {"predicted": {"speedup": 1.5}, "measured": {"speedup": 1.5, "speedup_spread": spread}}

    assert report.gain_row("packing", Rec(sp))["side"] == "undecided"  # repeats on both sides of 1
    assert report.gain_row("packing", Rec({"reps": [1.1, 1.9]}))["side"] == "undecided"   # two repeats: no interval
    row = report.gain_row("packing", Rec({"reps": [1.4, 1.5, 1.6]}))   # Student-t: 1.5 +- 4.303 x 0.1 / sqrt(3)
    assert row["side"] == "above 1" and row["95% interval"] == "1.25-1.75" and row["measured gain"] == pytest.approx(1.5)
    # 2 standard errors of a difference of proportions, by hand: 0.5 and 0.4 on 100 problems
    d = report.accuracy_difference(0.5, 0.4, 100)
    assert d["bar"] == pytest.approx(2 * (0.49 / 100) ** 0.5) and d["effect"] is False
    assert report.accuracy_difference(0.7, 0.4, 100)["effect"] is True


def test_seeds_effect_needs_the_bar_and_one_sign():
    from rlm_lab.chapters.ch07_long_tail.report import seeds_effect

    e = seeds_effect([0.7, 0.72, 0.69], [0.6, 0.61, 0.62], 500)
    assert e["difference"] == pytest.approx(0.0933, abs=1e-3) and e["effect"] is True
    assert e["bar"] == pytest.approx(2 * ((0.7033 * 0.2967 + 0.61 * 0.39) / 1500) ** 0.5, rel=1e-3)
    assert seeds_effect([0.9, 0.55, 0.9], [0.6, 0.61, 0.6], 500)["effect"] is False  # one seed disagrees
    assert seeds_effect([0.62], [0.6], 500)["effect"] is False  # under the bar


def test_make_trainer_hands_the_rollout_func_to_grpo(tmp_path):
    """rlm_lab.train.run's trainer gets the rollout_func (the learning arms' only difference), and without one
    TRL's own generation stays in place."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from rlm_lab.models import build_model, save
    from rlm_lab.tasks import parse_task
    from rlm_lab.train.config import make_config
    from rlm_lab.train.rl import make_trainer

    path = save(*build_model("nano", seed=0), tmp_path / "model")
    cfg = make_config("grpo", size="smoke", task="chain:steps=3", out=str(tmp_path / "run"))
    task = parse_task(cfg.task)
    rows, _ = task.split(8, 1, seed=0)
    roll = OverProvisionRollout(lambda c, **kw: [0.0] * len(c), [r["prompt"] for r in rows])
    assert make_trainer(cfg, path, rows, task, tmp_path / "a", rollout_func=roll).rollout_func is roll
    assert make_trainer(cfg, path, rows, task, tmp_path / "b").rollout_func is None


def test_learning_table_and_effects_from_the_committed_records():
    import statistics

    from rlm_lab.chapters.ch07_long_tail import report

    learn = report.load_learning("cpu")
    if not learn["baseline"]:
        pytest.skip("no committed learning runs")
    table = report.learning_table(learn)
    assert len(table) == sum(len(v) for v in learn.values())
    assert {r["arm"] for r in table} == {a for a, v in learn.items() if v}
    effects = report.learning_effects(learn)
    assert [e.split(":", 1)[0] for e in effects] == ["overprovision", "dynamic_sampling"]
    # the accuracy each sentence states is the mean of its arm's seeds, recomputed here
    base = learn["baseline"]
    for arm, sentence in zip(("overprovision", "dynamic_sampling"), effects):
        runs = learn[arm][:len(base)]
        acc = statistics.mean(r.results["accuracy_after"] for r, _ in runs)
        assert f"held-out accuracy {acc:.1%} against" in sentence
    assert report.learning_effects({a: [] for a in report.LEARN_ARMS}) == []


def test_make_trainer_refuses_a_trainer_class_of_another_algorithm(tmp_path):
    """The one trainer builder takes a subclass of the algorithm's trainer (the split PPO) and refuses anything
    else with one line, before any model is loaded."""
    from rlm_lab.errors import RlmLabError
    from rlm_lab.train.config import RunConfig
    from rlm_lab.train.rl import make_trainer

    class NotATrainer:
        pass

    with pytest.raises(RlmLabError, match="NotATrainer is not a GRPOTrainer"):
        make_trainer(RunConfig(algo="grpo"), tmp_path / "no-model", [], None, tmp_path / "out", trainer_cls=NotATrainer)
