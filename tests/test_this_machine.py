"""The default profile is this machine's, measured in situ (issue 35, item 2): on a machine with no profile of
its own (faked: ``$RLM_FAKE_MACHINE``) ``predict`` says in one line that it calibrates in situ, does it (a fake
calibrator here: no test runs the real two-minute one), caches the profile by machine key in the user's cache
folder and reuses it; ``--no-calibrate`` and ``--hardware`` refuse that; another machine's profile is never
called this machine's; ``predict --json`` carries ``profile_origin``."""

import json

import pytest

from rlm_lab import device
from rlm_lab.cli import main
from rlm_lab.cost.hardware import CPU_PROFILE, INSITU_PROFILE, load_profile
from rlm_lab.errors import RlmLabError
from rlm_lab.insitu import this_machine as TM
from rlm_lab.record import REPO_ROOT, provenance


@pytest.fixture
def unknown_machine(monkeypatch, tmp_path):
    """A faked machine no committed profile names, calibration allowed, an empty cache, a quiet load, and a
    fake calibrator that counts its calls (it returns the committed in-situ profile made on 'this' machine)."""
    monkeypatch.setenv(device.FAKE_ENV, "1")
    monkeypatch.delenv(TM.NO_CALIBRATE_ENV, raising=False)
    monkeypatch.setenv(TM.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(TM, "LOADAVG", lambda: (0.0, 0.0, 0.0))
    calls = []

    def fake(key, folder, say):
        calls.append((key, folder))
        d = load_profile(INSITU_PROFILE).to_dict()
        return d | {"name": "this-machine-fake", "provenance": provenance("fake calibrator")}

    monkeypatch.setattr(TM, "CALIBRATOR", fake)
    return calls


def _predict_json(capsys, *flags):
    assert main(["predict", "--prompts", "8", "--json", *flags]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_predict_calibrates_an_unknown_machine_once_says_so_and_caches_it_outside_the_repo(unknown_machine, capsys,
                                                                                            tmp_path):
    got, err = _predict_json(capsys)
    assert got["profile_origin"]["this_machine"] is True and got["profile_origin"]["method"] == "in-situ"
    assert got["profile_origin"]["machine_key"]["cpu_model"] == device.FAKE_CPU
    lines = [ln for ln in err.splitlines() if "calibrating it in situ" in ln]
    assert len(lines) == 1 and "no profile of its own" in lines[0] and "load gate" in lines[0]
    assert len(unknown_machine) == 1
    folder = unknown_machine[0][1]
    assert (tmp_path / "cache") in folder.parents and REPO_ROOT not in folder.parents
    assert (folder / "profile.json").is_file() and json.loads((folder / "meta.json").read_text())["machine_key"] == \
        unknown_machine[0][0]
    again, err = _predict_json(capsys)                       # from then on: the cached profile, no calibration
    assert len(unknown_machine) == 1 and "calibrating" not in err
    assert again["profile_origin"] == got["profile_origin"] and again["total_s"] == got["total_s"]


def test_no_calibrate_and_hardware_refuse_the_calibration_and_say_whose_profile_it_is(unknown_machine, capsys):
    got, _ = _predict_json(capsys, "--no-calibrate")
    assert got["profile_origin"] == {"machine_key": got["profile_origin"]["machine_key"], "this_machine": False,
                                     "method": "microbenchmarks"}
    assert got["profile_origin"]["machine_key"]["cpu_model"] == "AMD EPYC"
    got, _ = _predict_json(capsys, "--hardware", "h100-sxm")
    assert got["profile_origin"] == {"machine_key": None, "this_machine": False, "method": "datasheet"}
    got, _ = _predict_json(capsys, "--hardware", CPU_PROFILE)
    assert got["profile_origin"]["this_machine"] is False
    assert unknown_machine == []
    assert main(["predict", "--prompts", "8", "--no-calibrate"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("hardware:"))
    assert "another machine's (AMD EPYC, 2 cores)" in line and "this machine's" not in out


def test_a_busy_machine_is_not_calibrated_one_line_says_what_to_do(unknown_machine, monkeypatch, capsys):
    monkeypatch.setattr(TM, "LOADAVG", lambda: (9.0, 9.0, 9.0))
    waited = []
    monkeypatch.setattr(TM, "SLEEP", waited.append)
    assert main(["predict", "--prompts", "8", "--json"]) == 2
    err = capsys.readouterr().err
    assert unknown_machine == [] and sum(waited) >= TM.GATE_WAIT_S
    assert err.splitlines()[-1].startswith("rlm-lab: error: cannot calibrate this machine in situ now")
    assert "--no-calibrate" in err.splitlines()[-1]


def test_bad_input_is_said_before_any_calibration(unknown_machine, capsys):
    assert main(["predict", "--model", "no-such-model"]) == 2
    assert unknown_machine == [] and "calibrating" not in capsys.readouterr().err


def test_the_cache_is_never_inside_the_repository(monkeypatch):
    monkeypatch.setenv(TM.CACHE_ENV, str(REPO_ROOT / "_build" / "cache"))
    with pytest.raises(RlmLabError, match="inside the repository"):
        TM.cache_root()
    monkeypatch.delenv(TM.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/else")
    assert str(TM.cache_root()) == "/somewhere/else/rlm-lab"


def test_a_profile_cached_for_another_key_is_not_this_machines(unknown_machine, capsys):
    _predict_json(capsys)
    from rlm_lab.host import machine_key

    assert TM.cached(machine_key()) is not None
    assert TM.cached(machine_key(threads=machine_key()["threads"] + 7)) is None


def test_validate_says_whose_records_and_whose_profile(monkeypatch):
    """The committed suite priced with the committed in-situ profile: both another machine's on a faked one."""
    from rlm_lab.validate.cli import whose_line
    from rlm_lab.validate.compare import report

    monkeypatch.setenv(device.FAKE_ENV, "1")
    rep = report("cpu")
    line = whose_line(rep, TM.origin)
    assert line == (f"rlm-lab: the records were made on another machine (AMD EPYC, 2 cores); profile {INSITU_PROFILE} "
                    "is another machine's (AMD EPYC, 2 cores) (in-situ)")
    assert "this machine" not in line


def test_your_numbers_calibration_is_this_machines_in_situ_profile_or_its_own_quick_one(unknown_machine, monkeypatch,
                                                                                         tmp_path, capsys):
    from rlm_lab.chapters.your_machine.calibration import insitu_calibration

    quick = []
    out = insitu_calibration(tmp_path / "cal.json", "your-machine-x", fallback=lambda **kw: quick.append(kw))
    prof = load_profile(out)
    assert prof.name == "your-machine-x" and prof.insitu and quick == [] and len(unknown_machine) == 1
    assert prof.load["note"] == "the in-situ calibration's load gate" and prof.load["before"]["per_core"] == 0.0
    assert "calibrating it in situ" in capsys.readouterr().out
    monkeypatch.setenv(TM.NO_CALIBRATE_ENV, "1")               # refused, with no profile cached for this key:
    monkeypatch.setenv(TM.CACHE_ENV, str(tmp_path / "empty"))   # the quick calibration of this machine, never
    insitu_calibration(tmp_path / "c2.json", "y", fallback=lambda **kw: quick.append(kw) or tmp_path / "q.json")
    assert quick == [{"out": tmp_path / "c2.json", "name": "y"}]   # another machine's profile
