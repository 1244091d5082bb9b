"""Hardware profiles: schema, datasheet labels, unknown names, and a quick calibration."""

import json

import pytest

from rlm_lab.cost.hardware import HARDWARE_DIR, known_profiles, load_profile, profile_from_dict
from rlm_lab.errors import RlmLabError

DATASHEET = ("h100-sxm", "h200", "a100-80gb", "l4", "t4")


@pytest.mark.parametrize("name", known_profiles())
def test_every_profile_loads(name):
    prof = load_profile(name)
    assert prof.name == name and prof.kind in ("calibrated", "datasheet")
    assert prof.bandwidth() > 0 and prof.memory_bytes > 0
    assert all(prof.matmul_rate(f, dt) > 0 for dt in prof.matmul_flops for f in (1e3, 1e9, 1e13))
    if prof.kind == "calibrated":
        assert prof.provenance.get("versions") and prof.threads
        one_gpu = len(prof.provenance.get("hardware", {}).get("gpus", [])) == 1
        # collectives need two devices: a one-GPU calibration says so instead of carrying fits
        assert prof.collectives["ops"] or (one_gpu and "not measured" in prof.collectives.get("note", "")), \
            "a committed calibrated profile carries collective fits (or, from one GPU, says why not)"


def _calibrations():
    from rlm_lab.cost.spread import calibration_files

    return calibration_files("cpu-2core-epyc")


@pytest.mark.parametrize("path", _calibrations(), ids=lambda p: p.stem)
def test_every_committed_calibration_loads_and_is_dated_as_named(path):
    """data/hardware/calibrations/<name>-<date>.json: a loadable calibrated profile of this machine, made
    on the day its file name says (provenance written by the calibration itself)."""
    prof = load_profile(path)
    assert prof.kind == "calibrated" and prof.threads == load_profile("cpu-2core-epyc").threads
    assert prof.device == load_profile("cpu-2core-epyc").device
    assert prof.provenance["date"][:10] == path.stem.removeprefix("cpu-2core-epyc-")[:10]
    if prof.spread:  # a repeated calibration records its load and spread
        assert prof.spread["repeats"] >= 2 and "busy" in prof.load


@pytest.mark.parametrize("name", DATASHEET)
def test_datasheet_profiles_are_labelled(name):
    prof = load_profile(name)
    assert prof.kind == "datasheet" and prof.source.startswith("NVIDIA") and "https://" in prof.source
    assert "ASSUMED" in prof.notes


def test_h200_ridge_batch():
    """Roofline ridge point (Williams et al., CACM 2009): b* ~ F/BW tokens: H100 ~295, H200 ~206, A100 ~156 (bf16, peaks)."""
    ridge = {n: load_profile(n).peak_flops("bf16") / load_profile(n).memory_bandwidth for n in DATASHEET[:3]}
    assert ridge["h100-sxm"] == pytest.approx(295, abs=2)
    assert ridge["h200"] == pytest.approx(206, abs=2)
    assert ridge["a100-80gb"] == pytest.approx(153, abs=4)


def test_unknown_and_malformed():
    with pytest.raises(RlmLabError, match="known profiles: .*h200"):
        load_profile("h300")
    d = json.loads((HARDWARE_DIR / "h200.json").read_text())
    for field in ("memory_bandwidth", "overhead", "kind"):
        bad = {k: v for k, v in d.items() if k != field}
        with pytest.raises(RlmLabError, match=field):
            profile_from_dict(bad)
    with pytest.raises(RlmLabError, match="decode_step_base_s"):
        profile_from_dict(d | {"overhead": {"op_s": 1e-6}})


def test_curve_interpolation():
    d = json.loads((HARDWARE_DIR / "h200.json").read_text())
    prof = profile_from_dict(d | {"matmul_curve": {"fp32": [[1e3, 1e9], [1e7, 1e11]]}})
    assert prof.matmul_rate(1e2, "fp32") == 1e9 and prof.matmul_rate(1e9, "fp32") == 1e11
    assert prof.matmul_rate(1e5, "fp32") == pytest.approx(1e10)  # log-log midpoint


@pytest.mark.slow
def test_quick_calibration_writes_a_valid_profile(tmp_path):
    """One quick pass end to end (the fits and the repeats are tested on synthetic data in
    test_fitting.py and test_calibration_repeats.py): a profile that loads, with its spread and load
    recorded, and no overwrite of an existing profile unless asked."""
    from rlm_lab.calibrate.profile import calibrate

    out = tmp_path / "quick.json"
    path = calibrate(out, quick=True, collectives=False, name="test-quick", allow_busy=True)
    prof = load_profile(path)
    assert prof.kind == "calibrated" and prof.source.endswith("--quick")
    assert len(prof.matmul_curve["fp32"]) >= 5 and prof.spread["repeats"] == 1
    assert prof.spread["quartiles"]["memory_bandwidth"] == [prof.memory_bandwidth] * 2  # one repeat: no spread
    assert set(prof.load) >= {"before", "after", "busy", "max_load_per_core"}
    with pytest.raises(RlmLabError, match="exists; pass --force"):
        calibrate(out, quick=True, collectives=False)


@pytest.mark.dist
@pytest.mark.slow
def test_collective_benchmark_gloo():
    """The 2-process benchmark runs every op at every size on both ranks and fits each (the alpha-beta fit
    itself is checked on synthetic points in test_fitting.py; timing relations between sizes are not
    asserted: with other jobs on the 2 cores a descheduled 1 KiB op can outlast a 1 MiB one)."""
    from rlm_lab.calibrate.benchmarks import bench_collectives

    coll = bench_collectives("cpu", quick=True)
    assert coll["backend"] == "gloo" and coll["world"] == 2
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"):
        assert [nb for nb, _ in coll["points"][op]] == [1024, 65536, 1 << 20] and op in coll["ops"]


def test_calibrate_cli_help(capsys):
    from rlm_lab.cli import main

    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--help"])
    assert e.value.code == 0 and "--quick" in capsys.readouterr().out


@pytest.mark.parametrize("argv, msg", [
    (["--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["--max-load", "-1"], "--max-load must be a positive number, got -1.0"),
    (["--out", str(HARDWARE_DIR / "cpu-2core-epyc.json")], "cpu-2core-epyc.json exists; pass --force to replace it"),
])
def test_calibrate_bad_input_is_one_line_before_any_work(capsys, argv, msg):
    from rlm_lab.cli import main

    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlm-lab: error: ") and msg in err and err.count("\n") == 1


def test_default_name_from_cpu():
    from rlm_lab.device import default_name

    name = default_name("cpu")
    assert name.startswith("cpu-") and "core-" in name and name == name.lower()


def test_a_profile_calibrated_without_collectives_says_what_to_use_instead():
    prof = load_profile("nvidia-h200-calibrated-20261204")   # one GPU: no collectives could be measured
    with pytest.raises(RlmLabError, match="calibrated without collectives .*datasheet profile"):
        prof.collective("all_reduce")
    with pytest.raises(RlmLabError, match=r"it has: none \(re-run rlm-lab calibrate\)"):
        profile_from_dict(prof.to_dict() | {"name": "x", "collectives": {"ops": {}}}).collective("all_reduce")
