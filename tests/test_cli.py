"""The rlm-lab command: bad input gives one line and exit status 2, never a traceback."""

import subprocess
import sys

import pytest

from rlm_lab.cli import main


@pytest.mark.parametrize("argv,msg", [
    (["tasks", "show", "sorting"], "unknown task 'sorting'; choose one of: arithmetic, chain, countdown, mix, psum"),
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


def test_an_os_error_on_a_named_file_is_one_line_and_others_propagate(monkeypatch, capsys):
    import errno

    import rlm_lab.tasks.cli as tasks_cli

    def denied(args):
        raise PermissionError(errno.EACCES, "Permission denied", "/data/x.jsonl")

    monkeypatch.setattr(tasks_cli, "_show", denied)
    assert main(["tasks", "show", "arithmetic"]) == 2
    assert capsys.readouterr().err == "rlm-lab: error: /data/x.jsonl: Permission denied\n"

    def bug(args):
        raise OSError("no file involved")  # not the user's input: a real bug must keep its traceback

    monkeypatch.setattr(tasks_cli, "_show", bug)
    with pytest.raises(OSError, match="no file involved"):
        main(["tasks", "show", "arithmetic"])


def test_usage_errors_name_the_subcommand_in_one_line(capsys):
    assert main(["train", "--seed", "x"]) == 2
    assert capsys.readouterr().err == ("rlm-lab: error: train: argument --seed: invalid int value: 'x' "
                                       "(see `rlm-lab train --help`)\n")
