"""Issue 39 deliverable 4: the calibration cases, the fitted-parameter set and the fit rule predate the validation
they are judged on (rlm_lab.validate.published_blind), from git history; its mechanism on a scratch repository."""

import json
import shutil
import subprocess

import pytest

from rlm_lab.validate import published_blind as B

HAS_HISTORY = shutil.which("git") is not None and B._git("rev-parse", "HEAD") is not None \
    and B._git("cat-file", "-e", "028342d103973e8e68049becf17af94e05a17d95^{commit}") is not None
needs_history = pytest.mark.skipif(not HAS_HISTORY, reason="needs the project's git history (a clone, not an archive)")


@needs_history
def test_every_fresh_round_as_first_priced_was_blind():
    """Each round of fresh_rounds.json (the coordinator's later rounds too) was priced by a model whose calibration
    cases, fitted values and fit rule are those of before its first case file was committed."""
    checks = B.rounds_blind()
    assert checks and all(c["cases"] > 0 for c in checks)
    assert [c for c in checks if c["blind"] is not True] == []


@needs_history
def test_the_current_record_is_post_hoc_for_the_third_round():
    """What changed after the third round (the NeMo-RL calibration mend, the refit, the identifiability rule) makes
    today's numbers on its cases post-hoc evidence; the check names all three."""
    third = next(c for c in B.record_blind() if c["round"] == 3)
    assert third["blind"] is False
    text = " ".join(third["changed"])
    assert "calibration cases: nemo-rl" in text and "fit.json" in text and "MIN_ELASTICITY" in text


def test_the_rule_is_compared_by_code_not_by_comments():
    a = "FIT_BOUNDS = (0.01, 1.0)  # x\nMIN_ELASTICITY = 0.05\n\ndef fit_efficiencies(r):\n    return 1\n"
    b = "# a new comment\nFIT_BOUNDS = (0.01, 1.0)\nMIN_ELASTICITY = 0.05\n\ndef fit_efficiencies(r):\n    return 1\n"
    c = a.replace("0.05", "0.1")
    assert B.fit_rule_source(a) == B.fit_rule_source(b)
    assert B.fit_rule_source(a) != B.fit_rule_source(c)


def test_a_renamed_type_hint_or_docstring_is_not_a_new_rule():
    a = "def elasticities(cases: list[Case], values: dict) -> dict:\n    return {c: 1 for c in cases}\n"
    b = 'def elasticities(cases: list[PublishedCase], values) -> dict:\n    """doc"""\n    return {c: 1 for c in cases}\n'
    c = a.replace("1 for", "2 for")
    assert B.fit_rule_source(a) == B.fit_rule_source(b)
    assert B.fit_rule_source(a) != B.fit_rule_source(c)


def test_an_import_moved_to_the_module_top_is_not_a_new_rule():
    """Issue 41 moved the fit's imports to the module's top; the rule's numbers did not change, so rounds 4 and 5
    stay blind for a record written after it (they turned post-hoc before this rule)."""
    a = "def assumed_values(p):\n    from ..cost.hardware import load_profile\n    return load_profile(p)\n"
    b = "from ..cost.hardware import load_profile\n\ndef assumed_values(p):\n    return load_profile(p)\n"
    c = b.replace("load_profile(p)\n", "load_profile(p) * 2\n")
    assert B.fit_rule_source(a) == B.fit_rule_source(b)
    assert B.fit_rule_source(b) != B.fit_rule_source(c)


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(repo)})
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def _write(repo, rel, text):
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_mechanism_on_a_scratch_history(tmp_path, monkeypatch):
    repo = tmp_path
    _git(repo, "init", "-q")
    _write(repo, B.SPLIT, "calibration: [cal]\nvalidation: [val]\n")
    _write(repo, f"{B.CASES}/c1.yaml", "source: cal\nvalue: 1\n")
    _write(repo, B.FIT, json.dumps({"parameters": {"eta_F": {"fitted": 0.4}}}))
    _write(repo, B.RULE_FILE, "MIN_ELASTICITY = 0.05\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "model")
    _write(repo, f"{B.CASES}/v1.yaml", "source: val\nvalue: 2\n")
    _git(repo, "add", "-A")
    written = _git(repo, "commit", "-qm", "round's cases")
    _write(repo, B.FIT, json.dumps({"parameters": {"eta_F": {"fitted": 0.4}}, "split_sha256": "new"}))
    same_values = _git(repo, "commit", "-qam", "refit: same values, new hash")
    _write(repo, f"{B.CASES}/c1.yaml", "source: cal\nvalue: 1.5\n")
    _write(repo, B.RULE_FILE, "MIN_ELASTICITY = 0.1\n")
    mended = _git(repo, "commit", "-qam", "calibration mend and a new rule")
    monkeypatch.setattr(B, "REPO", repo)
    monkeypatch.setattr(B, "PUBLISHED", repo / "data" / "published")
    frozen = {"priced": {"v1": 2.0}}
    entry = {"round": 9, "sources": ["val"], "record": {"predictor_commit": same_values}}
    ok = B.blind_check(entry, frozen)
    assert ok["blind"] is True and ok["cases_written"] == written and ok["cases"] == 1
    late = B.blind_check(entry, frozen, judged_by=mended)
    assert late["blind"] is False
    assert late["changed"] == ["calibration cases: c1.yaml", "fit rule: MIN_ELASTICITY"]
    _write(repo, B.FIT, json.dumps({"parameters": {"eta_F": {"fitted": 0.5}}}))
    refit = _git(repo, "commit", "-qam", "refit")
    assert "fit.json: the fitted parameters or their values" in B.blind_check(entry, frozen, judged_by=refit)["changed"]
    gone = B.blind_check(entry | {"record": {"predictor_commit": "0" * 40}}, frozen)
    assert gone["blind"] is None and "no git history" in gone["why"]
