"""Layout validation: bad degrees fail with one clear error before any process starts."""

import time

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.parallel.mesh import Layout, validate


def test_good_layouts_pass_and_name_themselves():
    assert validate(Layout(dp=2), "nano", world_size=2, batch=8, seq=16).world == 2
    assert Layout(dp=2, tp=2, zero=3).name() == "dp2-tp2-zero3"
    assert Layout(tp=2, sp=True).name() == "tp2-sp"
    assert Layout().name() == "single"
    assert Layout(pp=2, schedule="gpipe").name() == "pp2-gpipe"
    assert Layout(pp=2, dp=2, tp=2).shape == (2, 2, 1, 1, 2)


@pytest.mark.parametrize("layout, model, needle", [
    (Layout(tp=3), "nano", "--tp 3 does not divide the model's 4 attention heads"),
    (Layout(tp=8), "mini", "--tp 8 does not divide the model's 4 KV heads"),
    (Layout(pp=3), "nano", "--pp 3 does not divide the model's 2 layers"),
    (Layout(ep=2), "nano", "needs a mixture-of-experts model"),
    (Layout(ep=3), "nano-moe", "--ep 3 does not divide the model's 4 experts"),
    (Layout(tp=1, sp=True), "nano", "it needs --tp > 1"),
    (Layout(dp=2, tp=2), "nano", "use --zero 2 or --zero 3"),
    (Layout(dp=2, tp=2, zero=1), "nano", "--zero 1 (ZeroRedundancyOptimizer) composes only with plain DP"),
    (Layout(zero=4), "nano", "unknown ZeRO stage 4"),
    (Layout(pp=2, schedule="zb"), "nano", "unknown pipeline schedule 'zb'"),
    (Layout(pp=2, dp=2), "nano", "--pp runs alone here (every other degree 1); it does not compose with --dp 2"),
    (Layout(cp=2, tp=2), "nano", "--cp runs alone here (every other degree 1); it does not compose with --tp 2"),
    (Layout(ep=2, dp=2), "nano-moe", "--ep runs alone here (every other degree 1); it does not compose with --dp 2"),
    (Layout(zero=2), "nano", "--zero 2 shards over the data-parallel ranks; it needs --dp > 1"),
    (Layout(pp=2, microbatches=-1), "nano", "--microbatches must be >= 0"),
    (Layout(pp=2, microbatches=1), "nano", "--microbatches 1 < 2 pipeline stages"),
    (Layout(dp=2, microbatches=4), "nano", "it needs --pp > 1"),
    (Layout(dp=0), "nano", "--dp must be a positive integer"),
])
def test_bad_layouts_name_the_fix(layout, model, needle):
    with pytest.raises(RlmLabError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        validate(layout, model)


def test_world_size_must_equal_product_of_degrees():
    with pytest.raises(RlmLabError, match=r"world size 4 != product of degrees .* = 2; start 2 processes"):
        validate(Layout(dp=2), "nano", world_size=4)


def test_batch_and_sequence_must_split():
    with pytest.raises(RlmLabError, match="batch 6 does not split over 4 data-parallel ranks"):
        validate(Layout(dp=4), "nano", batch=6)
    with pytest.raises(RlmLabError, match="x 4 micro-batches"):
        validate(Layout(pp=2), "nano", batch=6)
    with pytest.raises(RlmLabError, match="sequence length 15 must be a multiple of 2"):
        validate(Layout(tp=2, sp=True, zero=0), "nano", seq=15)
    with pytest.raises(RlmLabError, match="exceeds the model's 512 positions"):
        validate(Layout(), "nano", seq=1024)
    with pytest.raises(RlmLabError, match="batch must be a positive number of sequences, got 0"):
        validate(Layout(dp=2), "nano", batch=0)  # 0 % 2 == 0: it used to pass and fail in every rank
    with pytest.raises(RlmLabError, match="sequence length must be >= 2"):
        validate(Layout(), "nano", seq=1)


def test_bad_layout_fails_before_any_process_starts():
    from rlm_lab.parallel.bench.measure import spawn_layouts

    t0 = time.perf_counter()
    with pytest.raises(RlmLabError, match="--tp 3 does not divide"):
        spawn_layouts([Layout(tp=3)], world=3)
    assert time.perf_counter() - t0 < 2.0  # starting 3 processes alone takes several seconds


def test_unknown_model_is_a_clear_error():
    with pytest.raises(RlmLabError, match="unknown model 'gpt5'"):
        validate(Layout(), "gpt5")


def test_cli_rejects_a_bad_layout_in_one_line_without_starting_ranks():
    import subprocess
    import sys

    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "rlm_lab.cli", "parallel", "--dp", "2", "--tp", "3"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "torchrun" not in p.stderr
    assert p.stderr.strip().splitlines() == ["rlm-lab: error: --tp 3 does not divide the model's 4 attention heads; "
                                             "choose --tp from 1, 2, 4"]
    assert time.perf_counter() - t0 < 20
