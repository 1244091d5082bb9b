"""Chapter 7's ranking carries the results ledger's current value of each gain: a row a window replaced is history
beside the window's value (the fusion gain the issue found ranked first while the window measured it slower)."""

from rlm_lab.chapters.ch07_long_tail.report import with_current
from rlm_lab.ledger import Entry

WIN = ("data/runs/cpu/reference/20261204T084630Z",)
ENTRIES = [Entry("ch07.fusion.measured", 7, "gain", "x", "paired ratio", 0.66, 0.51, 0.82, "Student-t", 4,
                 "paired repeats", WIN),
           Entry("ch07.dispatch.measured", 7, "gain", "x", "paired ratio", 0.99, 0.22, 1.77, "Student-t", 5,
                 "paired repeats", ("data/runs/cpu/ch07_dispatch",))]
TABLE = [{"technique": "fusion", "measured gain": 6.72}, {"technique": "dispatch", "measured gain": 0.99},
         {"technique": "packing", "measured gain": 1.3}]


def test_a_replaced_row_is_history_beside_the_windows_value():
    got = {r["technique"]: r["current (ledger)"] for r in with_current(TABLE, ENTRIES, "cpu")}
    assert got["fusion"] == "history; current: 0.66 [0.51, 0.82] (Student-t, n = 4), the window"
    assert got["dispatch"] == "this row" and got["packing"] == "-"


def test_at_another_size_the_column_gives_the_committed_value():
    got = {r["technique"]: r["current (ledger)"] for r in with_current(TABLE, ENTRIES, "smoke")}
    assert got["fusion"].startswith("committed cpu: 0.66") and got["dispatch"].startswith("committed cpu: 0.99")
