"""The generation-loop terms: charged per decode step in proportion to the batch, absent from old profiles,
and the fit recovers a known line from synthetic residuals."""

import pytest

from rlm_lab.cost import decode_step_time, load_profile, model_spec
from rlm_lab.calibrate import loop_benchmarks as LB
from rlm_lab.cost.hardware import profile_from_dict


def test_terms_are_charged_per_step_and_row():
    spec, base = model_spec("micro"), load_profile("cpu-2core-epyc")
    prof = profile_from_dict(LB.with_loop_terms(base, {"generate_loop_base_s": 1e-3, "generate_loop_row_s": 2e-5}))
    for b in (1, 64):
        extra = decode_step_time(spec, b, 20, prof, "fp32", 4) - decode_step_time(spec, b, 20, base, "fp32", 4)
        assert extra == pytest.approx(1e-3 + b * 2e-5)
    # a paged cache (not HF generate) is not charged the HF loop
    assert decode_step_time(spec, 8, 20, prof, "fp32", 4, kv_append=False) == \
        decode_step_time(spec, 8, 20, base, "fp32", 4, kv_append=False)


def test_fit_recovers_a_known_line(monkeypatch):
    """bench_generate_loop with generate and the clock replaced: residual = 2 ms + 30 µs * b, exactly."""
    import statistics

    from rlm_lab.cost.spec import spec_from_config


    class FakeModel:
        def __init__(self, L):
            from rlm_lab.calibrate.benchmarks import _tiny_lm

            self.config = _tiny_lm(L, "cpu").config

    monkeypatch.setattr(LB, "_tiny_lm", lambda L, d: FakeModel(L))
    prof = load_profile("cpu-2core-epyc")

    def fake_time(fn, budget):  # t(1 token) = 0; t(new + 1 tokens) = new * (modelled + residual)
        return fake_time.values.pop(0)

    values = []
    for L in LB.LAYERS:
        spec = spec_from_config(FakeModel(L).config)
        for b in LB.BATCHES:
            m = statistics.fmean(decode_step_time(spec, b, LB.PROMPT + k, prof, "fp32", 4) for k in range(1, 17))
            values += [0.0, 16 * (m + 2e-3 + 3e-5 * b)]
    fake_time.values = values
    monkeypatch.setattr(LB, "_timeit", fake_time)
    monkeypatch.setattr(LB, "_padded_batch", lambda b, d: (None, None))
    FakeModel.generate = lambda self, *a, **k: None
    fit = LB.bench_generate_loop(prof, new=16)
    assert fit["generate_loop_base_s"] == pytest.approx(2e-3, rel=1e-6)
    assert fit["generate_loop_row_s"] == pytest.approx(3e-5, rel=1e-6)


def test_padded_batch_is_left_padded_like_trl():
    ids, mask = LB._padded_batch(4, "cpu")
    assert ids.shape == (4, LB.PROMPT) and mask[1::2, 0].sum() == 0 and mask[0::2].all() and mask[:, 1:].all()
    assert (ids[1::2, 0] == 0).all()
