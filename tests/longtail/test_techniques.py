"""Chapter 7's switches on a nano model, each checked against an independent computation: the forced
lengths and finish order, the kept set of over-provisioning (the n shortest) and its resumed recycling,
padding-free packing against per-sequence forwards, dispatch as a permutation, dynamic sampling's count,
fused scoring's timing and inputs."""

import random
import time

import pytest

from rlm_lab.cost import longtail as cost
from rlm_lab.errors import RlmLabError
from rlm_lab.chapters.ch07_long_tail import report
from rlm_lab.longtail import engine, techniques as T
from rlm_lab.tasks import Chain, correctness_reward


@pytest.fixture(scope="module")
def nano():
    from rlm_lab.models import build_model

    model, tok = build_model("nano", seed=0)
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def prompts(nano):
    rows, _ = Chain(steps=3).split(8, 1, seed=0)
    return engine.encode(nano[1], [r["prompt"] for r in rows])


def test_engine_lengths_finish_order_and_early_stop(nano, prompts):
    model, _ = nano
    lengths = [9, 3, 6, 4]
    seen = []
    g = engine.generate(model, prompts[:4], lengths, on_finish=lambda i, ids: seen.append(i))
    assert g.finish_step == lengths and [len(t) for t in g.new_tokens] == lengths
    assert seen == [1, 3, 2, 0]  # in order of length, i.e. of finishing
    assert all(t[-1] == engine.EOS and engine.EOS not in t[:-1] for t in g.new_tokens)
    early = engine.generate(model, prompts[:4], lengths, stop_after=2)
    assert early.finished == [1, 3] and early.finish_step[1] == 3
    assert [len(t) for t in early.new_tokens] == [4, 3, 4, 4]  # the call ended at step 4


def test_overprovision_keeps_shortest_and_resumes_the_rest(nano, prompts):
    model, _ = nano
    lengths = [7, 2, 5, 3, 4, 6, 2, 8]
    op = T.OverProvisioner(prompts, lengths, n=2, n_prime=3)
    first = op.step(model)
    assert sorted(first["kept"]) == [1, 2] and first["steps"] == 5 and first["resumed"] == 0
    (i, part), = op.recycled
    assert i == 0 and len(part) == 5  # stopped at step 5, 5 of its 7 tokens kept for the next step
    second = op.step(model, seed=1)  # row 0 resumed (2 tokens left), rows 3 and 4 fresh (3 and 4)
    assert sorted(second["kept"]) == [0, 3] and second["steps"] == 3 and second["resumed"] == 1
    with pytest.raises(RlmLabError, match="n' >= n"):
        T.OverProvisioner(prompts, lengths, n=3, n_prime=2)


def test_packed_forward_equals_padded_per_sequence(nano):
    import torch

    model, _ = nano
    seqs = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    ids, pos, labels = T.packed_batch(seqs)
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        leaky = model(input_ids=ids, position_ids=pos).logits[0]  # with a cache, transformers ignores the packing
        alone = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
        pids, mask, plabels = T.padded_batch(seqs)
        padded_loss = model(input_ids=pids, attention_mask=mask, labels=plabels).loss
        packed_loss = model(input_ids=ids, position_ids=pos, labels=labels, use_cache=False).loss
    assert torch.allclose(packed, torch.cat(alone), atol=1e-5)  # no attention across sequence boundaries
    assert not torch.allclose(leaky, torch.cat(alone), atol=1e-5)  # the trap use_cache=False avoids
    assert torch.allclose(packed_loss, padded_loss, atol=1e-5)
    t = T.train_forward_backward(model, seqs, "packed")
    assert t > 0 and all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.zero_grad(set_to_none=True)


def test_dispatch_shares_are_the_cost_models_and_a_permutation():
    lengths = [8, 1, 7, 1, 6, 1, 3]
    for policy in ("round_robin", "lpt"):
        shares = T.dispatch_shares(lengths, 3, policy)
        assert sorted(i for s in shares for i in s) == list(range(len(lengths)))
        assert [[lengths[i] for i in s] for s in shares] == cost.dispatch(lengths, 3, policy)
    with pytest.raises(RlmLabError, match="workers must be an integer >= 1, got 0"):
        T.dispatch_shares(lengths, 0, "round_robin")


def test_tail_rounds_match_the_cost_model():
    lengths = [9, 1, 1, 9, 1, 1, 1, 1]
    plan = T.tail_rounds(lengths, 2, lengths, 0.25)
    assert plan["tail_batched"][-1] == [0, 3] and plan["plan"]["steps_tail_batched"] == 12


def test_dynamic_sampler_counts_every_group():
    task = Chain()
    easy = {"prompt": "1+1=", "answer": "1+1=2"}   # always solved: all-equal, dropped
    mixed = {"prompt": "2+2=", "answer": "2+2=4"}  # half right: never all-equal with this sampler
    draws = {"1+1=": 0, "2+2=": 0}

    def sample_group(row, g):
        draws[row["prompt"]] += 1
        return [row["answer"]] * g if row is easy else [row["answer"], "2+2=5"] * (g // 2)

    s = T.DynamicSampler([easy, mixed], sample_group, correctness_reward(task), 4, seed=3)
    kept = s.fill(5)
    assert len(kept) == 5 and all(k["row"] is mixed for k in kept)
    assert s.generated == draws["1+1="] + draws["2+2="] and draws["2+2="] == 5
    with pytest.raises(RlmLabError, match="group size 1"):
        T.DynamicSampler([easy], sample_group, correctness_reward(task), 1)
    with pytest.raises(RlmLabError, match="drew 3 groups and kept 0"):
        T.DynamicSampler([easy], sample_group, correctness_reward(task), 2).fill(1, max_draws=3)


def test_dynamic_sampler_inflation_near_the_formula():
    """A Bernoulli policy with known p: the measured inflation is within 10 % of 1/(1 - E[p^G + (1-p)^G])."""
    rng = random.Random(0)
    rows = [{"prompt": f"{k}+1=", "answer": f"{k}+1={k + 1}", "p": p} for k, p in enumerate([0.1, 0.5, 0.9, 0.97])]

    def sample_group(row, g):
        return [row["answer"] if rng.random() < row["p"] else "0+0=1" for _ in range(g)]

    s = T.DynamicSampler(rows, sample_group, correctness_reward(Chain()), 4, seed=1)
    s.fill(400)
    predicted = cost.dynamic_sampling_inflation_dist([r["p"] for r in rows], 4)
    assert s.generated / 400 == pytest.approx(predicted, rel=0.1)


def test_fused_scoring_scores_during_generation_the_same_inputs(nano, prompts):
    model, _ = nano
    lengths = [12, 2, 3, 2]
    seen = {}

    def score(ids):
        seen.setdefault(len(seen), (time.perf_counter(), ids.tolist()))

    t0 = time.perf_counter()
    fused = T.fused_scoring(model, prompts[:4], lengths, score, fused=True)
    fused_seen = dict(seen)
    seen.clear()
    after = T.fused_scoring(model, prompts[:4], lengths, score, fused=False)
    # the first sample was scored before generation ended (t0 + gen time), on the unpadded row
    assert fused_seen[0][0] < t0 + fused["gen_s"]
    assert sorted(v[1] for v in fused_seen.values()) == sorted(v[1] for v in seen.values())
    assert all(ids[:len(p)] == p for p, ids in zip(prompts[:4], (seen[i][1] for i in range(4))))
    assert after["wall_s"] >= after["gen_s"]


def test_report_not_measured_yet_and_ranking():
    runs = {t: None for t in report.TECHNIQUES}
    rows = report.ranking(runs)
    assert [r["verdict"] for r in rows] == ["not measured yet"] * len(report.TECHNIQUES)

    class Rec:
        def __init__(self, p, reps, key="speedup"):
            self.results = {"predicted": {key: p}, "measured": {key: 0.0, f"{key}_spread": {"reps": reps}}}

    runs.update(packing=Rec(1.2, [1.15, 1.2, 1.25]), fusion=Rec(1.1, [2.0, 2.1, 1.9]),
                dynamic_sampling=Rec(1.5, [1.25, 1.5, 1.0], "inflation"))
    rows = report.ranking(runs)
    # ranked by the median of the repeats (the recorded point value is not used); dynamic sampling by 1/inflation
    assert [r["technique"] for r in rows[:3]] == ["fusion", "packing", "dynamic_sampling"]
    assert rows[0]["measured gain"] == 2.0 and rows[1]["measured gain"] == 1.2
    # packing: error 0 in [1.2/1.25 - 1, 1.2/1.15 - 1] = [-4 %, +4.3 %]: inside the bar
    assert rows[1]["rel. error"] == pytest.approx(0.0) and rows[1]["verdict"] == "met"
    # fusion: 1.1 / [1.9, 2.1] - 1 = [-48 %, -42 %]: wholly outside
    assert rows[0]["verdict"] == "not met" and rows[0]["side"] == "above 1"
    # dynamic sampling: 1.5 / [1.0, 1.5] - 1 = [0, +50 %]: the point is inside the bar, the interval is not
    assert rows[2]["rel. error"] == pytest.approx(0.2) and rows[2]["verdict"] == "undecided"
    one = report.gain_row("packing", type("R", (), {"results": {"predicted": {"speedup": 1.0},
                                                                "measured": {"speedup": 1.0}}})())
    assert one["verdict"] == "undecided" and one["95% interval"] == "one run"


def test_cli_bad_size_is_one_line(capsys):
    from rlm_lab.cli import main

    assert main(["longtail", "--size", "huge"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlm-lab: error:") and "huge" in err[0]


def test_measure_writes_records_with_prediction_and_load(tmp_path):
    from rlm_lab.chapters.ch07_long_tail import measure
    from rlm_lab.record import load_record

    recs = measure("smoke", only=["dynamic_sampling"], out=tmp_path)
    rec = load_record(tmp_path / "ch07_dynamic_sampling")
    res = rec.results
    assert rec.data["status"] == "completed" and len(res["loadavg"]) == 3
    assert res["measured"]["kept"] == 6 and res["measured"]["generated"] >= 6
    assert res["predicted"]["inflation"] > 1 and "simulated" in res
    assert set(recs) == {"dynamic_sampling"}
    # a committed-style folder that holds a run is refused before any work, unless forced
    with pytest.raises(RlmLabError, match="already holds a run"):
        measure("smoke", only=["dynamic_sampling", "packing"], out=tmp_path)
    assert not (tmp_path / "ch07_packing").exists()
    with pytest.raises(RlmLabError, match="CPU only so far"):
        measure("gpu", out=tmp_path)
    with pytest.raises(RlmLabError, match="unknown technique 'speculation'"):
        measure("smoke", only=["speculation"], out=tmp_path)


def test_fused_rollout_inside_trl_grpo_trainer(tmp_path, nano):
    """One GRPOTrainer step with rollout_func=FusedRollout: the rewards scored during generation reach TRL's
    reward functions aligned with TRL's own decoded completions, and a short row is scored before the batch's
    generation ends."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlm_lab.longtail.trl_hooks import FusedRollout, fused_reward
    from rlm_lab.models import build_model
    from rlm_lab.tasks.chain import predicted_length
    from rlm_lab.tasks.rewards import completion_text

    model, tok = build_model("nano", seed=0)
    rows, _ = Chain(steps=4).split(8, 1, seed=1)

    def length_reward(completions, **kw):  # distinguishes every row, unlike an untrained model's 0 rewards
        return [float(len(completion_text(c))) for c in completions]

    seen = []

    def check(completions, **kw):
        seen.append((length_reward(completions), list(kw["fused_reward"])))
        return [0.0] * len(completions)

    fused = FusedRollout(length_reward, force_length=predicted_length)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=2, max_steps=1,
                      max_completion_length=32, report_to=[], use_cpu=True, save_strategy="no", beta=0.0, seed=0,
                      disable_tqdm=True)
    from rlm_lab.longtail.callbacks import LengthLog

    log = LengthLog()
    GRPOTrainer(model=model, reward_funcs=[fused_reward, check], args=args, train_dataset=Dataset.from_list(rows),
                processing_class=tok, rollout_func=fused, callbacks=[log]).train()
    # TRL's own length statistics (its callback log) against the lengths the rollout generated
    gen = fused.lengths[0]
    assert log.rows[0]["step"] == 1 and log.rows[0]["max_length"] == max(gen) and log.rows[0]["min_length"] == min(gen)
    assert log.rows[0]["mean_length"] == pytest.approx(sum(gen) / len(gen))
    assert gen == [predicted_length(p) for p in fused.last["prompts"]]
    trl_side, fused_side = seen[0]
    assert fused_side == trl_side and len(set(trl_side)) > 1
    finish = fused.last["finish_s"]
    assert len(set(finish)) > 1  # rows of different lengths (4 prompts, 2 completions each)
    first = min(range(len(finish)), key=lambda i: finish[i])
    assert fused.last["scored_at"][first] < fused.last["gen_end_s"]  # scored while the others still decoded
    with pytest.raises(RlmLabError, match="pass rollout_func=FusedRollout"):
        fused_reward(["a"])


def test_dynamic_sampling_rollout_inside_trl_grpo_trainer(tmp_path):
    """One GRPOTrainer step with rollout_func=DynamicSamplingRollout: TRL's own metric of groups whose rewards
    have zero spread is 0, while the first draw had all-equal groups (which were replaced and counted)."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlm_lab.longtail.trl_hooks import DynamicSamplingRollout, fused_reward
    from rlm_lab.models import build_model
    from rlm_lab.tasks.chain import predicted_length

    model, tok = build_model("nano", seed=0)
    rows, _ = Chain(steps=4).split(16, 1, seed=2)
    pool = [r["prompt"] for r in rows]

    # one-operation prompts ("3+4=") always score 0: their groups are all-equal; longer ones score the parity of
    # the completion's first character, so their groups of 2 are all-equal about half the time
    def mixed_reward(completions, prompt=None, **kw):
        return [float(len(p) > 4) * float(len(c) > 0 and ord(c[0]) % 2 == 0) for p, c in zip(prompt, completions)]

    ds = DynamicSamplingRollout(mixed_reward, pool, seed=0, force_length=predicted_length, max_rounds=20)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=2, max_steps=1,
                      max_completion_length=32, report_to=[], use_cpu=True, save_strategy="no", beta=0.0, seed=0,
                      disable_tqdm=True, logging_steps=1)
    trainer = GRPOTrainer(model=model, reward_funcs=[fused_reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, rollout_func=ds)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h]
    assert ds.groups_generated > ds.groups_returned == 4  # some groups were all-equal and drawn again
    assert ds.all_equal_left == 0 and logs[0]["frac_reward_zero_std"] == 0.0
    with pytest.raises(RlmLabError, match="pool of prompts"):
        DynamicSamplingRollout(mixed_reward, [])


def test_summary_counts_verdicts_and_names_only_the_built_size():
    from matplotlib.figure import Figure

    class Rec:
        def __init__(self, p, reps):
            self.results = {"predicted": {"speedup": p}, "measured": {"speedup": 0.0, "speedup_spread": {"reps": reps}}}

    runs = {t: None for t in report.TECHNIQUES}
    runs.update(packing=Rec(1.2, [1.15, 1.2, 1.25]), fusion=Rec(1.1, [2.0, 2.1, 1.9]),
                overprovision=Rec(2.0, [0.5, 3.0, 2.0, 1.8]))
    table = report.ranking(runs)
    s = report.summary(table, "cpu")
    assert (s["ch07_n_met"], s["ch07_n_not_met"], s["ch07_n_undecided"]) == (1, 1, 1)
    assert s["ch07_n_rows"] == len(report.TECHNIQUES)
    # fusion's median (2.0) is the largest, but over-provisioning's interval (its repeats 0.5-3.0) overlaps it
    assert s["ch07_best"].startswith("undecided: the interval of fusion (2.00 [") and "overprovision" in s["ch07_best"]
    runs["overprovision"] = None  # without it, fusion's interval lies above packing's (1.15-1.25): decided
    assert report.summary(report.ranking(runs), "cpu")["ch07_best"].startswith("fusion (2.00 [")
    assert s["ch07_n_repeated"] == 3 and s["ch07_n_outside"] == 2  # overprovision's interval contains 1
    assert "`cpu`" in s["ch07_size_note"] and "`smoke`" not in s["ch07_size_note"]
    assert "`smoke`" in report.summary(table, "smoke")["ch07_size_note"]
    fig = report.plot_gains(table)
    assert isinstance(fig, Figure) and len(fig.axes[0].get_yticklabels()) == 3


def test_technique_text_and_runs_status():
    class Rec:
        results = {"predicted": {"speedup": 1.2, "t": 0.123456}, "measured": {"speedup": 0.0, "s": 2.0,
                   "speedup_spread": {"reps": [1.15, 1.2, 1.25]}}, "loadavg": [0.51, 0.4, 0.3]}

    text = report.technique_text("packing", Rec(), ["t"], ["s"], "cpu")
    assert "0.123" in text and "median of 3 paired repeats, 95% interval 1.08-1.32" in text  # Student-t: 1.2 ± 4.30 × 0.05/√3 and ": met;" in text
    assert report.technique_text("packing", None, [], [], "cpu") == "packing: not measured yet at cpu size"
    status = report.runs_status({"packing": Rec(), "fusion": None}, "cpu")
    assert "not measured yet at cpu size: fusion." in status and "--size cpu" in status
    assert "ch07_packing: load average [0.5, 0.4, 0.3]" in status
