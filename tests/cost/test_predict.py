"""predict(): a hand-computed worked example as golden values, Kaplan's per-token identities,
limits, monotonicity, and bad input (memory, unknown profile, malformed workload)."""

from pathlib import Path

import pytest

from rlm_lab.cost import flops as F
from rlm_lab.cost import decode_step_time, load_profile, model_spec, predict, tail_bubble
from rlm_lab.cost.workload import Workload, workload_from_dict
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage

REPO = Path(__file__).resolve().parents[2]
QWEN_1_5B = str(REPO / "configs/models/qwen2.5-1.5b.config.json")


@pytest.fixture(scope="module")
def ideal_h200():
    """The H200 datasheet profile with the notes' efficiencies and no per-call overhead (Sec. 3.8)."""
    d = load_profile("h200").to_dict()
    d["overhead"] = {k: 0.0 for k in d["overhead"]}
    # the notes' hand calculation prices products and KV reads only: no elementwise or log-prob head term
    d["kernels"] = {"elementwise": {k: {"s_per_element": 0.0} for k in ("forward", "forward_grad", "backward")},
                    "logprob_head": {k: {"base_s": 0.0, "s_per_row": 0.0, "s_per_element": 0.0}
                                     for k in ("forward", "forward_grad", "backward")}}
    d["name"] = "h200-ideal"
    return load_profile(d)


def _sec38(**over):
    wl = dict(prompts=32, group_size=8, prompt_len=256,
              response=dict(kind="lognormal", median=690, sigma=0.794, max=4096), recompute_old=True,
              precision="bf16-mixed", engine="continuous", padding="none", logits="all", prefix_sharing=True,
              micro_batch=4)
    return wl | over


def test_worked_example_sec_3_8(ideal_h200):
    """Hand-computed worked example (rounded by hand, hence the tolerances)."""
    p = predict(QWEN_1_5B, "grpo", _sec38(), ideal_h200)
    spec = model_spec(QWEN_1_5B)
    assert spec.params == pytest.approx(1.54e9, rel=0.01)
    assert spec.kv_bytes_per_token(2) == 28 * 1024
    assert decode_step_time(spec, 1, 256, ideal_h200) == pytest.approx(0.92e-3, rel=0.02)
    assert p.seconds(Stage.PREFILL) == pytest.approx(0.06, rel=0.15)
    assert p.seconds(Stage.DECODE) == pytest.approx(6.0, rel=0.10)
    assert p.seconds(Stage.REF_LOGPROB) == pytest.approx(2.5, rel=0.05)
    assert p.seconds(Stage.OLD_LOGPROB) == pytest.approx(2.5, rel=0.05)
    actor = sum(p.seconds(s) for s in (Stage.ACTOR_FORWARD, Stage.ACTOR_BACKWARD, Stage.OPTIMIZER))
    assert actor == pytest.approx(7.5, rel=0.05)
    assert p.total_time == pytest.approx(18.6, rel=0.05)
    table = {r["stage"]: r for r in p.table()}
    gen_flops = table["prefill"]["flop_share"] + table["decode"]["flop_share"]
    assert gen_flops == pytest.approx(0.14, abs=0.01)
    assert p.seconds(Stage.GENERATE) / p.total_time == pytest.approx(0.33, abs=0.02)
    assert tail_bubble(p.workload.lengths()) == pytest.approx(0.77, abs=0.01)
    # depth of decode = R_max steps of one sequence: 4096 x 0.92 ms = 3.8 s
    assert next(r for r in p.rows if r.stage == Stage.DECODE).depth_s == pytest.approx(3.8, rel=0.03)
    # two generation replicas: 6.0 s -> 4.8 s, not 3.0 s (the long tail sets the depth)
    p2 = predict(QWEN_1_5B, "grpo", _sec38(devices=2), ideal_h200)
    assert p2.seconds(Stage.DECODE) == pytest.approx(4.8, rel=0.05)


def test_per_token_flops_20N_and_10N():
    """Kaplan et al. (arXiv 2001.08361) counts summed over the passes: per token, equal-size models, E = 1, no attention: PPO 20N, GRPO 10N (+2N old)."""
    spec = model_spec("small")
    n_mm = spec.matmul_params_per_token()
    fwd = F.matmul_flops(spec, 1)  # attention excluded, as in the notes' per-token totals
    train = F.train_flops(spec, 1) - 3 * F.attention_flops(spec, 1, 1)
    grpo = fwd + fwd + train  # generate + ref + actor update
    assert grpo == 10 * n_mm
    value = 2 * spec.matmul_params_per_token(lm_head=False)  # critic/RM: backbone (+ a negligible head)
    ppo = fwd + fwd + 2 * value + train + 3 * value
    assert ppo == pytest.approx(20 * n_mm, rel=0.01)


@pytest.fixture(scope="module")
def cpu_profile():
    from rlm_lab.cost.hardware import known_profiles

    names = [n for n in known_profiles() if n.startswith("cpu-")]
    if names:
        return load_profile(names[0])
    d = load_profile("h200").to_dict() | {"name": "sync-h200", "overlap_overhead": False}
    return load_profile(d)


def _small(**over):
    return Workload(**(dict(prompts=4, group_size=4, prompt_len=8) | over))


def test_brent_limits_and_graph(cpu_profile):
    p = predict("micro", "ppo", _small(group_size=1), cpu_profile)
    # T_1 = W: the DAG's work is the sum of the per-stage rows (two separate code paths)
    assert p.work == pytest.approx(p.total_time, rel=1e-12)
    # PPO's values/ref/old passes run beside each other: the critical path is strictly shorter than the work
    assert p.depth < p.work
    g = p.graph()
    assert {"prefill", "decode", "values", "critic_update", "advantage"} <= set(g["nodes"])
    assert ["values", "advantage"] in g["edges"] and ["advantage", "critic_update"] in g["edges"]
    assert p.critical_path()[0] == "prefill"


def test_algorithms_hold_their_models(cpu_profile):
    stages = {a: {r.stage for r in predict("nano", a, _small(), cpu_profile).rows}
              for a in ("ppo", "grpo", "rloo", "reinforce_pp", "dapo")}
    assert Stage.VALUES in stages["ppo"] and Stage.CRITIC_UPDATE in stages["ppo"]
    assert Stage.VALUES not in stages["grpo"] and Stage.REF_LOGPROB in stages["grpo"]
    assert Stage.REF_LOGPROB not in stages["dapo"]
    assert stages["grpo"] == stages["rloo"] == stages["reinforce_pp"]
    no_ref = {r.stage for r in predict("nano", "grpo", _small(), cpu_profile, beta=0).rows}
    assert no_ref == stages["dapo"]
    m_ppo = predict("nano", "ppo", _small(), cpu_profile).memory
    m_grpo = predict("nano", "grpo", _small(), cpu_profile).memory
    assert m_ppo.optimizer > m_grpo.optimizer and m_ppo.weights > m_grpo.weights


def test_monotone(cpu_profile):
    base = predict("micro", "grpo", _small(), cpu_profile)
    more = predict("micro", "grpo", _small(prompts=8), cpu_profile)
    longer = predict("micro", "grpo", _small(response={"kind": "fixed", "length": 64}), cpu_profile)
    bigger = predict("mini", "grpo", _small(), cpu_profile)
    for other in (more, longer, bigger):
        assert other.total_time > base.total_time and other.total_flops > base.total_flops
    assert longer.rows[0].memory > base.rows[0].memory  # the KV cache during generation grows
    # decode step time never falls as the batch or the context grows
    spec = model_spec("micro")
    ts = [decode_step_time(spec, b, 32, cpu_profile, "fp32") for b in (1, 4, 16, 64, 256)]
    assert ts == sorted(ts)
    assert decode_step_time(spec, 8, 512, cpu_profile, "fp32") >= decode_step_time(spec, 8, 16, cpu_profile, "fp32")
    # a continuous engine never takes longer than the static one
    cont = predict("micro", "grpo", _small(response={"kind": "uniform", "low": 2, "high": 40}, engine="continuous"),
                   cpu_profile)
    stat = predict("micro", "grpo", _small(response={"kind": "uniform", "low": 2, "high": 40}), cpu_profile)
    assert cont.seconds("decode") <= stat.seconds("decode")


def test_dynamic_sampling_inflates_generation(cpu_profile):
    base = predict("nano", "dapo", _small(), cpu_profile)
    ds = predict("nano", "dapo", _small(dynamic_sampling_p=0.1, group_size=8), cpu_profile)
    ref = predict("nano", "dapo", _small(group_size=8), cpu_profile)
    assert ds.seconds("decode") == pytest.approx(ref.seconds("decode") * 1.76, rel=0.01)
    assert ds.seconds("actor_backward") == ref.seconds("actor_backward")
    # half the group size: half the sequences to decode, at the same per-step batch cost or less
    assert base.seconds("decode") < ref.seconds("decode")


def test_does_not_fit_reports_numbers():
    p = predict(str(REPO / "configs/models/qwen2.5-7b.config.json"), "grpo",
                dict(prompts=8, group_size=8, prompt_len=512, response=1024, precision="bf16-mixed"), "l4")
    assert not p.fits
    with pytest.raises(RlmLabError, match=r"does not fit: needs .* GiB per device .* l4 has 22.35 GiB"):
        p.total_time
    assert all(r["seconds"] is None for r in p.table())


def test_bad_input():
    with pytest.raises(RlmLabError, match="h200"):
        predict("nano", "grpo", {}, "no-such-gpu")
    with pytest.raises(RlmLabError, match="unknown algorithm"):
        predict("nano", "a2c", {}, "h200")
    with pytest.raises(RlmLabError, match="group_size"):
        workload_from_dict({"group_size": 0})
    with pytest.raises(RlmLabError, match="promts"):
        workload_from_dict({"promts": 3})
    with pytest.raises(RlmLabError, match="response.kind"):
        workload_from_dict({"response": {"kind": "gamma"}})
    with pytest.raises(RlmLabError, match="bf16"):
        predict("nano", "grpo", {"precision": "bf16-mixed"}, "t4")  # T4 has no bf16


def test_cli_predict(capsys, tmp_path):
    from rlm_lab.cli import main

    assert main(["predict", str(REPO / "configs/predict/grpo-qwen1.5b-h200.yaml")]) == 0
    out = capsys.readouterr().out
    assert "decode" in out and "Brent p=4" in out and "work W" in out
    assert main(["predict", str(REPO / "configs/predict/grpo-7b-oom-l4.yaml")]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["predict", "--hardware", "nope"]) == 2
    assert "known profiles" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: nano\nworkload: {prompts: -1}\n")
    assert main(["predict", str(bad)]) == 2
    assert "workload.prompts" in capsys.readouterr().err
    bad.write_text("modle: nano\n")
    assert main(["predict", str(bad)]) == 2
    assert "modle" in capsys.readouterr().err


def test_generate_time_matches_predict(cpu_profile):
    """generate_time (one call) equals predict's prefill + decode for one static generation batch."""
    from rlm_lab.cost import generate_time

    wl = _small(response={"kind": "fixed", "length": 12})
    p = predict("micro", "grpo", wl, cpu_profile)
    t = generate_time("micro", cpu_profile, 8, [12] * 16, dtype="fp32")
    assert t == pytest.approx(p.seconds("generate"), rel=1e-9)
    lengths = [2, 4, 12, 12]
    assert generate_time("micro", cpu_profile, 8, lengths, engine="continuous", dtype="fp32") < \
        generate_time("micro", cpu_profile, 8, lengths, dtype="fp32")
