"""Nothing the book shows depends on which CPU builds it (issue 35): a committed record is priced with the
profile of the machine that made it (its provenance names it), and ``$RLM_FAKE_MACHINE=1`` fakes this machine's
CPU model and host name to ones no committed profile or record names (CI runs the tests that consult the
machine under it: ``make test-fake-machine``)."""

import pytest

from rlm_lab import device, host
from rlm_lab.cost.hardware import CPU_PROFILE, load_profile, profile_of_machine, same_machine
from rlm_lab.errors import RlmLabError
from rlm_lab.record import hardware, provenance

EPYC = {"cpu_model": "AMD EPYC", "cpu_count": 2}


def test_the_switch_fakes_the_cpu_model_and_host_everywhere_they_are_read(monkeypatch):
    monkeypatch.setenv(device.FAKE_ENV, "1")
    assert device.cpu_name() == device.FAKE_CPU and host.host_name() == device.FAKE_HOST
    assert host.machine_key()["cpu_model"] == device.FAKE_CPU and host.machine_key()["host"] == device.FAKE_HOST
    prov = provenance("test")
    assert prov["hardware"]["cpu_model"] == device.FAKE_CPU and prov["host"] == device.FAKE_HOST
    assert prov["machine_key"]["cpu_model"] == device.FAKE_CPU
    from rlm_lab.cost.hardware import known_profiles

    assert device.default_name("cpu") not in known_profiles()   # a name no committed profile has
    monkeypatch.setenv(device.FAKE_ENV, "0")
    assert device.cpu_name() != device.FAKE_CPU and not device.faked()


def test_a_record_is_priced_with_the_profile_of_the_machine_that_made_it_whatever_builds_the_book(monkeypatch):
    for fake in ("0", "1"):  # the building machine, real or faked, changes nothing
        monkeypatch.setenv(device.FAKE_ENV, fake)
        prof = profile_of_machine(EPYC)
        assert prof is not None and prof.name == CPU_PROFILE
        assert profile_of_machine({"hardware": EPYC}).name == CPU_PROFILE     # a whole provenance works too
    assert profile_of_machine({"cpu_model": device.FAKE_CPU, "cpu_count": 2}) is None
    assert profile_of_machine({"cpu_model": "AMD EPYC", "cpu_count": 4}) is None      # cores count
    assert profile_of_machine({}) is None


def test_a_gpu_profile_calibrated_on_a_machine_of_that_cpu_is_not_its_cpu_profile():
    gpu = load_profile("nvidia-h200-calibrated-20261204")
    hw = gpu.provenance["hardware"]
    assert same_machine(hw, gpu.provenance)           # the same CPU made it ...
    assert profile_of_machine(hw) is None             # ... but it is a GPU's profile, not this CPU's


def test_a_check_the_profile_fails_skips_it():
    def no(prof):
        raise RlmLabError("lacks it")

    assert profile_of_machine(EPYC, check=no) is None
    assert profile_of_machine(EPYC, check=lambda p: p.collective("all_reduce")).name == CPU_PROFILE


def test_chapter_4_prices_its_committed_records_with_their_machine_on_an_unknown_one(monkeypatch):
    from rlm_lab.chapters.ch04_parallelism import report as R
    from rlm_lab.chapters.ch04_parallelism.run import load_records
    from rlm_lab.record import reference_root

    monkeypatch.setenv(device.FAKE_ENV, "1")
    recs = load_records(reference_root("cpu"))
    prof = R.calibrated_profile(recs)
    assert prof is not None and same_machine(recs[0].data["provenance"], prof.provenance)
    _, rows, profile, _ = R.committed("cpu")
    assert profile.name == prof.name and all(r.get("predicted_ms") is not None for r in rows)


def test_chapter_4_refuses_records_of_two_machines_in_one_table():
    from types import SimpleNamespace

    from rlm_lab.chapters.ch04_parallelism import report as R

    recs = [SimpleNamespace(data={"provenance": {"hardware": hw}}) for hw in (EPYC, EPYC | {"cpu_count": 4})]
    with pytest.raises(RlmLabError, match="2 machines"):
        R.calibrated_profile(recs)
    assert R.calibrated_profile([]) is None


def test_fresh_messages_are_priced_with_this_machines_profile_and_none_on_an_unknown_machine(monkeypatch):
    from rlm_lab.parallel.bench.common import comm_profile

    monkeypatch.setenv(device.FAKE_ENV, "1")
    assert hardware()["cpu_model"] == device.FAKE_CPU
    assert comm_profile() is None                              # never another machine's profile
    assert comm_profile(CPU_PROFILE).name == CPU_PROFILE       # unless asked for by name
