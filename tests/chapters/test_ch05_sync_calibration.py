"""The sync calibration's fit (rlm_lab.chapters.ch05_placement.sync_calibration.fit) against a hand-derived line."""

import pytest


def test_fit_recovers_a_known_line_and_its_residual():
    from rlm_lab.chapters.ch05_placement.sync_calibration import fit

    # T = 4 ms + B / (250 MB/s), with +-0.1 ms noise alternating: the fit's residual RMS is exactly 0.1 ms
    samples = [(b, 0.004 + b / 250e6 + (1e-4 if i % 2 else -1e-4)) for b in (1024, 65536, 1 << 20)
               for i in range(2)]
    f = fit(samples)
    assert f["t0_s"] == pytest.approx(0.004, abs=1e-9)
    assert f["bandwidth_Bps"] == pytest.approx(250e6, rel=1e-6)
    assert f["residual_rms_s"] == pytest.approx(1e-4, rel=1e-6)
