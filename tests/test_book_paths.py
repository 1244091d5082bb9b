"""What a page shows of a path: repository-relative, never the builder's machine path."""


def test_repo_relative_never_shows_a_machine_path(tmp_path):
    from rlm_lab.record import REPO_ROOT, repo_relative

    assert repo_relative(REPO_ROOT / "data" / "runs" / "cpu" / "x") == "data/runs/cpu/x"
    assert repo_relative(tmp_path / "elsewhere" / "rec") == "rec"
