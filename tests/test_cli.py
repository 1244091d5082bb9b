"""The rlm-lab command: bad input gives one line and exit status 2, never a traceback."""

import subprocess
import sys

import pytest

from rlm_lab.cli import main


@pytest.mark.parametrize("argv,msg", [
    (["tasks", "show", "sorting"], "unknown task 'sorting'; choose one of: arithmetic, chain, countdown"),
    (["tasks", "show", "arithmetic:digits=12"], "arithmetic digits must be 1..6, got 12"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"rlm-lab: error: {msg}"


def test_console_script_error_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "rlm_lab.cli", "tasks", "show", "nope"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_tasks_generate_writes_files(tmp_path, capsys):
    assert main(["tasks", "generate", "--task", "countdown:numbers=3", "--train", "20", "--test", "5",
                 "--root", str(tmp_path)]) == 0
    assert (tmp_path / "countdown_numbers3_max_number9" / "test.jsonl").read_text().count("\n") == 5
