"""The chapters' record readers on copies of the committed records: a killed run among them (legacy: empty
results; new: status running with no writer) is an error naming its folder, where chapter 4's report used to
drop it and chapter 1's loader used to show it as a reference run."""

import json
import shutil

import pytest

from rlm_lab.record import RecordError, reference_root


def copy(names, dest):
    for n in names:
        shutil.copytree(reference_root("cpu") / n, dest / n)


def kill(folder, how):
    data = json.loads((folder / "record.json").read_text())
    data = {**data, "results": {}} if how == "legacy" else {**data, "status": "running"}
    (folder / "record.json").write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["legacy", "running"])
def test_chapter4_report_refuses_a_killed_layout_run_instead_of_dropping_it(tmp_path, how):
    from rlm_lab.chapters.ch04_parallelism.run import load_records

    copy(["ch04_single", "ch04_dp2", "ch04_tp2"], tmp_path)
    assert [r.dir.name for r in load_records(tmp_path)] == ["ch04_dp2", "ch04_single", "ch04_tp2"]
    kill(tmp_path / "ch04_dp2", how)
    with pytest.raises(RecordError, match=r"ch04_dp2: .*(empty results|died)"):
        load_records(tmp_path)
    (tmp_path / "ch04_tp4").mkdir()  # a run folder without a record
    shutil.rmtree(tmp_path / "ch04_dp2")
    with pytest.raises(RecordError, match=r"no run record at .*ch04_tp4"):
        load_records(tmp_path)
    with pytest.raises(RecordError, match="does not exist"):
        load_records(tmp_path / "nowhere")


def test_chapter1_reference_runs_refuse_a_killed_run(tmp_path, monkeypatch):
    from rlm_lab.records import provenance
    from rlm_lab.chapters.ch01_quickstart.report import reference_records

    copy(["ch01_grpo", "ch01_ppo"], tmp_path / "data" / "runs" / "cpu")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    import rlm_lab.record as record

    monkeypatch.setattr(record, "REPO_ROOT", tmp_path)
    assert [r.dir.name for r in reference_records(("ch01_grpo", "ch01_ppo"))] == ["ch01_grpo", "ch01_ppo"]
    kill(tmp_path / "data" / "runs" / "cpu" / "ch01_ppo", "legacy")
    with pytest.raises(RecordError, match="ch01_ppo: record without a status and with empty results"):
        reference_records(("ch01_grpo", "ch01_ppo"))
