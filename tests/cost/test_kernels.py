"""The kernel terms beyond the matrix products: elementwise work, the attention kernel's rate, TRL's
log-prob head, weight streaming and the KV-cache append (calibrate.py measures them; timing.py uses them)."""

import pytest

from rlm_lab.cost import load_profile, model_spec
from rlm_lab.cost.timing import (backward_time, decode_step_time, elementwise_elements, forward_time,
                                 kv_append_bytes)

KINDS = ("forward", "forward_grad", "backward")


def test_committed_cpu_profile_has_measured_kernels():
    prof = load_profile("cpu-2core-epyc")
    assert prof.kernels_measured
    for kind in KINDS:
        assert prof.kernels["elementwise"][kind]["s_per_element"] > 0
        # the fitted head terms reproduce the benchmark points they were fitted to (median |error| <= 25 %):
        # a dropped, swapped or mis-scaled coefficient fails this
        head = prof.kernels["logprob_head"][kind]
        errors = sorted(abs(prof.logprob_head_time(n, v, kind) / t - 1) for n, v, t in head["points"] if t > 0)
        assert errors[len(errors) // 2] <= 0.25, (kind, errors)
    assert len(prof.kernels["attention"]["curve"]) >= 3 and prof.kernels["attention"]["backward_curve"]
    assert prof.kernels["weight_stream"]["bandwidth"] > 0 and prof.kernels["weight_stream"]["cache_bytes"] > 0


def test_elementwise_count_and_growth():
    spec = model_spec("micro")
    per_token = spec.layers * (4 * spec.hidden + spec.d_attn + spec.kv_dim) + spec.layers * spec.intermediate
    assert elementwise_elements(spec, 10) == 10 * per_token
    prof = load_profile("cpu-2core-epyc")
    d = prof.to_dict()
    d["kernels"]["elementwise"] = {k: {"s_per_element": 1e-6} for k in KINDS}
    big = load_profile(d)
    # the elementwise term adds exactly elements * s_per_element, so it grows with tokens * hidden
    for tokens in (64, 1024):
        extra = forward_time(spec, big, 1, tokens, dtype="fp32", dtype_bytes=4) \
            - forward_time(spec, prof, 1, tokens, dtype="fp32", dtype_bytes=4)
        assert extra == pytest.approx(elementwise_elements(spec, tokens) * (1e-6 - prof.elementwise_s_per_element()),
                                      rel=1e-6)


def test_logprob_head_adds_to_forward_and_backward_only_when_asked():
    spec, prof = model_spec("micro"), load_profile("cpu-2core-epyc")
    plain = forward_time(spec, prof, 8, 32, dtype="fp32", dtype_bytes=4, grad=True)
    scored = forward_time(spec, prof, 8, 32, dtype="fp32", dtype_bytes=4, grad=True, logprob_rows=8 * 31)
    assert scored - plain == pytest.approx(prof.logprob_head_time(8 * 31, spec.vocab, "forward_grad"))
    assert backward_time(spec, prof, 8, 32, None, "fp32", 4, 8 * 31) > backward_time(spec, prof, 8, 32, None, "fp32", 4)
    assert prof.logprob_head_time(0, spec.vocab) == 0.0


def test_kv_append_only_for_the_static_engine():
    spec, prof = model_spec("micro"), load_profile("cpu-2core-epyc")
    cat = decode_step_time(spec, 64, 100, prof, "fp32", 4)
    paged = decode_step_time(spec, 64, 100, prof, "fp32", 4, kv_append=False)
    assert cat - paged == pytest.approx(kv_append_bytes(spec, 64, 100, 4) / prof.bandwidth())


def test_weight_streaming_only_beyond_the_cache():
    prof = load_profile("cpu-2core-epyc")
    llc = prof.kernels["weight_stream"]["cache_bytes"]
    assert prof.weight_stream_bandwidth(llc / 2) is None
    assert prof.weight_stream_bandwidth(2 * llc) == prof.kernels["weight_stream"]["bandwidth"]


@pytest.mark.parametrize("name", ["h100-sxm", "h200", "a100-80gb", "l4", "t4"])
def test_datasheet_profile_without_kernels_uses_assumed_terms(name):
    prof = load_profile(name)
    assert not prof.kernels_measured
    spec = model_spec("small")
    assert prof.elementwise_s_per_element("forward", 2) == pytest.approx(3 * 2 / prof.bandwidth())
    dt = "bf16" if "bf16" in prof.matmul_flops else "fp16"  # the T4 has no bf16
    assert prof.attention_rate(1e9, dt) == prof.matmul_rate(5e8, dt)
    assert prof.weight_stream_bandwidth(1e12) is None
    # compute only: on GPUs the launch overhead overlaps (and here exceeds) these tiny kernels
    t = forward_time(spec, prof, 4, 64, dtype=dt, overhead=False, logprob_rows=4 * 63)
    assert t > forward_time(spec, prof, 4, 64, dtype=dt, overhead=False) > 0
