"""TRL's defaults in the time model: bf16 autocast reads its own measured curves (forward, backward, attention),
gradient checkpointing adds one forward of the layers (not the head) plus the measured per-layer overhead, and the
workload carries both switches (bad values are one clear error)."""

import pytest

from rlm_lab.cost import Workload, load_profile, model_spec, predict
from rlm_lab.calibrate.autocast_benchmarks import with_autocast_terms
from rlm_lab.cost.hardware import profile_from_dict
from rlm_lab.cost.timing import backward_time, forward_time, matmul_time
from rlm_lab.errors import RlmLabError


def _autocast_profile(backward_slowdown: float = 1.0, attention_slowdown: float = 1.0, layer_s: float = 0.0):
    """The committed CPU profile with 'measured' autocast terms made from its own fp32 curves."""
    base = load_profile("cpu-2core-epyc")
    fp32 = base.matmul_curve["fp32"]
    att = base.kernels["attention"]
    measured = {"overhead": {"checkpoint_base_s": 1e-4, "checkpoint_layer_s": layer_s},
                "matmul": {"forward": fp32, "backward": [[f, r / backward_slowdown] for f, r in fp32]},
                "attention": {"curve": [[f, r / attention_slowdown] for f, r in att["curve"]],
                              "backward_curve": att["backward_curve"]}}
    return profile_from_dict(with_autocast_terms(base, measured))


def test_backward_products_use_their_own_bf16_curve():
    spec = model_spec("micro")
    same, slow = _autocast_profile(1.0), _autocast_profile(3.0)
    t1 = backward_time(spec, same, 8, 20, 8 * 9, "bf16", 4)
    t3 = backward_time(spec, slow, 8, 20, 8 * 9, "bf16", 4)
    # the backward's products (2 x the forward's) take 3x as long at a third of the rate: +2 x 2 x products
    products = matmul_time(spec, same, 160, 72, "bf16", 4)
    assert t3 - t1 == pytest.approx(4 * products, rel=0.02)  # not exactly: the roofline's bandwidth floor
    assert backward_time(spec, same, 8, 20, 72, "fp32", 4) == pytest.approx(t1)  # fp32 never reads the bf16 curve


def test_attention_reads_the_autocast_curve_only_for_bf16():
    prof = _autocast_profile(attention_slowdown=10.0)
    f = 1e6
    assert prof.attention_rate(f, "bf16") == pytest.approx(prof.attention_rate(f, "fp32") / 10, rel=1e-9)


def test_recompute_is_one_forward_of_the_layers_plus_the_checkpoint_overhead():
    spec, prof = model_spec("micro"), _autocast_profile(layer_s=2e-4)
    plain = backward_time(spec, prof, 8, 20, 72, "fp32", 4, logprob_rows=8 * 19)
    ckpt = backward_time(spec, prof, 8, 20, 72, "fp32", 4, logprob_rows=8 * 19, recompute=True)
    # second implementation: forward_time with autograd, no head (logits 0, no log-prob rows), no call overhead
    layers_fwd = forward_time(spec, prof, 8, 20, 0, "fp32", 4, overhead=False, grad=True)
    assert ckpt - plain == pytest.approx(layers_fwd + 1e-4 + spec.layers * 2e-4, rel=1e-9)
    # the head is not recomputed: the recompute is cheaper than a whole forward with the head
    assert ckpt - plain < forward_time(spec, prof, 8, 20, 72, "fp32", 4, grad=True, logprob_rows=8 * 19) + 1e-4 + \
        spec.layers * 2e-4


def test_workload_switches_reach_the_prediction():
    prof = _autocast_profile(backward_slowdown=4.0, layer_s=2e-4)
    wl = dict(prompts=8, group_size=4, prompt_len=6, response=8, precision="fp32")
    base = predict("micro", "grpo", Workload(**wl), prof)
    ac = predict("micro", "grpo", Workload(**wl, autocast=True), prof)
    ck = predict("micro", "grpo", Workload(**wl, gradient_checkpointing=True), prof)
    assert Workload(**wl, autocast=True).dtype == "bf16" and Workload(**wl).dtype == "fp32"
    assert ac.seconds("actor_backward") > 2 * base.seconds("actor_backward")   # the 4x slower backward products
    assert ac.memory.weights == base.memory.weights                           # fp32 weights under autocast
    assert ck.seconds("actor_backward") > base.seconds("actor_backward")
    assert ck.seconds("generate") == base.seconds("generate") and ck.seconds("ref_logprob") == base.seconds("ref_logprob")
    assert ck.memory.activations < base.memory.activations or ck.memory.total <= base.memory.total
    with pytest.raises(RlmLabError, match="workload.gradient_checkpointing must be true or false"):
        Workload(**wl, gradient_checkpointing="yes")
    with pytest.raises(RlmLabError, match="no matmul rate for dtype 'bf16'"):
        predict("micro", "grpo", Workload(**wl, autocast=True), "cpu-2core-epyc")  # no bf16 measured there


def test_autocast_call_overheads_are_charged_per_call_for_bf16_only():
    from rlm_lab.cost import decode_step_time

    spec, prof = model_spec("micro"), _autocast_profile()
    d = prof.to_dict()
    d["overhead"] = {**d["overhead"], **{f"autocast_{k}_{p}_s": v for k in ("forward", "backward", "decode")
                                         for p, v in (("base", 1e-3), ("layer", 1e-4))}}
    extra = profile_from_dict(d)
    add = 1e-3 + spec.layers * 1e-4
    assert forward_time(spec, extra, 4, 16, 4, "bf16", 4) - forward_time(spec, prof, 4, 16, 4, "bf16", 4) == \
        pytest.approx(add)
    assert backward_time(spec, extra, 4, 16, 4, "bf16", 4) - backward_time(spec, prof, 4, 16, 4, "bf16", 4) == \
        pytest.approx(add)
    assert decode_step_time(spec, 4, 16, extra, "bf16", 4) - decode_step_time(spec, 4, 16, prof, "bf16", 4) == \
        pytest.approx(add)
    assert forward_time(spec, extra, 4, 16, 4, "fp32", 4) == forward_time(spec, prof, 4, 16, 4, "fp32", 4)


def test_predict_cli_trl_defaults_switch_both_on(capsys):
    import json

    from rlm_lab.cli import main

    args = ["predict", "--model", "micro", "--algo", "grpo", "--hardware", "h100-sxm", "--prompts", "4", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--trl-defaults"]) == 0
    trl = json.loads(capsys.readouterr().out)
    assert trl["workload"]["autocast"] and trl["workload"]["gradient_checkpointing"]
    assert not plain["workload"]["autocast"] and not plain["workload"]["gradient_checkpointing"]
    # (the time effect of both switches is tested on predict() above; tiny models on a GPU are overhead-bound)
