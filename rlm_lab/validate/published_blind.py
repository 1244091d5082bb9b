"""Did what a validation round was judged with predate the round? (issue 39, deliverable 4), read from git history.

    blind_check(round_entry)        # one round of data/published/fresh_rounds.json
    rounds_blind()                  # every round's check

A round is **blind** when its cases were written before anything that could have been adjusted to them: the model
that priced it (``record.predictor_commit``) used

* the **calibration cases** (the case files of the sources ``split.yaml`` puts on the calibration side) exactly as
  they were before the round's first case file was committed;
* the **fitted-parameter set and values** of ``fit.json`` (which efficiencies are fitted, and to what) as they were
  then: a fit rewritten only to record a new split hash, with the same values, does not count as a change;
* the **fit rule**: the code that fits (``fit_efficiencies`` and what it calls, the parameter list, the bounds and
  the identifiability rule of :mod:`.published_predict`) as it was then, compared by its source text.

"Before the round" is the parent of the first commit that added any of its case files. Each comparison is made on
the files' contents at the two commits, so a commit that only moved a hash or a comment elsewhere does not count;
what changed is named. Without git history (an archive, not a clone) the check says so and decides nothing.
"""

from __future__ import annotations

import ast
import json
import subprocess

import yaml

from .published import PUBLISHED, REPO

CASES = "data/published/cases"
FIT = "data/published/fit.json"
SPLIT = "data/published/split.yaml"
RULE_FILE = "rlm_lab/validate/published_predict.py"
# the fit rule: these functions' and names' source text in RULE_FILE
RULE_NAMES = ("fit_efficiencies", "elasticities", "assumed_values", "_log_ratio", "FIT_PARAMETERS", "FIT_BOUNDS",
              "ELASTICITY_STEP", "MIN_ELASTICITY")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _show(commit: str, path: str) -> str | None:
    return _git("show", f"{commit}:{path}")


def _calibration_sources(commit: str) -> tuple:
    text = _show(commit, SPLIT)
    return tuple((yaml.safe_load(text) or {}).get("calibration", ())) if text else ()


def _calibration_files(commit: str) -> dict:
    """{case file: its text} of the calibration cases at ``commit``."""
    sources = set(_calibration_sources(commit))
    names = (_git("ls-tree", "--name-only", f"{commit}:{CASES}") or "").split()
    out = {}
    for n in names:
        if n.endswith(".yaml"):
            text = _show(commit, f"{CASES}/{n}") or ""
            try:
                src = (yaml.safe_load(text) or {}).get("source")
            except yaml.YAMLError:
                src = None
            if src in sources:
                out[n] = text
    return out


def _fit_values(commit: str) -> dict | None:
    text = _show(commit, FIT)
    if text is None:
        return None
    params = json.loads(text).get("parameters", {})
    return {n: (p.get("fitted"), "not_fitted" in p) for n, p in sorted(params.items())}


def _behaviour(fn: ast.FunctionDef) -> ast.FunctionDef:
    """``fn`` without what Python does not execute: type annotations (a renamed class in a hint changes no number)
    and the docstring; and without its import statements: an import moved from the function's body to the module's
    top (issue 41's imports at the top) binds the same name to the same module and changes no number."""
    for node in ast.walk(fn):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [b for b in body if not isinstance(b, (ast.Import, ast.ImportFrom))]
            node.body = kept or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            if ast.get_docstring(node) is not None and len(node.body) > 1:
                node.body = node.body[1:]
        elif isinstance(node, ast.arg):
            node.annotation = None
    return fn


def fit_rule_source(text: str) -> dict:
    """{name: source text} of :data:`RULE_NAMES` in a version of the fit's module, compared by behaviour: comments,
    docstrings and type annotations do not count (:func:`_behaviour`)."""
    tree = ast.parse(text)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in RULE_NAMES:
            out[node.name] = ast.unparse(_behaviour(node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in RULE_NAMES:
                    out[t.id] = ast.unparse(node)
    return out


def _rule(commit: str) -> dict | None:
    text = _show(commit, RULE_FILE)
    return None if text is None else fit_rule_source(text)


def round_cases(entry: dict, frozen: dict) -> list[str]:
    """The case ids of a round: the priced cases whose file names one of the round's sources."""
    out = []
    for cid in frozen.get("priced", {}):
        path = PUBLISHED / "cases" / f"{cid}.yaml"
        if path.is_file() and (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("source") in entry["sources"]:
            out.append(cid)
    return sorted(out)


def blind_check(entry: dict, frozen: dict | None = None, judged_by: str | None = None) -> dict:
    """Whether one round (an entry of fresh_rounds.json ``rounds``) was priced with calibration cases, fit values
    and parameter set, and fit rule that predate its cases (module docstring): ``blind`` True/False, or None with
    ``why`` when git history cannot say; ``changed`` names what moved. ``judged_by``: the commit whose model is
    judged on the round (default: the one that first priced it; :func:`record_blind` passes the current record's)."""
    frozen = frozen if frozen is not None else json.loads((PUBLISHED / "fresh_rounds.json").read_text("utf-8"))
    cases = round_cases(entry, frozen)
    priced_by = judged_by or entry["record"]["predictor_commit"]
    out = {"round": entry["round"], "cases": len(cases), "priced_by": priced_by, "blind": None, "changed": []}
    if _git("cat-file", "-e", f"{priced_by}^{{commit}}") is None:
        return out | {"why": "no git history with the commit that priced the round"}
    files = [f"{CASES}/{c}.yaml" for c in cases]
    added = (_git("log", "--diff-filter=A", "--format=%H", "--reverse", priced_by, "--", *files) or "").split()
    if not added:
        return out | {"why": "the round's case files are not in the history of the commit that priced it"}
    before = (_git("rev-parse", f"{added[0]}^") or "").strip()
    out["cases_written"] = added[0]
    out["before"] = before
    cal_then, cal_now = _calibration_files(before), _calibration_files(priced_by)
    moved = sorted(n for n in set(cal_then) | set(cal_now) if cal_then.get(n) != cal_now.get(n))
    if moved:
        out["changed"].append(f"calibration cases: {', '.join(moved)}")
    if _fit_values(before) != _fit_values(priced_by):
        out["changed"].append("fit.json: the fitted parameters or their values")
    r0, r1 = _rule(before), _rule(priced_by)
    if r0 != r1:
        names = sorted(n for n in set(r0 or {}) | set(r1 or {}) if (r0 or {}).get(n) != (r1 or {}).get(n))
        out["changed"].append(f"fit rule: {', '.join(names) or RULE_FILE}")
    out["blind"] = not out["changed"]
    return out


def rounds_blind(path=None) -> list[dict]:
    """:func:`blind_check` of every round of data/published/fresh_rounds.json (or ``path``)."""
    frozen = json.loads((path or PUBLISHED / "fresh_rounds.json").read_text("utf-8"))
    return [blind_check(r, frozen) for r in frozen["rounds"]]


def record_blind(path=None, record=None) -> list[dict]:
    """:func:`blind_check` of every round against the model of the current prediction record (``validation.json``'s
    ``predictor_commit``): which rounds the record's numbers are still blind evidence for."""
    frozen = json.loads((path or PUBLISHED / "fresh_rounds.json").read_text("utf-8"))
    rec = json.loads((record or PUBLISHED / "validation.json").read_text("utf-8"))
    return [blind_check(r, frozen, judged_by=rec["predictor_commit"]) for r in frozen["rounds"]]
