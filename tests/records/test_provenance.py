"""Provenance's ``dirty`` flag on a scratch git repository: changed code is dirty, a changed run record under
data/runs (what a run that writes several committed records changes itself) is not, and the changed paths
are listed."""

import subprocess

from rlm_lab.record import git_commit


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_dirty_means_changed_code_not_changed_run_records(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "data" / "runs" / "cpu" / "r").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "data" / "runs" / "cpu" / "r" / "record.json").write_text("{}\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "c")
    clean = git_commit(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False and clean["dirty_paths"] == []

    (tmp_path / "data" / "runs" / "cpu" / "r" / "record.json").write_text('{"status": "running"}\n')
    (tmp_path / "untracked.txt").write_text("scratch")
    assert git_commit(tmp_path)["dirty"] is False  # the run's own record and untracked files: not code

    (tmp_path / "pkg" / "m.py").write_text("x = 2\n")
    dirty = git_commit(tmp_path)
    assert dirty["dirty"] is True and dirty["dirty_paths"] == ["pkg/m.py"]


def test_every_record_carries_its_window_and_machine_key(monkeypatch):
    from rlm_lab.host import KEY_FIELDS
    from rlm_lab.records.provenance import provenance

    monkeypatch.delenv("RLM_WINDOW", raising=False)
    p = provenance(["x"])
    assert p["window"] is None and set(p["machine_key"]) == set(KEY_FIELDS)
    assert p["machine_key"]["cores"] == p["hardware"]["cpu_count"] and p["machine_key"]["host"] == p["host"]
    monkeypatch.setenv("RLM_WINDOW", "w20261203T000000Z-abc123")  # what rlm_lab.protocol gives every repeat
    assert provenance(["x"])["window"] == "w20261203T000000Z-abc123"
