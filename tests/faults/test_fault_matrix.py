"""Runs every row of the fault matrix (tests/faults/cases_*.py); see fault_matrix.py for the row format."""

import pytest
from fault_matrix import PAGE, collect, render, run_case, verify

CASES = collect()


# Two concurrent writers each start a full run (seconds of training): the slow phase runs them.
SLOW_AREAS = ("concurrency",)


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.area in SLOW_AREAS else c for c in CASES],
                         ids=[f"{c.area}:{c.id}" for c in CASES])
def test_fault(case, tmp_path):
    verify(case, run_case(case, tmp_path), tmp_path)


def test_matrix_is_large_and_every_row_is_classified():
    assert len(CASES) > 150  # issue 8: more than 150 bad inputs and faults, each a clear error or a correct result
    assert {c.cls for c in CASES} <= {"clear-error", "correct-result"}


def test_book_page_is_up_to_date():
    assert PAGE.exists(), "book/faults.md is missing: run python tests/faults/fault_matrix.py --write"
    assert PAGE.read_text() == render(CASES), "book/faults.md is stale: run python tests/faults/fault_matrix.py --write"


def test_harness_catches_a_traceback_and_a_changed_file(tmp_path):
    # the harness itself must be able to fail: a row whose call raises a plain exception, and one that writes
    from fault_matrix import Case

    def boom(tmp):
        raise ValueError("not an RlmLabError")

    def writes(tmp):
        from rlm_lab.errors import RlmLabError

        (tmp / "new.txt").write_text("x")
        raise RlmLabError("bad input")

    for case in (Case("boom", "x", call=boom, message="."), Case("writes", "x", call=writes, message="bad input")):
        sub = tmp_path / case.id
        sub.mkdir()
        with pytest.raises(AssertionError):
            verify(case, run_case(case, sub), sub)
