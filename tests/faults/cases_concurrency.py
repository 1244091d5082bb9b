"""Writers that meet (issue 18 item 8): a second ``insitu --run`` or ``longtail`` into the folder a first one is
writing, and SIGTERM or SIGKILL while a record is being rewritten many times a second.

The first writer is a real ``rlm-lab`` process in its own session, writing into a folder outside the row's (its
writes are its own, not the second writer's); the row's promise is about the second writer, and each row also
checks what the signal left of the first: its record ``interrupted``, nothing half-written, no process left."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cases_output import through_process
from fault_matrix import REPO, Case

from rlm_lab.records.lock import lock_holder


def _wait_for(pred, timeout, proc, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if proc.poll() is not None:
            raise AssertionError(f"the first writer ended (exit {proc.returncode}) before {what}: "
                                 f"{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.1)


def _group_alive(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _stop(first: subprocess.Popen, record: Path) -> None:
    """SIGTERM to the first writer's process group; it must end within 30 s as interrupted, whole, and every
    process of its group (workers, multiprocessing's resource tracker) within 10 s more."""
    os.killpg(first.pid, signal.SIGTERM)
    _, err = first.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while _group_alive(first.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(first.pid):
        os.killpg(first.pid, signal.SIGKILL)
        raise AssertionError("a process of the first writer outlived its SIGTERM by 10 s")
    assert "Traceback" not in err, err[-2000:]
    status = json.loads((record / "record.json").read_text())["status"]
    assert status == "interrupted", status
    assert not [p.name for p in record.glob(".*") if p.name != ".lock"], "scratch or temp files left"
    assert lock_holder(record) is None


def _second_writer(first_argv, second_argv, record_rel, timeout=120):
    def call(tmp):
        where = Path(tempfile.mkdtemp(prefix="rlm-faults-writer-"))
        try:
            argv = [a.replace("{w}", str(where)) for a in first_argv]
            first = subprocess.Popen([sys.executable, "-m", "rlm_lab.cli", *argv], cwd=REPO, text=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            record = where / record_rel
            try:
                _wait_for(lambda: (record / "record.json").is_file() and lock_holder(record), timeout, first,
                          f"{record_rel}/record.json held by the first writer")
                try:
                    through_process([a.replace("{w}", str(where)) for a in second_argv])
                finally:
                    _stop(first, record)
            finally:
                if first.poll() is None:
                    os.killpg(first.pid, signal.SIGKILL)
                    first.wait()
        finally:
            shutil.rmtree(where, ignore_errors=True)
    call.__doc__ = "rlm-lab " + " ".join(second_argv).replace("{w}", "W") + "  (while another writes into W)"
    return call


INSITU = ["insitu", "--run", "--size", "smoke", "--allow-busy", "--out", "{w}/runs"]
LONGTAIL = ["longtail", "--size", "smoke", "--only", "fusion", "--out", "{w}/runs"]

CASES = [
    Case("insitu-two-writers", "a second `insitu --run` into the folder a first is writing", call=_second_writer(
        [*INSITU, "--write", "{w}/a.json"], [*INSITU, "--write", "{w}/b.json"], "runs/insitu_suite"),
        message=r"runs/insitu_suite already holds a run; write to another folder|is in use by another run"),
    Case("longtail-two-writers", "a second `longtail` into the folder a first is writing", call=_second_writer(
        LONGTAIL, LONGTAIL, "runs/ch07_fusion"),
        message=r"runs/ch07_fusion already holds a run|is in use by another run"),
]

# ---- a signal while a record is being rewritten -----------------------------------------------------------
WRITER = """
import sys, time
from pathlib import Path
from rlm_lab.record import RunRecord
rec = RunRecord.reopen(Path(sys.argv[1]))  # an interrupted run taken over (as --resume does; no provenance to collect)
blob = "x" * 200_000
i = 0
try:
    while True:
        i += 1
        rec.update(i=i, blob=blob)          # record.json rewritten (atomically) every time
        rec.log({"step": i, "blob": blob[: 5000]})   # and a metrics line appended
        if i == 3:
            Path(sys.argv[1], "ready").write_text("3")
except KeyboardInterrupt:                   # SIGTERM unwinds as Ctrl-C does (records.lifecycle), as in rlm-lab
    sys.exit(130)
"""


def _busy_writers(tmp: Path, sig) -> list[Path]:
    """One busy writer per delay, started together; each gets ``sig`` that long after its third write."""
    from rlm_lab.record import RunRecord

    base = tmp / "base"
    RunRecord(base, {"mode": "busy"}, command="busy writer").interrupt()
    runs = [tmp / f"run{k}" for k in range(len(DELAYS))]
    for d in runs:
        shutil.copytree(base, d)
    shutil.rmtree(base)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(d)], cwd=REPO, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for d in runs]
    try:
        for d, p, delay in zip(runs, procs, DELAYS):
            _wait_for(lambda: (d / "ready").exists(), 60, p, "three record writes")
            time.sleep(delay)
            p.send_signal(sig)
        for p in procs:
            _, err = p.communicate(timeout=30)
            assert "Traceback" not in err, err[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return runs


DELAYS = (0.0, 0.013, 0.037, 0.071, 0.129)  # after the third write: land at different points of a write


def _sigterm_mid_write(tmp):
    """SIGTERM to processes rewriting their record.json and appending metrics, at five moments"""
    from rlm_lab.record import read_jsonl

    for d in _busy_writers(tmp, signal.SIGTERM):
        data = json.loads((d / "record.json").read_text())  # whole: the old version or the new one
        assert data["status"] == "interrupted", data["status"]
        rows = read_jsonl(d / "metrics.jsonl")  # strict: no torn line either
        assert rows and rows[-1]["step"] >= data["results"]["i"] - 1, (len(rows), data["results"]["i"])
        assert not list(d.glob(".*.tmp")) and lock_holder(d) is None
    print(f"{len(DELAYS)} of {len(DELAYS)} runs interrupted with a whole record")


def _sigkill_mid_write(tmp):
    """SIGKILL to a process rewriting its record.json, then RunRecord.reopen (what --resume does)"""
    from rlm_lab.record import RunRecord, read_record_file

    for d in _busy_writers(tmp, signal.SIGKILL):
        data = read_record_file(d)  # whole (atomic rename), still saying "running": nobody could say more
        assert data["status"] == "running", data["status"]
        rec = RunRecord.reopen(d)   # a dead writer's folder is taken over; a torn last metrics line dropped
        assert rec.metrics() and all("step" in r for r in rec.metrics())
        rec.interrupt()
    print(f"{len(DELAYS)} of {len(DELAYS)} killed runs reopened with a whole record")


CASES += [
    Case("record-sigterm-mid-write", "SIGTERM while record.json is being rewritten and metrics appended",
         cls="correct-result", call=_sigterm_mid_write, message=r"5 of 5 runs interrupted with a whole record"),
    Case("record-sigkill-mid-write", "SIGKILL while record.json is being rewritten (no handler runs): the record "
         "is whole and the folder can be taken over", cls="correct-result", call=_sigkill_mid_write,
         message=r"5 of 5 killed runs reopened with a whole record"),
]
