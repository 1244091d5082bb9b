"""``rlm-lab gpu-archive`` (issue 18 item 5): ``--adopt`` of an archive whose summary.json points outside it,
names a record that is not there, or is damaged; a budget that is not a finite number above the reserve. Each is
one line before anything is copied or run. API rows adopt into ``{tmp}/data`` (the row's folder, snapshotted:
nothing may appear there); CLI rows adopt into the repository's ``data/`` and must leave it as it was."""

import json
import os
from pathlib import Path

from fault_matrix import Case

from rlm_lab import gpu_archive as ga

DATA = ("data/runs/gpu", "data/hardware")


def archive(tmp: Path, steps=None, text: str | None = None) -> Path:
    """A finished (non-dry-run) archive in ``tmp/archive`` with one record and one profile, and a secret
    folder beside it that no summary may reach."""
    src = tmp / "archive"
    (src / "runs" / "gpu" / "ch01_grpo").mkdir(parents=True)
    (src / "runs" / "gpu" / "ch01_grpo" / "record.json").write_text('{"status": "completed"}')
    (src / "runs" / "gpu" / "ch01_ppo").mkdir(parents=True)
    (src / "runs" / "gpu" / "ch01_ppo" / "record.json").write_text('{"status": "completed"}')
    (src / "hardware").mkdir()
    (src / "hardware" / "nvidia-h200-calibrated.json").write_text("{}")
    (tmp / "secret").mkdir(exist_ok=True)
    (tmp / "secret" / "record.json").write_text("not yours")
    if steps is None:
        steps = [{"step": "calibration", "status": "completed", "profile": "hardware/nvidia-h200-calibrated.json"},
                 {"step": "ch01_grpo", "status": "completed", "record": "runs/gpu/ch01_grpo"}]
    (src / "summary.json").write_text(text if text is not None else json.dumps({"created": "2026-12-04T14:19:34+00:00",
                                                                                  "dry_run": False, "steps": steps}))
    return src


def step(record, name="ch01_grpo", status="completed"):
    return {"step": name, "status": status, "record": record}


CASES = []


def api(id, what, message, steps=None, text=None, extra=None):
    def setup(tmp):
        archive(tmp, steps, text)
        if extra:
            extra(tmp)

    def call(tmp):
        ga.adopt(tmp / "archive", tmp / "data")
    call.__doc__ = "gpu_archive.adopt(archive, data)"
    CASES.append(Case(id, what, call=call, setup=setup, message=message))


api("adopt-dotdot", "a record path with ../ that leaves the archive", r"record '\.\./secret' is outside the archive",
    steps=[step("../secret")])
api("adopt-dotdot-deep", "a record path that goes down, then up past the archive",
    r"record 'runs/\.\./\.\./secret' is outside the archive", steps=[step("runs/../../secret")])
api("adopt-absolute", "an absolute record path (any readable folder)", r"is outside the archive",
    steps=[step("/etc")])
api("adopt-archive-itself", "a record path of '.' (the whole archive)", r"record '\.' is outside the archive",
    steps=[step(".")])
api("adopt-profile-outside", "a profile path outside the archive", r"profile '\.\./secret/record\.json' is outside",
    steps=[{"step": "calibration", "status": "completed", "profile": "../secret/record.json"}])
api("adopt-symlink-out", "a record folder inside the archive that links to a folder outside it",
    r"record 'runs/gpu/leak' is outside the archive", steps=[step("runs/gpu/leak")],
    extra=lambda tmp: os.symlink(tmp / "secret", tmp / "archive" / "runs" / "gpu" / "leak"))
api("adopt-symlink-inside-record", "a record that holds a symbolic link to a file outside the archive",
    r"record links out of the archive \(runs/gpu/ch01_grpo/leak\)", steps=[step("runs/gpu/ch01_grpo")],
    extra=lambda tmp: os.symlink(tmp / "secret" / "record.json", tmp / "archive" / "runs" / "gpu" / "ch01_grpo" / "leak"))
api("adopt-second-missing", "two completed records, the second not in the archive (the first must not be copied)",
    r"step ch01_ppo's record 'runs/gpu/ch01_missing' is not a folder in the archive; nothing was adopted",
    steps=[step("runs/gpu/ch01_grpo"), step("runs/gpu/ch01_missing", "ch01_ppo")])
api("adopt-profile-is-folder", "a profile path that names a folder", r"profile 'hardware' is not a file",
    steps=[{"step": "calibration", "status": "completed", "profile": "hardware"}])
api("adopt-same-destination", "two steps whose records have one name (the second would overwrite the first)",
    r"two steps would both become .*ch01_grpo",
    steps=[step("runs/gpu/ch01_grpo"), step("runs/other/ch01_grpo", "ch01_ppo")],
    extra=lambda tmp: (tmp / "archive" / "runs" / "other" / "ch01_grpo").mkdir(parents=True))
api("adopt-not-json", "a summary.json cut short", r"summary\.json is damaged \(not JSON", text='{"dry_run": false, "st')
api("adopt-binary", "a summary.json that is binary", r"summary\.json is damaged \(not JSON", text="\x00\x9f\x92")
api("adopt-list", "a summary.json that holds a list", r"expected an object with a list of steps", text="[1, 2]")
api("adopt-steps-missing", "a summary.json without steps", r"expected an object with a list of steps",
    text='{"dry_run": false}')
api("adopt-no-created", "a summary.json whose creation time is not a time", r"created 'yesterday' is not a time; nothing was adopted",
    text='{"created": "yesterday", "dry_run": false, "steps": [{"step": "ch01_grpo", "status": "completed", '
         '"record": "runs/gpu/ch01_grpo"}]}')
api("adopt-step-not-object", "a step that is a string", r"step 0 is not an object with a status", steps=["ch01_grpo"])
api("adopt-step-no-status", "a step without a status", r"step 0 is not an object with a status",
    steps=[{"step": "ch01_grpo", "record": "runs/gpu/ch01_grpo"}])
api("adopt-record-not-string", "a record path that is a number", r"step ch01_grpo's record is 5, not a path",
    steps=[step(5)])


def _fifo_in_second(tmp):
    os.mkfifo(tmp / "archive" / "runs" / "gpu" / "ch01_ppo" / "pipe")


def _fifo_steps():
    return [step("runs/gpu/ch01_grpo"), step("runs/gpu/ch01_ppo", "ch01_ppo")]


api("adopt-copy-fails", "the second record cannot be copied (it holds a named pipe): the first is removed again",
    r"adopting failed while copying .*pipe.*; nothing was adopted", steps=_fifo_steps(), extra=_fifo_in_second)


def _adopted(tmp, out):
    data = tmp / "data"
    got = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    assert got == ["hardware/nvidia-h200-calibrated.json", "runs/gpu/archives/20261204T141934Z/summary.json",
                   "runs/gpu/ch01_grpo/record.json"], got
    assert (data / "runs/gpu/ch01_grpo/record.json").read_bytes() == \
        (tmp / "archive/runs/gpu/ch01_grpo/record.json").read_bytes()
    assert not [p for p in data.rglob(".*")], "a staging copy was left behind"


def _adopt_ok(tmp):
    """gpu_archive.adopt(archive, data): a well-formed archive"""
    for d in ga.adopt(tmp / "archive", tmp / "data"):
        print(f"adopted {d.relative_to(tmp)}")


CASES.append(Case("adopt-ok", "a well-formed archive: its completed record, its profile and its summary are copied, "
                  "nothing else",
                  cls="correct-result", call=_adopt_ok, setup=lambda tmp: archive(tmp), message=r"adopted data/runs/gpu/ch01_grpo",
                  check=_adopted))

# ---- through the command line (into the repository's data/, which must not change) -----------------------
CASES += [
    Case("cli-adopt-dotdot", "rlm-lab gpu-archive --adopt of an archive whose record path is ../",
         argv=["gpu-archive", "--adopt", "{tmp}/archive"], setup=lambda tmp: archive(tmp, [step("../secret")]),
         unchanged=DATA, message=r"record '\.\./secret' is outside the archive"),
    Case("cli-adopt-damaged", "rlm-lab gpu-archive --adopt of an archive with a damaged summary.json",
         argv=["gpu-archive", "--adopt", "{tmp}/archive"], setup=lambda tmp: archive(tmp, text="{"),
         unchanged=DATA, message=r"summary\.json is damaged"),
    Case("cli-adopt-no-summary", "rlm-lab gpu-archive --adopt of a folder without summary.json",
         argv=["gpu-archive", "--adopt", "{tmp}"], unchanged=DATA, message=r"has no summary\.json"),
]
for id, value, message in [("budget-nan", "nan", r"--budget-s must be a finite number, got nan"),
                           ("budget-inf", "inf", r"--budget-s must be a finite number, got inf"),
                           ("budget-zero", "0", r"--budget-s must be > 5, got 0\.0"),
                           ("budget-negative", "-60", r"--budget-s must be > 5, got -60\.0"),
                           ("budget-word", "ten", r"--budget-s must be a number, got 'ten'")]:
    CASES.append(Case(id, f"--budget-s {value}", argv=["gpu-archive", "--dry-run", "--budget-s", value,
                                                      "--out", "{tmp}/a"], message=message))


def _archive_nan(tmp):
    """gpu_archive.archive(out, budget_s=nan, dry_run=True)"""
    ga.archive(tmp / "a", float("nan"), True)


CASES.append(Case("budget-nan-api", "a NaN budget through the API (every step would be skipped, exit 0)",
                  call=_archive_nan, message=r"--budget-s must be a finite number, got nan"))
CASES += [
    Case("steps-empty", "--steps ',' (named no step: an empty archive, exit 0)",
         argv=["gpu-archive", "--dry-run", "--steps", ",", "--out", "{tmp}/a"], message=r"--steps names no step"),
    Case("budget-too-small", "a budget under every chosen step's minimum (each skipped, exit 0, 'failed steps: 0')",
         argv=["gpu-archive", "--dry-run", "--steps", "calibration", "--budget-s", "6", "--out", "{tmp}/a"],
         message=r"--budget-s 6 is too small for any step .*need at least 30 s"),
]
api("adopt-nul-byte", "a record path holding a NUL byte (ValueError: embedded null byte)",
    r"step ch01_grpo's record is 'runs/gpu/ch01\\x00grpo', not a path", steps=[step("runs/gpu/ch01\x00grpo")])
api("adopt-nul-byte-profile", "a profile path holding a NUL byte",
    r"step calibration's profile is 'hardware/x\\x00\.json', not a path",
    steps=[{"step": "calibration", "status": "completed", "profile": "hardware/x\x00.json"}])
