"""Records are portable (issue 35, item 7): no committed file under data/ names an absolute path of the machine
that made it, and the writers make new records repository-relative (``rlm_lab.records.portable``)."""

import json
import os
import re
import subprocess

import pytest

from rlm_lab.cost.hardware import load_profile, save_profile
from rlm_lab.record import REPO_ROOT, RunRecord, provenance
from rlm_lab.records.portable import portable

TEXT = (".json", ".jsonl", ".yaml", ".yml", ".md", ".csv", ".txt")
# the builders' repository roots of this project (/work/<checkout>/) and any user's home, as the writer knew them
FOREIGN = re.compile(r"(?<![\w.~])/(?:work|root|home|Users)/")


def _committed_text_files():
    out = subprocess.run(["git", "ls-files", "data"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO_ROOT / f for f in out.stdout.split() if f.endswith(TEXT)]


def test_no_committed_record_names_a_machines_absolute_path():
    here = [str(REPO_ROOT) + "/"] + ([os.environ["HOME"].rstrip("/") + "/"] if os.environ.get("HOME", "/") != "/" else [])
    bad = []
    for path in _committed_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        m = FOREIGN.search(text)
        hit = m.group(0) if m else next((h for h in here if h in text), None)
        if hit:
            bad.append(f"{path.relative_to(REPO_ROOT)}: {hit}")
    assert not bad, f"{len(bad)} files under data/ name an absolute path of a machine, e.g. {bad[:5]}"


def test_portable_by_hand(tmp_path):
    root, home = tmp_path / "repo", tmp_path / "home"
    got = portable({"a": f"{root}/data/x.json", "cmd": f"{root}/.venv/bin/python -m m --out {root}/_build/o",
                    "h": [f"{home}/.cache/p", "/tmp/scratch/f", str(root), 3, None]}, root=root, home=home)
    assert got == {"a": "data/x.json", "cmd": ".venv/bin/python -m m --out _build/o",
                   "h": ["~/.cache/p", "/tmp/scratch/f", ".", 3, None]}
    inside = portable(f"{home}/repo/data/f", root=home / "repo", home=home)   # a repository in the home
    assert inside == "data/f"


def test_a_new_record_and_profile_are_written_repository_relative(tmp_path):
    ckpt = str(REPO_ROOT / "_build" / "cache" / "sft" / "abc")
    rec = RunRecord(tmp_path / "run", config={"sft_checkpoint": ckpt},
                    command=[str(REPO_ROOT / ".venv" / "bin" / "python"), "-m", "rlm_lab", "--out", ckpt])
    rec.complete(sft_model=ckpt)
    text = (tmp_path / "run" / "record.json").read_text()
    assert str(REPO_ROOT) not in text
    on_disk = json.loads(text)
    assert on_disk["config"]["sft_checkpoint"] == "_build/cache/sft/abc" == on_disk["results"]["sft_model"]
    assert on_disk["provenance"]["command"].startswith(".venv/bin/python -m rlm_lab --out _build/")
    assert rec.config["sft_checkpoint"] == ckpt                                  # the running process keeps its own
    assert str(REPO_ROOT) not in provenance([str(REPO_ROOT / "x.py")])["command"]
    d = load_profile("cpu-2core-epyc").to_dict()
    d["insitu"] = {"base_source": str(REPO_ROOT / "data" / "hardware" / "cpu-2core-epyc.json")}
    save_profile(d, tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text())["insitu"]["base_source"] == "data/hardware/cpu-2core-epyc.json"
