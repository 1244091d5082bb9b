"""Cache folders (the SFT cache, chapter 10's models and adapters) are written atomically per run (issue 42): two runs
with different --out that publish the same key at once never fail, never leave half a folder or a temporary one, and
the folder ends complete. (The old code removed the folder and then renamed its own over it: a second writer between
the two made the rename fail, or a reader found no folder.)"""

import subprocess
import sys
from pathlib import Path

from rlm_lab.train.run import publish

WRITER = """
import sys, time
from pathlib import Path
from rlm_lab.train.run import publish

folder, who = Path(sys.argv[1]), sys.argv[2]
def write(tmp):
    (tmp / "config.json").write_text(who)
    time.sleep(0.01)
    (tmp / "model.safetensors").write_text(who * 1000)
for _ in range(30):
    publish(folder, write)
"""


def test_publish_replaces_an_old_copy_and_leaves_no_temporary(tmp_path):
    folder = tmp_path / "cache" / "sft_key"
    publish(folder, lambda t: (t / "a").write_text("1"))
    publish(folder, lambda t: (t / "b").write_text("2"))
    assert sorted(p.name for p in folder.iterdir()) == ["b"]
    assert [p.name for p in folder.parent.iterdir()] == ["sft_key"]


def test_a_failed_write_leaves_the_old_copy_and_no_temporary(tmp_path):
    folder = tmp_path / "k"
    publish(folder, lambda t: (t / "a").write_text("1"))

    def fails(t):
        (t / "half").write_text("x")
        raise OSError(28, "No space left on device")

    try:
        publish(folder, fails)
    except OSError:
        pass
    assert [p.name for p in folder.iterdir()] == ["a"] and [p.name for p in tmp_path.iterdir()] == ["k"]


def test_two_runs_publishing_one_key_at_once_never_fail(tmp_path):
    folder = tmp_path / "cache" / "sft_key"
    repo = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(folder), who], cwd=repo, stderr=subprocess.PIPE,
                              text=True, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}) for who in "AB"]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    who = (folder / "config.json").read_text()
    assert who in "AB" and (folder / "model.safetensors").read_text() == who * 1000   # one writer's, whole
    assert [p.name for p in folder.parent.iterdir()] == ["sft_key"]                  # no .tmp or .old left


def test_a_full_disk_under_a_library_writer_names_the_folder(tmp_path):
    import errno

    import pytest

    def full(t):
        raise OSError(errno.ENOSPC, "No space left on device")   # what safetensors' write raises: no file name

    with pytest.raises(OSError) as e:
        publish(tmp_path / "sft_key", full)
    assert e.value.filename == str(tmp_path / "sft_key") and not any(tmp_path.iterdir())
