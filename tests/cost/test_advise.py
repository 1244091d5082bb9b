"""The placement advisor: Kendall tau-b and regret on hand cases, the enumeration's size, its first pick
against an explicit pricing of the named placements, dropping what does not fit, speed at 64 GPUs, bad input."""

import time
from pathlib import Path

import pytest

from rlm_lab.cost.advise import advise, compositions, kendall_tau, regret
from rlm_lab.cost.placement import predict_placement
from rlm_lab.errors import RlmLabError
from rlm_lab.cost.placement_spec import Cluster, get_placement

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
WL = dict(prompts=4, group_size=4, prompt_len=8, response=8, precision="bf16-mixed")


@pytest.mark.parametrize("x, y, tau", [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    ([1, 2, 3], [1, 3, 2], 1 / 3),                 # 2 concordant, 1 discordant pair of 3
    ([1, 1, 2], [1, 2, 3], 2 / (3 * 2) ** 0.5),    # tau-b: C=2, D=0, one tie in x: 2 / sqrt(3 * 2)
])
def test_kendall_tau_hand_cases(x, y, tau):
    assert kendall_tau(x, y) == pytest.approx(tau, rel=1e-12)


def test_regret_and_bad_lists():
    assert regret([3, 1, 2], [10, 12, 11]) == pytest.approx(1.2)   # picks the 2nd: 12 s against the best 10 s
    assert regret([1, 2], [5, 9]) == 1.0
    with pytest.raises(RlmLabError):
        kendall_tau([1, 2], [1])
    with pytest.raises(RlmLabError):
        kendall_tau([1, 1], [2, 3])
    with pytest.raises(RlmLabError):
        regret([], [])


def test_compositions_count():
    # ordered 3-part sums to 8 from {1, 2, 4}: only {2, 2, 4}, in 3 orders
    got = set(compositions(8, 3, [1, 2, 4]))
    brute = {(a, b, c) for a in (1, 2, 4) for b in (1, 2, 4) for c in (1, 2, 4) if a + b + c == 8}
    assert got == brute and len(got) == 3


def test_two_cores_enumeration_and_first_pick():
    """GRPO on 2 cores: 1 one-set grouping on (2) + 3 two-set groupings on (1, 1) = 4 placements, and the
    advisor's first pick is the fastest of the same placements priced one by one."""
    c = Cluster(2, "cpu")
    wl = WL | {"precision": "fp32"}
    adv = advise("micro", "grpo", wl, c, "cpu-2core-epyc", max_tp=1)
    assert adv.considered == 4 and adv.groupings == 4 and adv.dropped == 0
    explicit = [predict_placement(get_placement(name, c, "grpo"), "micro", "grpo", wl, "cpu-2core-epyc", c)
                for name in ("colocated", "disaggregated")]
    assert adv.ranked[0].step_s <= min(p.step_s for p in explicit) * (1 + 1e-12)
    times = [p.step_s for p in adv.ranked]
    assert times == sorted(times)
    dis = next(p for p in adv.ranked if p.placement.name == "disaggregated")
    assert dis.step_s == pytest.approx(explicit[1].step_s, rel=1e-12)


def test_drops_what_does_not_fit_and_64_gpus_in_seconds():
    t0 = time.perf_counter()
    adv = advise(QWEN_7B, "ppo", WL, Cluster(64, "gpu", 80, 50), "h100-sxm")
    elapsed = time.perf_counter() - t0
    assert adv.groupings == 52                      # Bell(5): every grouping of PPO's five roles was enumerated
    assert adv.considered > 1000 and elapsed < 30
    assert all(p.fits for p in adv.ranked)
    small = advise(QWEN_7B, "ppo", WL, Cluster(4, "gpu", 80, 50), "h100-sxm")
    assert small.dropped > 0 and len(small.ranked) == small.considered - small.dropped
    # the closest misfit is named with its numbers: its tightest set needs more than its devices hold
    assert small.misfit is not None and not small.misfit.fits
    worst = max(small.misfit.sets, key=lambda s: s.memory.total / s.capacity)
    assert worst.memory.total > worst.capacity
    from rlm_lab.cost.advise import format_advice

    assert f"set {worst.name} needs" in format_advice(small) and "(does not fit)" in format_advice(small)


def test_advise_cli_bad_input(capsys):
    from rlm_lab.cli import main

    assert main(["advise", "--max-tp", "0", "--devices", "2"]) == 2
    assert main(["advise", "--model", QWEN_7B, "--devices", "1", "--hardware", "l4", "--prompts", "8",
                 "--group-size", "4", "--prompt-len", "8", "--response-len", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("rlm-lab: error: ") for e in err)
    assert "no placement" in err[1]
    # what was priced and why the nearest candidate failed, so the user can change the right thing
    assert "the closest, placement " in err[1] and " needs " in err[1] and "GiB per device" in err[1]
    assert "priced workload: 8 prompts x 4 samples = 32 sequences, prompt 8 tokens, responses 16 tokens" in err[1]
    assert "micro-batch 32, fp32, engine static" in err[1]


def test_lora_keeps_the_reference_with_the_actor():
    """LoRA: the reference is the actor with its adapter disabled, so only groupings with reference and actor
    together remain: {actor, rollout, reference} on 4 (1 split) + {actor, reference} | {rollout} (3 splits) = 4."""
    adv = advise("small", "grpo", WL, Cluster(4, "gpu", 80, 50), "h100-sxm", lora=8)
    assert adv.considered == 4 and adv.groupings == 2
    for pp in adv.ranked:
        assert pp.placement.roles["reference"] == pp.placement.roles["actor"] and pp.placement.lora


def test_fitted_applies_the_published_fit_and_says_so(tmp_path, capsys):
    """--fitted: the five efficiencies of data/published/fit.json (read here independently) become the profile's,
    advise says its ranking uses the efficiencies its validated error belongs to, and what cannot work is one line."""
    import json

    from rlm_lab.cli import main
    from rlm_lab.cost.assumed import apply_assumptions, fitted_assumptions

    params = json.loads((REPO / "data/published/fit.json").read_text())["parameters"]
    got = fitted_assumptions("h20")
    assert got == {n: params[n]["fitted"] for n in ("eta_F", "eta_A", "eta_B", "eta_N", "eta_H")}
    assert apply_assumptions("h20", got).efficiency["matmul"] == params["eta_F"]["fitted"]
    with pytest.raises(RlmLabError, match="is calibrated"):
        fitted_assumptions("cpu-2core-epyc")
    with pytest.raises(RlmLabError, match="no fit at"):
        fitted_assumptions("h20", tmp_path / "fit.json")
    (tmp_path / "fit.json").write_text('{"parameters": {"eta_F": {"fitted": 0.4}}}')
    with pytest.raises(RlmLabError, match="restore it from git"):
        fitted_assumptions("h20", tmp_path / "fit.json")

    flags = ["advise", "--model", QWEN_7B, "--devices", "8", "--hardware", "h100-sxm", "--prompts", "8",
             "--group-size", "4", "--prompt-len", "64", "--response-len", "64", "--top", "1"]
    assert main(flags) == 0
    plain = capsys.readouterr().out
    assert main(flags + ["--fitted"]) == 0
    fitted = capsys.readouterr().out
    assert "this ranking uses the profile's assumed efficiencies instead" in plain
    assert "this ranking uses those efficiencies (--fitted)" in fitted
    assert f"eta_F={params['eta_F']['fitted']:g}" in fitted and "eta_F=0.4," in plain
    first = lambda out: next(line for line in out.splitlines() if line.startswith("1. "))
    assert first(plain) != first(fitted)            # other efficiencies, another step time
    assert main(flags + ["--fitted", "--hardware", "cpu-2core-epyc"]) == 2
    assert "drop --fitted" in capsys.readouterr().err


def test_predict_takes_fitted_too_and_an_explicit_assume_wins(capsys):
    import json

    from rlm_lab.cli import main

    params = json.loads((REPO / "data/published/fit.json").read_text())["parameters"]
    flags = ["predict", "--model", str(REPO / "configs/models/qwen2.5-0.5b.config.json"), "--hardware", "h100-sxm",
             "--prompts", "8", "--group-size", "4",
             "--prompt-len", "64", "--response-len", "64", "--fitted", "--assume", "eta_F=0.5"]
    assert main(flags) == 0
    out = capsys.readouterr().out
    assert f"eta_F=0.5, eta_A={params['eta_A']['fitted']:g} (attention), eta_B={params['eta_B']['fitted']:g}" in out
