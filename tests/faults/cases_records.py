"""Run records: malformed record files and metrics, unfinished runs, a second writer, a rerun into a finished
folder, and `rlm-lab train --resume` on each. CLI rows go through `rlm-lab train`; API rows through
`rlm_lab.record` (a RecordError is an RlmLabError: printed as one line, exit 2). Every clear error comes before
any work: nothing in the run folder changes."""

import json
from pathlib import Path

from fault_matrix import Case

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"
HELD = []  # folder locks held by this process for the "another run is writing" rows


def record(folder, status="completed", results=None, config=None, raw=None, metrics=None):
    """A setup that writes a run folder: ``record.json`` (``raw`` bytes, or a record with ``status``; None:
    a legacy record without status) and optionally ``metrics.jsonl`` bytes."""
    def setup(tmp):
        d = Path(tmp) / folder
        d.mkdir(parents=True, exist_ok=True)
        if raw is not None:
            (d / "record.json").write_bytes(raw)
        else:
            data = {"schema_version": 2 if status else 1, "config": config or {}, "provenance": {"date": "x"},
                    "results": {"accuracy_after": 0.5} if results is None else results}
            if status:
                data.update(status=status, started="2026-01-01T00:00:00+00:00")
            (d / "record.json").write_text(json.dumps(data))
        if metrics is not None:
            (d / "metrics.jsonl").write_bytes(metrics)
    return setup


def held(folder, then=None):
    """A setup that also holds ``folder``'s lock, as a run writing it would."""
    def setup(tmp):
        from rlm_lab.records.lock import FolderLock

        if then:
            then(tmp)
        (Path(tmp) / folder).mkdir(parents=True, exist_ok=True)
        HELD.append(FolderLock(Path(tmp) / folder).acquire())
    return setup


def load(folder, require=()):
    def call(tmp):
        from rlm_lab.record import load_record

        load_record(Path(tmp) / folder, require)
    call.__doc__ = f"load_record({folder!r}{', require=' + repr(require) if require else ''})"
    return call


def metrics(folder):
    def call(tmp):
        from rlm_lab.record import load_record

        load_record(Path(tmp) / folder).metrics()
    call.__doc__ = f"load_record({folder!r}).metrics()"
    return call


def resume(folder="run"):
    return ["train", "--resume", "{tmp}/" + folder]


ENV = {"RLM_CACHE_DIR": "{tmp}/cache", "RLM_RUNS_DIR": "{tmp}/runs"}
CASES = []


def add(id, what, message, cls="clear-error", **kw):
    CASES.append(Case(id, what, cls=cls, message=message, env=ENV, **kw))


# ---- malformed record.json: through `rlm-lab train --resume` and through the API ---------------------------
MALFORMED = [
    ("binary", "record.json is binary (a PNG)", dict(raw=PNG), r"record.json is not a text file \(binary"),
    ("list", "record.json is []", dict(raw=b"[]"), r"record.json holds a JSON list, not a run record"),
    ("string", "record.json is a JSON string", dict(raw=b'"done"'), r"record.json holds a JSON str, not a run"),
    ("torn", "record.json cut off mid-write", dict(raw=b'{"config": {}, "provenance"'),
     r"record.json is not valid JSON .*damaged"),
    ("empty", "record.json is empty", dict(raw=b""), r"record.json is not valid JSON"),
    ("no-results", "record.json without results", dict(raw=b'{"config": {}, "provenance": {}}'),
     r"record.json is missing results"),
    ("no-keys", "record.json is {}", dict(raw=b"{}"), r"record.json is missing config, provenance, results"),
    ("results-list", "results is a list", dict(raw=b'{"config": {}, "provenance": {}, "results": []}'),
     r"record.json is missing results \(or they are not objects\)"),
    ("status-number", "status is a number", dict(raw=b'{"config": {}, "provenance": {}, "results": {}, "status": 3}'),
     r"non-text status 3"),
]
for key, what, kw, message in MALFORMED:
    add(f"resume-{key}", f"--resume: {what}", message, argv=resume(), setup=record("run", **kw))
    add(f"load-{key}", f"load_record: {what}", message, call=load("run"), setup=record("run", **kw))
add("load-record-folder", "record.json is a folder", r"record.json is a folder, not a run record",
    call=load("run"), setup=lambda tmp: (Path(tmp) / "run" / "record.json").mkdir(parents=True))

# ---- missing records: an error naming the folder, never a shorter table --------------------------------------
add("resume-missing-dir", "--resume of a folder that does not exist", r"no run record at .*/nothing: the folder does not exist",
    argv=resume("nothing"))
add("resume-no-record", "--resume of a folder without record.json", r"no run record at .*/run/record.json",
    argv=resume(), setup=lambda tmp: (Path(tmp) / "run").mkdir())
add("load-missing", "load_record of a folder that does not exist", r"no run record at .*/gone", call=load("gone"))


def reference_missing(tmp):
    """reference_records(["ch01_grpo", "ch01_nope"]) (chapter 1's loader)"""
    from rlm_lab.chapters.ch01_quickstart.report import reference_records

    reference_records(("ch01_grpo", "ch01_nope"))


add("reference-missing", "chapter 1 asks for a committed run that is not there", r"no run record at .*data/runs/cpu/ch01_nope",
    call=reference_missing)

# ---- unfinished runs: refused by readers, named ---------------------------------------------------------------
UNFINISHED = [
    ("interrupted", "a run interrupted by SIGINT/SIGTERM", dict(status="interrupted"),
     r"run: the run was interrupted before it finished"),
    ("failed", "a failed run", dict(status="failed: ValueError: boom"), r"run: the run did not complete \(status 'failed: ValueError: boom'\)"),
    ("dead", "status running, no process holds the folder (SIGKILL)", dict(status="running"),
     r"run: status 'running' but no process holds the folder: the run died"),
    ("legacy-empty", "a legacy record (no status) with empty results: a killed old run", dict(status=None, results={}),
     r"run: record without a status and with empty results"),
    ("odd-status", "an unknown status", dict(status="paused"), r"did not complete \(status 'paused'\)"),
]
for key, what, kw, message in UNFINISHED:
    add(f"load-{key}", f"load_record: {what}", message, call=load("run"), setup=record("run", **kw))
add("load-running-held", "load_record while another process writes the run", r"run: the run is still running",
    call=load("run"), setup=held("run", record("run", status="running")))
add("load-legacy-lacks", "a legacy record without a result the reader needs",
    r"record without a status lacks result\(s\) total_seconds", call=load("run", ("total_seconds",)),
    setup=record("run", status=None))
add("load-completed-lacks", "a completed record without a result the reader needs",
    r"completed record lacks result\(s\) total_seconds", call=load("run", ("total_seconds",)), setup=record("run"))


def sweep_unfinished(tmp):
    """summarize(root) with one interrupted sweep run (chapter 1's sweep table)"""
    from rlm_lab.train.sweep import summarize

    summarize(Path(tmp))


add("sweep-unfinished", "the sweep table over a folder with an interrupted run", r"ch01_sweep_x: the run was interrupted",
    call=sweep_unfinished, setup=record("ch01_sweep_x", status="interrupted"))

# ---- metrics.jsonl --------------------------------------------------------------------------------------------
METRICS = [
    ("torn-tail", "metrics.jsonl with a torn last line", b'{"step": 1}\n{"step": 2, "rew', r"metrics.jsonl:2: a torn last line"),
    ("bad-middle", "metrics.jsonl with a malformed middle line", b'{"step": 1}\n{oops}\n{"step": 3}\n',
     r"metrics.jsonl:2: not valid JSON"),
    ("binary", "metrics.jsonl is binary", PNG, r"metrics.jsonl is not a text file"),
    ("not-object", "metrics.jsonl holds a list per line", b'[1, 2]\n', r"metrics.jsonl:1: expected a JSON object per line, got list"),
]
for key, what, content, message in METRICS:
    add(f"metrics-{key}", what, message, call=metrics("run"), setup=record("run", metrics=content))

# ---- resume: what cannot be resumed ---------------------------------------------------------------------------
add("resume-completed", "--resume of a completed run", r"run: the run already completed; nothing to resume",
    argv=resume(), setup=record("run"))
add("resume-legacy", "--resume of a legacy (pre-lifecycle) finished run", r"the run already completed",
    argv=resume(), setup=record("run", status=None))
add("resume-running-held", "--resume while another process still writes the run", r"run is in use by another run \(pid \d+\)",
    argv=resume(), setup=held("run", record("run", status="interrupted")))
add("resume-with-set", "--resume with --set (the config is the record's)", r"--resume continues a run .*drop --set",
    argv=["train", "--resume", "{tmp}/run", "--set", "rl_steps=5"], setup=record("run", status="interrupted"))
add("resume-with-out", "--resume with --out and --force", r"drop --out, --force",
    argv=["train", "--resume", "{tmp}/run", "--out", "{tmp}/x", "--force"], setup=record("run", status="interrupted"))
add("resume-bad-config", "--resume of a record whose config has an unknown field", r"unknown config field 'nonsense'",
    argv=resume(), setup=record("run", status="interrupted", config={"nonsense": 1}))

# ---- writing: never overwrite, one writer -------------------------------------------------------------------
TRAIN = ["train", "--size", "smoke", "--model", "nano", "--out", "{tmp}/run"]
add("rerun-finished", "a second run into a folder that holds a finished run (no --force)",
    r"run already holds a run \(status completed.*pass --force", argv=TRAIN, setup=record("run"))
add("rerun-interrupted", "a run into a folder that holds an interrupted run (no --force)",
    r"run already holds a run \(status interrupted.*--force", argv=TRAIN, setup=record("run", status="interrupted"))
add("rerun-damaged", "a run into a folder whose record.json is damaged (no --force)",
    r"run already holds a run \(no readable record.json\)", argv=TRAIN, setup=record("run", raw=b"[]"))
add("rerun-metrics-only", "a run into a folder with only a metrics.jsonl (or any other files)",
    r"run already holds files \(no record.json\)", argv=TRAIN, setup=lambda tmp: ((Path(tmp) / "run").mkdir(), (Path(tmp) / "run" / "metrics.jsonl").write_text("{}\n")))
add("second-writer", "a second run while another process writes the same folder (even with --force)",
    r"run is in use by another run \(pid \d+\); wait for it to end", argv=[*TRAIN, "--force"],
    setup=held("run", record("run", status="running")))


def reopen_torn(tmp):
    """RunRecord.reopen(interrupted run with a torn last metrics line), then interrupt() again"""
    from rlm_lab.record import RunRecord

    RunRecord.reopen(Path(tmp) / "run").interrupt()


def torn_dropped(tmp, out):
    d = Path(tmp) / "run"
    assert (d / "metrics.jsonl").read_text() == '{"step": 1}\n'
    data = json.loads((d / "record.json").read_text())
    assert data["status"] == "interrupted" and data["resumed"][0]["from_status"] == "interrupted"
    from rlm_lab.record import lock_holder

    assert lock_holder(d) is None


add("reopen-drops-torn", "resuming drops the torn line a killed writer left (and only it)", "", cls="correct-result",
    call=reopen_torn, setup=record("run", status="interrupted", metrics=b'{"step": 1}\n{"step": 2, "rew'),
    check=torn_dropped)


def legacy_ok(tmp):
    """load_record(every committed data/runs/cpu record)"""
    from rlm_lab.record import load_record, reference_root

    n = sum(1 for d in reference_root("cpu").iterdir() if (d / "record.json").exists() and load_record(d))
    print(f"{n} committed records accepted")


add("legacy-committed-ok", "the committed legacy reference records are accepted (non-empty results)",
    r"\d\d+ committed records accepted", cls="correct-result", call=legacy_ok, unchanged=("data/runs",))
