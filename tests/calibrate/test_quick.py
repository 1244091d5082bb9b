"""The machine check of predict/validate: which profiles it speaks about, and what it says (the micro-benchmark
itself replaced by a stub with known ratios; its real run is timed by `rlm-lab predict --check-machine`)."""

import types

from rlm_lab.calibrate.quick import machine_line, quick_check
from rlm_lab.cost import load_profile
from rlm_lab.host import key_of_provenance

HERE = {"host": "vm", "cpu_model": "AMD EPYC", "cores": 2, "torch": "2.13.0+cpu", "threads": 2}


def stub(median):
    return lambda prof: {"median": median, "n": 3, "products": median, "ratios": {"memory": median}}


def test_a_profile_of_another_machine_is_named_with_the_check():
    prof = load_profile("cpu-2core-epyc")
    assert key_of_provenance(prof.provenance) == HERE  # the committed profile's machine, as its provenance says
    line = machine_line(prof, key=HERE | {"threads": 4, "host": "laptop"}, run_check=stub(0.55))
    assert "measured on another machine (host: 'vm' != 'laptop'; threads: 2 != 4)" in line
    assert "0.55x the profile's rates" in line and "off by about that factor" in line
    # the same key: nothing to say, unless asked; asked, the check runs and a close match is not a warning
    assert machine_line(prof, key=HERE, run_check=stub(0.5)) is None
    line = machine_line(prof, check=True, key=HERE, run_check=stub(1.02))
    assert "has this machine's key" in line and "1.02x" in line and "off by" not in line


def test_datasheets_and_gpu_profiles():
    assert machine_line(load_profile("h200"), check=True, key=HERE, run_check=stub(1.0)) is None
    gpu = types.SimpleNamespace(kind="calibrated", name="h200-cal", provenance={
        "host": "gpu-box", "hardware": {"cpu_count": 16, "cpu_model": "x", "torch_threads": 16, "gpus": ["H200"]},
        "versions": {"torch": "2.13.0"}})
    assert machine_line(gpu, key=HERE, run_check=stub(1.0)).endswith("not checked here (a GPU profile)")


def test_the_quick_check_compares_like_with_like():
    # a profile whose curve and bandwidth are this machine's own measurement at the same shapes reads about 1x;
    # one claiming 16x the rates reads about 1/16 (the ratio is here / profile); the bounds leave room for the
    # machine's load to change by up to 4x between the two measurements (a shared 2-core CI machine)
    from rlm_lab.calibrate.benchmarks import bench_bandwidth, bench_matmul, bench_op

    op = bench_op("cpu", 0.02)
    curve = bench_matmul("cpu", "fp32", True, op, 0.02)
    bw = bench_bandwidth("cpu", True, 0.02)
    fast = types.SimpleNamespace(matmul_curve={"fp32": [[f, 16 * r] for f, r in curve]}, memory_bandwidth=16 * bw)
    q = quick_check(fast, budget_s=0.02)
    assert 1 / 64 < q["median"] < 1 / 4 and q["n"] == len(curve) + 1
