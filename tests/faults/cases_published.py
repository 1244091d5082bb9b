"""The registry of published cluster measurements (data/published/) given files it cannot use, and
``rlm-lab validate --published`` given flags that do not go with it: one RlmLabError line each, naming the file
and what is wrong, before any prediction."""

import re
import shutil
from pathlib import Path

import yaml
from fault_matrix import Case

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "data" / "published"
CASE = "nemo-rl-llama3.1-8b-onpolicy-step.yaml"
CASES = []


def _copy(tmp: Path) -> Path:
    dst = tmp / "published"
    shutil.copytree(PUBLISHED, dst, ignore=shutil.ignore_patterns("fit.json"))
    return dst


def case_row(id, what, mutate, message, file=CASE):
    """A row whose registry copy has one case file changed by ``mutate(doc)``."""
    def setup(tmp):
        path = _copy(tmp) / "cases" / file
        doc = yaml.safe_load(path.read_text())
        mutate(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def call(tmp):
        from rlm_lab.validate.published import load_published

        load_published(tmp / "published")
    call.__doc__ = f"load_published(a copy of data/published with {file} changed: {what})"
    CASES.append(Case(id, what, call=call, setup=setup, message=message))


def file_row(id, what, name, content: bytes, message):
    """A row whose registry copy has the file ``name`` (relative to the registry) replaced by ``content``."""
    def setup(tmp):
        (_copy(tmp) / name).write_bytes(content)

    def call(tmp):
        from rlm_lab.validate.published import load_published

        load_published(tmp / "published")
    call.__doc__ = f"load_published(a copy of data/published with {name} replaced)"
    CASES.append(Case(id, what, call=call, setup=setup, message=message))


case_row("case-unknown-key", "a case file with a key the schema does not have",
         lambda d: d.update(gpus=16), r"published case nemo-rl-llama3\.1-8b-onpolicy-step\.yaml has unknown key\(s\) gpus")
case_row("case-against-split", "a case whose split disagrees with split.yaml (the split is by source)",
         lambda d: d.update(split="validation"),
         r"split 'validation' disagrees with split\.yaml, which puts source 'nemo-rl-perf' in calibration")
case_row("case-config-escapes", "a model config path that leaves configs/models/",
         lambda d: d["model"].update(config="../../data/hardware/h100-sxm.json"),
         r"config must be a file name in configs/models/ \(no folders\), got '\.\./\.\./data/hardware/h100-sxm\.json'")
case_row("case-config-missing", "a model config that is not there",
         lambda d: d["model"].update(config="nope.config.json"), r"config configs/models/nope\.config\.json does not exist")
case_row("case-interval-outside", "a published interval that does not hold the published value",
         lambda d: d["published"].update(interval=[100, 120]),
         r"published interval must be \[lo, hi\] around the value 92\.8, got \[100, 120\]")
case_row("case-value-nan", "a published value that is not a finite number > 0",
         lambda d: d["published"].update(value=float("nan")), r"published value must be a finite number > 0, got nan")
case_row("case-speedup-of-one", "a speed-up of exactly 1 (no direction to judge)",
         lambda d: d["published"].update(value=1.0), r"a speedup of exactly 1 has no direction to judge",
         file="nemo-rl-llama3.1-8b-1off-speedup.yaml")
case_row("case-speedup-without-variant", "a speed-up with no faster configuration to compare",
         lambda d: d.pop("variant"), r"variant \(the faster configuration\) is required for a speedup and only for it",
         file="nemo-rl-llama3.1-8b-1off-speedup.yaml")
case_row("case-bad-workload", "a workload field the cost model does not know",
         lambda d: d["workload"].update(rollouts=3), r"unknown workload field\(s\) rollouts")
case_row("case-id-not-stem", "a case whose id is not its file name", lambda d: d.update(id="other"),
         r"id 'other' must equal the file name's stem 'nemo-rl-llama3\.1-8b-onpolicy-step'")
file_row("case-binary", "a binary case file", f"cases/{CASE}", bytes(range(256)),
         r"published registry nemo-rl-llama3\.1-8b-onpolicy-step\.yaml: is not a text file \(byte 128 is not UTF-8\)")
file_row("split-both-sides", "split.yaml putting one source on both sides", "split.yaml",
         yaml.safe_dump({"calibration": ["nemo-rl-perf", "prime-rl-bench", "checkpoint-engine"],
                         "validation": ["nemo-rl-perf", "verl-fully-async", "verl-one-step-off", "areal-v03",
                                        "openrlhf-bench", "slime-weight-sync"]}).encode(),
         r"split\.yaml: source 'nemo-rl-perf' is on both sides")
file_row("source-http-url", "a source whose URL is not https", "sources.yaml",
         (PUBLISHED / "sources.yaml").read_bytes().replace(b"url: https://docs.nvidia.com", b"url: http://docs.nvidia.com"),
         r"source 'nemo-rl-perf' url must be an https URL, got 'http://docs\.nvidia\.com/")

CASES += [
    Case("published-with-run", "validate --published with --run (a flag of the CPU suite)",
         argv=["validate", "--published", "--run"], message=r"--run belong\(s\) to the CPU validation suite, not to --published"),
    Case("fit-without-published", "validate --fit without --published", argv=["validate", "--fit"],
         message=r"--fit needs --published"),
    Case("fit-and-assumed", "validate --published --fit --assumed (write a fit and ignore it)",
         argv=["validate", "--published", "--fit", "--assumed"], message=r"--fit writes a fit and --assumed ignores it"),
    Case("fit-out-into-missing-folder", "validate --published --fit --fit-out into a folder that does not exist",
         argv=["validate", "--published", "--fit", "--fit-out", "{tmp}/no/such/fit.json"],
         message=r"--fit-out .*no/such/fit\.json: not a file in an existing folder"),
]
CASES.append(Case("write-and-assumed", "validate --published --write --assumed (the record holds the fitted predictions)",
                  argv=["validate", "--published", "--write", "--assumed"],
                  message=r"--write records the committed fit's predictions; it does not go with --assumed or --fit-out"))


# ---- issue 42: a fit.json whose values price nothing, a cluster that grows memory without bound, a full disk, notes --

def fit_row(id, what, value, shown):
    """A row whose fit.json (a copy of the committed one) has eta_F's fitted value replaced by ``value``."""
    import json

    def setup(tmp):
        fit = json.loads((PUBLISHED / "fit.json").read_text())
        fit["parameters"]["eta_F"]["fitted"] = value
        (tmp / "fit.json").write_text(json.dumps(fit, indent=1))

    def call(tmp):
        from rlm_lab.validate.published_predict import load_fit

        load_fit(tmp / "fit.json")
    call.__doc__ = f"load_fit(fit.json with parameters.eta_F.fitted: {shown}) (what validate --published reads)"
    CASES.append(Case(id, what, call=call, setup=setup,
                      message=r"fit file fit\.json: parameters\.eta_F\.fitted must be a number in \[0\.05, 1\] "
                              r"\(the fit's bounds\), got " + re.escape(shown)))


fit_row("fit-nan", "a fit.json whose fitted value is NaN (priced nothing, every bar undecided)", float("nan"), "nan")
fit_row("fit-zero", "a fit.json whose fitted value is 0", 0, "0")
fit_row("fit-negative", "a fit.json whose fitted value is negative", -0.3, "-0.3")
fit_row("fit-absurd", "a fit.json whose fitted value is 1e308", 1e308, "1e+308")
fit_row("fit-text", "a fit.json whose fitted value is text", "0.4", "'0.4'")


def _fit_fifo(tmp):
    import os

    os.mkfifo(tmp / "fit.json")


def _load_fifo_fit(tmp):
    """load_fit(a FIFO named fit.json)"""
    from rlm_lab.validate.published_predict import load_fit

    load_fit(tmp / "fit.json")


CASES.append(Case("fit-fifo", "a FIFO named fit.json (no writer: a plain read blocks for ever)", setup=_fit_fifo,
                  call=_load_fifo_fit, message=r"fit file fit\.json: is a FIFO, not a regular file"))
case_row("case-count-huge", "hardware.count: 1000000000 (before the bound, the placement's memory grew with it)",
         lambda d: d["hardware"].update(count=1_000_000_000),
         r"hardware count must be an integer from 1 to 100,000 \(the largest cluster the registry prices; .*\), "
         r"got 1000000000")
case_row("case-nodes-over-count", "hardware.nodes larger than hardware.count",
         lambda d: d["hardware"].update(nodes=64), r"hardware nodes \(64\) must be at most count \(16\)")

FIT_OUT_ENOSPC = """
import errno, os, sys
from unittest import mock
from rlm_lab.cli import main
def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
with mock.patch("rlm_lab.validate.published_predict.fit_efficiencies", lambda registry: {"parameters": {}}), \\
        mock.patch("os.fsync", full):
    sys.exit(main(["validate", "--published", "--fit", "--fit-out", sys.argv[1]]))
"""


def _fit_out_full(tmp):
    """rlm-lab validate --published --fit --fit-out TMP/fit.json on a full disk (os.fsync raising ENOSPC; the fit
    itself replaced by a stub: 40 s of least squares are not under test)"""
    from cases_output import through_process

    through_process([], code=FIT_OUT_ENOSPC.replace("sys.argv[1]", repr(str(tmp / "fit.json"))))


CASES.append(Case("fit-out-disk-full", "validate --fit-out on a full disk: the error names the file, none left torn",
                  call=_fit_out_full, message=r"fit\.json: No space left on device"))


def _note_twice(tmp):
    """write_record(..., note=...) twice on the same registry and fit (a copy of validation.json; pricing stubbed)"""
    import json
    import shutil
    from unittest import mock

    from rlm_lab.validate import published_predict as PP
    from rlm_lab.validate import published_report as R

    path = tmp / "v" / "validation.json"
    path.parent.mkdir()
    shutil.copy(R.RECORD, path)
    committed = json.loads(path.read_text()).get("note")
    with mock.patch.object(R, "predict_all", lambda registry, values=None: []):
        for note in ("first new note", "second new note"):
            R.write_record(load_published_registry(), PP.load_fit(), path, note=note)
    rec = json.loads(path.read_text())
    notes = [h.get("note") for h in rec["history"]] + [rec.get("note")]
    assert notes[-3:] == [committed, "first new note", "second new note"], notes
    print("notes kept, oldest first:", notes[-3:])


def load_published_registry():
    from rlm_lab.validate.published import load_published

    return load_published()


CASES.append(Case("note-append-only", "validate --published --write --note TEXT on an unchanged registry, twice: the "
                  "committed note and the first new one stay in the history", cls="correct-result", call=_note_twice,
                  message=r"notes kept, oldest first: \[.*'first new note', 'second new note'\]"))
