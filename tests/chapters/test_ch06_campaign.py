"""The campaign driver's bad input: one `rlm-lab: error:` line and exit 2 before any run starts (no record)."""

import pytest


@pytest.mark.parametrize("argv, says", [
    (["--mode", "eta-1"], "unknown execution mode"),
    (["--correction", "clip"], "unknown off-policy correction"),
    (["--size", "gpu"], "smoke or cpu size"),
])
def test_bad_input_is_one_line_and_no_record(argv, says, tmp_path, capsys):
    from rlm_lab.chapters.ch06_async.campaign import main

    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlm-lab: error:") and says in err and "\n" not in err
    assert not any(tmp_path.iterdir())


def test_a_cell_needs_its_seeds_synchronous_record_first(tmp_path, capsys):
    from rlm_lab.chapters.ch06_async.campaign import main

    assert main(["--mode", "eta2", "--seed", "1", "--out", str(tmp_path)]) == 2
    assert "no (sync, none) record of seed 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
