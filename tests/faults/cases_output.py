"""Output that cannot be written (issue 18 item 7): standard output on ``/dev/full`` (ENOSPC on every write), a
task file over the process's file-size limit (EFBIG, the kernel's own refusal: ``RLIMIT_FSIZE``), and a full
disk under the task files (ENOSPC at the write's fsync). Each is one line naming what could not be written, and
a failed ``tasks generate`` leaves no half-written task or empty folder behind. These run ``rlm-lab`` in a real
process (the file descriptors and limits are the process's); its error line is passed on as the row's."""

import resource
import subprocess
import sys

from fault_matrix import REPO, Case

from rlm_lab.errors import RlmLabError


def through_process(argv, stdout=subprocess.PIPE, preexec_fn=None, code=None):
    """Run ``rlm-lab argv`` (or ``python -c code``) in a fresh process; pass its stderr on and turn its one
    ``rlm-lab: error:`` line (exit 2) back into the RlmLabError the harness prints."""
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "rlm_lab.cli", *argv]
    r = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120,
                       preexec_fn=preexec_fn)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("rlm-lab: error: ")]
    sys.stderr.write("".join(ln + "\n" for ln in r.stderr.splitlines() if ln not in errors))
    if r.returncode == 2 and len(errors) == 1:
        raise RlmLabError(errors[0].removeprefix("rlm-lab: error: "))
    print(f"exit {r.returncode}; stderr: {r.stderr[-2000:]}")


def dev_full(*argv):
    def call(tmp):
        with open("/dev/full", "w") as full:
            through_process(list(argv), stdout=full)
    call.__doc__ = " ".join(["rlm-lab", *argv, "> /dev/full"])
    return call


def fsize_limit(limit_bytes):
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return preexec


def _over_fsize(tmp):
    """rlm-lab tasks generate --root TMP/tasks under ulimit -f 16 (16 KiB)"""
    through_process(["tasks", "generate", "--task", "arithmetic:digits=2", "--root", str(tmp / "tasks")],
                    preexec_fn=fsize_limit(16384))


ENOSPC_AT_FSYNC = """
import errno, os, sys
from unittest import mock
from rlm_lab.cli import main
def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
with mock.patch("os.fsync", full):
    sys.exit(main(["tasks", "generate", "--task", "arithmetic:digits=2", "--root", sys.argv[1]]))
"""


def _enospc(tmp):
    """rlm-lab tasks generate --root TMP/tasks on a full disk (os.fsync raising ENOSPC)"""
    code = ENOSPC_AT_FSYNC.replace("sys.argv[1]", repr(str(tmp / "tasks")))
    through_process([], code=code)


CASES = [
    Case("stdout-dev-full-models", "standard output on /dev/full (`rlm-lab models > /dev/full`)",
         call=dev_full("models"), message=r"cannot write to standard output: No space left on device"),
    Case("stdout-dev-full-json", "`rlm-lab predict --prompts 8 --json > /dev/full`",
         call=dev_full("predict", "--prompts", "8", "--json"),
         message=r"cannot write to standard output: No space left on device"),
    Case("stdout-dev-full-show", "`rlm-lab tasks show arithmetic -n 10000 > /dev/full` (more than a buffer)",
         call=dev_full("tasks", "show", "arithmetic", "-n", "10000"),
         message=r"cannot write to standard output: No space left on device"),
    Case("tasks-over-file-size-limit", "task files over the process's file-size limit (EFBIG)", call=_over_fsize,
         message=r"tasks/arithmetic_digits2_opsadd/train\.jsonl: File too large"),
    Case("tasks-disk-full", "task files on a full disk (ENOSPC when the data is flushed)", call=_enospc,
         message=r"tasks/arithmetic_digits2_opsadd/train\.jsonl: No space left on device"),
]


def _metrics_enospc(tmp):
    """RunRecord.log(row) with os.fsync raising ENOSPC"""
    import errno
    import os
    import shutil
    import tempfile
    from pathlib import Path
    from unittest import mock

    from rlm_lab.record import RunRecord

    where = Path(tempfile.mkdtemp(prefix="rlm-faults-enospc-"))
    try:
        rec = RunRecord(where / "run", {}, command="x")

        def full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with mock.patch("os.fsync", full):
            try:
                rec.log({"step": 1})
            except OSError as e:
                assert e.errno == errno.ENOSPC and str(e.filename).endswith("metrics.jsonl"), e
                print(f"OSError names {Path(e.filename).name}: {e.strerror}")
            else:
                raise AssertionError("the append did not fail")
        rec.interrupt()
    finally:
        shutil.rmtree(where, ignore_errors=True)


CASES.append(Case("metrics-append-disk-full", "a full disk under a record's metrics append: the error names the file "
                  "(the CLI prints it as one line)", cls="correct-result", call=_metrics_enospc,
                  message=r"OSError names metrics\.jsonl: No space left on device"))
