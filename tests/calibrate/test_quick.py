"""The machine check of predict/validate: which profiles it speaks about, and what it says (the micro-benchmark
itself replaced by a stub with known ratios; its real run is timed by `rlm-lab predict --check-machine`)."""

import copy
import types

import pytest

from rlm_lab.calibrate import quick as Q
from rlm_lab.calibrate.quick import machine_line, quick_check, stable_check, step_error
from rlm_lab.cost import load_profile
from rlm_lab.cost.cli import predict_from_config
from rlm_lab.host import key_of_provenance

HERE = {"host": "vm", "cpu_model": "AMD EPYC", "cores": 2, "torch": "2.13.0+cpu", "threads": 2}


def quiet():
    return (0.0, 0.0, 0.0)


def stub(*medians):
    """A check whose successive rounds read ``medians`` (the last repeated)."""
    seq = list(medians)

    def run(prof):
        m = seq.pop(0) if len(seq) > 1 else seq[0]
        return {"median": m, "n": 3, "products": m, "ratios": {"memory": m}}
    return run


def test_a_profile_of_another_machine_is_named_with_the_check():
    prof = load_profile("cpu-2core-epyc")
    assert key_of_provenance(prof.provenance) == HERE  # the committed profile's machine, as its provenance says
    line = machine_line(prof, key=HERE | {"threads": 4, "host": "laptop"}, run_check=stub(0.55), loadavg=quiet)
    assert "measured on another machine (host: 'vm' != 'laptop'; threads: 2 != 4)" in line
    assert "0.55x the profile's rates" in line and f"off by about {step_error(prof, 0.55):+.0%}" in line
    assert "calibrate this machine" in line
    # the same key: nothing to say, unless asked; asked, the check runs and a close match is not a warning
    assert machine_line(prof, key=HERE, run_check=stub(0.5), loadavg=quiet) is None
    line = machine_line(prof, check=True, key=HERE, run_check=stub(1.02), loadavg=quiet)
    assert "has this machine's key" in line and "1.02x" in line and "calibrate this machine" not in line


def test_datasheets_and_gpu_profiles():
    assert machine_line(load_profile("h200"), check=True, key=HERE, run_check=stub(1.0), loadavg=quiet) is None
    gpu = types.SimpleNamespace(kind="calibrated", name="h200-cal", provenance={
        "host": "gpu-box", "hardware": {"cpu_count": 16, "cpu_model": "x", "torch_threads": 16, "gpus": ["H200"]},
        "versions": {"torch": "2.13.0"}})
    assert machine_line(gpu, key=HERE, run_check=stub(1.0), loadavg=quiet).endswith("not checked here (a GPU profile)")


def test_the_quick_check_compares_like_with_like():
    # a profile whose curve and bandwidth are this machine's own measurement at the same shapes reads about 1x;
    # one claiming 16x the rates reads about 1/16 (the ratio is here / profile); the bounds leave room for the
    # machine's load to change by up to 4x between the two measurements (a shared 2-core CI machine)
    from rlm_lab.calibrate.benchmarks import bench_bandwidth, bench_matmul, bench_op

    op = bench_op("cpu", 0.02)
    curve = bench_matmul("cpu", "fp32", True, op, 0.02)
    bw = bench_bandwidth("cpu", True, 0.02)
    import torch

    fast = types.SimpleNamespace(matmul_curve={"fp32": [[f, 16 * r] for f, r in curve]}, memory_bandwidth=16 * bw,
                                 threads=torch.get_num_threads())   # thread-matched: measured with these threads
    q = quick_check(fast, budget_s=0.02)
    assert 1 / 64 < q["median"] < 1 / 4 and q["n"] == len(curve) + 1


# ---- a check that tells the truth (issue 35, item 5) ---------------------------------------------------------

def test_a_busy_machine_is_said_not_measured():
    calls = []
    line = machine_line(load_profile("cpu-2core-epyc"), key=HERE | {"host": "laptop"},
                        run_check=lambda p: calls.append(p) or {}, loadavg=lambda: (9.0, 9.0, 9.0))
    assert calls == [] and "not checked here: the machine is busy (1-minute load 9.00" in line
    assert "x the profile's rates" not in line


def test_the_check_repeats_until_three_rounds_agree_and_an_unsettled_one_states_no_factor():
    prof = load_profile("cpu-2core-epyc")
    q = stable_check(prof, stub(0.04, 2.91, 1.0, 1.05, 1.02), quiet)          # the spread, then settling
    assert q["stable"] and q["rounds"] == 5 and q["median"] == 1.02 and q["medians"][:2] == [0.04, 2.91]
    q = stable_check(prof, stub(0.017, 2.55, 0.5, 1.9, 0.3, 2.2), quiet)
    assert not q["stable"] and q["rounds"] == Q.MAX_ROUNDS
    line = machine_line(prof, key=HERE | {"host": "laptop"}, run_check=stub(0.017, 2.55, 0.5, 1.9, 0.3, 2.2),
                        loadavg=quiet)
    assert "did not settle (0.02x to 2.55x the profile's rates): no factor stated" in line and "off by" not in line


def test_the_check_runs_with_the_profiles_thread_count(monkeypatch):
    import os

    import torch

    from rlm_lab.calibrate import benchmarks as B

    seen = []
    monkeypatch.setattr(B, "bench_op", lambda *a: seen.append(torch.get_num_threads()) or 1e-6)
    monkeypatch.setattr(B, "bench_matmul", lambda *a: [(1e6, 1e9)])
    monkeypatch.setattr(B, "bench_bandwidth", lambda *a: 1e9)
    before = torch.get_num_threads()
    prof = types.SimpleNamespace(threads=1, matmul_curve={"fp32": [[1e6, 1e9]]}, memory_bandwidth=1e9)
    assert quick_check(prof)["median"] == pytest.approx(1.0)
    many = types.SimpleNamespace(threads=512, matmul_curve={}, memory_bandwidth=1e9)
    quick_check(many)
    assert seen == [1, min(512, os.cpu_count())] and torch.get_num_threads() == before


def _slower_by_hand(d: dict, s: float) -> dict:
    """``d`` with every kernel rate divided by ``s`` (every kernel time multiplied), field by field."""
    d = copy.deepcopy(d)
    d["matmul_flops"] = {k: v / s for k, v in d["matmul_flops"].items()}
    d["matmul_curve"] = {k: [[f, r / s] for f, r in c] for k, c in d["matmul_curve"].items()}
    d["memory_bandwidth"] /= s
    k = d["kernels"]
    for c in ("curve", "backward_curve"):
        k["attention"][c] = [[f, r / s] for f, r in k["attention"][c]]
    for term in k["elementwise"].values():
        term["s_per_element"] *= s
    for term in k["logprob_head"].values():
        for key in ("base_s", "s_per_row", "s_per_element"):
            term[key] *= s
    k["weight_stream"]["bandwidth"] /= s
    return d


@pytest.mark.parametrize("s", [0.5, 2.0])
def test_the_stated_error_is_the_real_prediction_error_of_a_profile_of_another_speed(s):
    """Two profiles: this machine's (A) and one whose kernels were measured s times slower (B, scaled by hand).
    On this machine the quick check would read ratio s against B; the error the line states for B must be the
    error B's prediction really makes against A's, in direction and size, and smaller than the ratio's own."""
    a = load_profile("cpu-2core-epyc")
    b = load_profile(_slower_by_hand(a.to_dict() | {"name": "b"}, s))
    real = predict_from_config({"hardware": b}).total_time / predict_from_config({"hardware": a}).total_time - 1
    stated = step_error(b, s)
    assert stated == pytest.approx(real, rel=1e-6)
    assert (stated > 0) == (s > 1) and abs(stated) < abs(s - 1)     # the per-call share does not scale
