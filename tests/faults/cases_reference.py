"""``rlm-lab reference`` (rlm_lab/reference.py) given input it cannot use: one line each, before the window's
calibration or any repeat starts (and nothing on disk changed). The stops (Ctrl-C, SIGTERM: the window's and the
protocol's records marked, no child left) are the protocol's (tests/test_protocol.py)."""

from fault_matrix import Case


def _window_record(tmp):
    from rlm_lab.record import RunRecord

    RunRecord(tmp / "w", {"what": "an earlier window"}).complete(done=True)


CASES = [
    Case("unknown-chapter", "a chapter the book does not have", argv=["reference", "--chapter", "11", "--size", "smoke",
                                                                      "--out", "{tmp}/w"],
         message=r"unknown chapter 11; chapters are 1-10"),
    Case("no-references", "a chapter whose page reads no timing comparison (chapter 8: the frameworks' registry)",
         argv=["reference", "--chapter", "8", "--size", "smoke", "--out", "{tmp}/w"],
         message=r"chapter 8 has no references to re-measure \(its page reads no timing comparison of its own\); "
                 r"chapters with references: 2, 4, 5, 6, 7"),
    Case("out-holds-records", "an --out folder that already holds a window's records, without --force",
         argv=["reference", "--chapter", "5", "--size", "smoke", "--out", "{tmp}/w"], setup=_window_record,
         message=r"w already holds a run \(status completed, started .*\); pass --force to replace them"),
    Case("gate-timeout", "a load gate that would never wait (--gate-timeout 0)",
         argv=["reference", "--chapter", "5", "--size", "smoke", "--gate-timeout", "0", "--out", "{tmp}/w"],
         message=r"--gate-timeout must be a positive number of seconds, not 0.0"),
]


def _two_runs(tmp):
    from rlm_lab.record import RunRecord

    for name in ("ch01_grpo", "ch01_ppo"):
        RunRecord(tmp / "cpu" / name, {"what": "a committed run"}).complete(done=True)


CASES.append(Case("force-on-parent-of-runs", "--force with --out naming a parent folder of several runs "
                  "(moved all 2,766 committed files under data/runs/cpu to .replaced/)",
                  argv=["reference", "--chapter", "5", "--size", "smoke", "--out", "{tmp}/cpu", "--force"],
                  setup=_two_runs,
                  message=r"cpu holds the records of 2 runs \(\d+ files, e\.g\. ch01_grpo\); --force would move all "
                          r"\d+ to .*/\.replaced/\. --force replaces one run: name that run's own folder"))
