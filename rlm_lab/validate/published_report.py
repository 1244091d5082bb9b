"""``rlm-lab validate --published``: the cost model against published cluster measurements, case by case, and the
issue's bars (issue 21 item 4 and 6).

    rep = report()                 # the registry predicted with the assumed and with the fitted efficiencies
    print(format_report(rep))      # what the command prints
    rep["summary"]["ratio"]        # the validation cases' numbers and verdicts
    html_table(rep["rows"], "validation")   # the book's table

**Errors.** A case's error is predicted / published - 1 (its unit: seconds, a speed-up or a share). A ratio's
**direction** is right when the prediction lies on the same side of :data:`rlm_lab.validate.published.DIRECTION_REFERENCE`
as the published value (a speed-up above or below 1, a share above or below one half).

**Bars**, fixed in issue 21 before any case was predicted (:data:`BARS`): over the validation cases the cost
model prices, ratios (speed-ups and shares) median |error| <= 25 % with the direction right in >= 90 % of them;
absolute step times median |error| <= 50 %. A bar is ``met`` or ``not met`` from the live numbers, and
``undecided`` while fewer than :data:`MIN_CASES` validation cases of its group are priced. Stage and sync times have
no bar; they are reported.

The predictions use the efficiencies fitted on the calibration cases (``data/published/fit.json``) when the fit
exists, else the profiles' assumed ones (and say which).

The book reads the committed prediction record ``data/published/validation.json`` (:func:`record_report`), written
by ``rlm-lab validate --published --write`` with the hashes of the registry and the fit it was computed from (a
record made from another registry or fit is refused); predicting every case takes tens of seconds, too long for a
chapter at smoke size. Its verdicts are recomputed from its numbers, and a test recomputes some of its predictions.
"""

from __future__ import annotations

import hashlib
import html
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import RlmLabError
from ..evidence import median_interval
from ..records.files import atomic_write_text, json_text
from .published import DIRECTION_REFERENCE, PUBLISHED, QUANTITIES, Registry, load_published
from .published_bars import format_bars, judge
from .published_predict import (
    ELASTICITY_STEP,
    FIT_FILE,
    MIN_ELASTICITY,
    Outcome,
    _git,
    assumed_values,
    fitted_values,
    load_fit,
    predict_all,
)

BARS = {"ratio_median": 0.25, "ratio_direction": 0.90, "step_median": 0.50}   # issue 21, fixed in advance
MIN_CASES = 3
GROUPS = {"ratio": "ratios (speed-ups, shares)", "step": "absolute step times", "other": "stage and sync times (no bar)"}


def direction_right(outcome: Outcome) -> bool | None:
    """For a ratio case: is the prediction on the published value's side of the reference? None otherwise or when
    not predicted."""
    return _same_side(outcome.predicted, outcome.case.published.value, outcome.case.quantity)


def _same_side(predicted: float | None, published: float, quantity: str) -> bool | None:
    if quantity not in DIRECTION_REFERENCE or predicted is None:
        return None
    ref = DIRECTION_REFERENCE[quantity]
    return (predicted - ref > 0) == (published - ref > 0) and predicted != ref


def group_summary(outcomes: list[Outcome], group: str) -> dict:
    """The numbers of one group (``ratio``, ``step`` or ``other``) over ``outcomes``, their 95 % intervals over the
    cases and the verdicts those intervals allow.

    The cases are a sample of what the predictor is asked, so a bar's number has an interval: the median |error|'s
    is :func:`rlm_lab.evidence.median_interval` over the cases (exact order statistics below 10 cases, none below 6,
    the percentile bootstrap from 10), the direction share's
    the exact (Clopper-Pearson) binomial interval (``scipy.stats.binomtest``,
    https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.binomtest.html)."""
    cases = [o for o in outcomes if o.case.group == group]
    priced = [o for o in cases if o.predicted is not None]
    errs = [abs(o.error) for o in priced]
    iv = median_interval(errs) if errs else None
    out = {"cases": len(cases), "priced": len(priced),
           "median_abs_error": statistics.median(errs) if errs else None,
           "median_abs_error_interval": [iv.lo, iv.hi] if iv is not None and iv.decided else None,
           "worst_abs_error": max(errs) if errs else None,
           "under_predicted": sum(o.error < 0 for o in priced)}
    verdicts = {}
    if group == "ratio":
        right = [direction_right(o) for o in priced]
        out["direction_right"] = sum(bool(r) for r in right)
        out["direction_share"] = out["direction_right"] / len(priced) if priced else None
        out["direction_interval"] = list(share_interval(out["direction_right"], len(priced))) if priced else None
        verdicts["ratio_median"] = _verdict(out["median_abs_error"], BARS["ratio_median"], len(priced),
                                            interval=out["median_abs_error_interval"])
        verdicts["ratio_direction"] = _verdict(out["direction_share"], BARS["ratio_direction"], len(priced),
                                               at_least=True, interval=out["direction_interval"])
    elif group == "step":
        verdicts["step_median"] = _verdict(out["median_abs_error"], BARS["step_median"], len(priced),
                                           interval=out["median_abs_error_interval"])
    out["verdicts"] = verdicts
    return out


def share_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a share of k in n."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def _verdict(value, bar: float, n: int, at_least: bool = False, interval=None) -> str:
    """``met (...)``, ``not met (...)`` or ``undecided (...)``: the bar against the interval of the live value
    (``met`` only when the whole interval is on the bar's side, ``not met`` only when it is wholly on the other;
    no interval, e.g. identical errors, is the value itself)."""
    if value is None or n < MIN_CASES:
        return f"undecided ({n} case{'s' if n != 1 else ''} priced, {MIN_CASES} needed)"
    if interval is None:
        return (f"undecided ({value:.0%}, {n} cases: too few for a 95 % interval of the median, which needs 6; "
                f"bar {bar:.0%})")
    lo, hi = interval
    if at_least:
        word, rel = ("met", ">=") if lo >= bar else ("not met", "<") if hi < bar else ("undecided", "straddles")
    else:
        word, rel = ("met", "<=") if hi <= bar else ("not met", ">") if lo > bar else ("undecided", "straddles")
    shown = lambda v: f"{v:.0%}" if f"{v:.0%}" != f"{bar:.0%}" else f"{v:.1%}"  # never "50% > 50%"
    return f"{word} ({shown(value)} [{shown(lo)}, {shown(hi)}] {rel} {bar:.0%}, {n} cases)"


def summary(outcomes: list[Outcome], split: str = "validation") -> dict:
    """Each group's numbers and verdicts over the cases of ``split``."""
    chosen = [o for o in outcomes if o.case.split == split]
    return {g: group_summary(chosen, g) for g in GROUPS}


def _fmt(value, quantity: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} s" if QUANTITIES[quantity] == "s" else f"{value:.2f}" + ("x" if quantity == "speedup" else "")


def rows(assumed: list[Outcome], fitted: list[Outcome] | None) -> list[dict]:
    """One row per case: the published number (with the source's interval), the prediction with the assumed
    efficiencies and with the fitted ones, the error and direction of the one the bars read, and why a case is not
    priced."""
    out = []
    for i, a in enumerate(assumed):
        c = a.case
        f = fitted[i] if fitted else None
        judged = f if f is not None else a
        d = direction_right(judged)
        pub = c.published
        out.append({
            "case": c.id, "split": c.split, "source": c.source, "quantity": c.quantity, "group": c.group,
            "hardware": f"{c.hardware['count']} x {c.hardware['gpu']}", "model": c.model["name"],
            "mode": c.mode if c.quantity != "speedup" else f"{c.mode} -> {c.variant.get('mode', c.mode)}",
            "published": _fmt(pub.value, c.quantity),
            "interval": "-" if pub.interval is None else f"[{_fmt(pub.interval[0], c.quantity)}, "
                                                         f"{_fmt(pub.interval[1], c.quantity)}]",
            "predicted_assumed": _fmt(a.predicted, c.quantity),
            "predicted_fitted": _fmt(f.predicted, c.quantity) if f is not None else "-",
            "error": "-" if judged.error is None else f"{judged.error:+.0%}",
            "direction": "-" if d is None else ("right" if d else "wrong"),
            "lengths": c.lengths, "where": c.where, "why": judged.why,
            "error_value": judged.error, "stage": c.stage, "published_value": pub.value,
        })
    return out


def report(registry: Registry | None = None, fit: dict | None = None, use_fit: bool = True) -> dict:
    """The registry predicted with the assumed efficiencies and (when a fit exists and ``use_fit``) the fitted ones;
    the table rows and each split's summary, judged on the fitted predictions when there are any."""
    registry = registry or load_published()
    fit = load_fit() if fit is None and use_fit else fit
    values = fitted_values(fit) if use_fit else None
    assumed = predict_all(registry)
    return _assemble(registry, fit if values else None, assumed, predict_all(registry, values) if values else None)


def _assemble(registry: Registry, fit: dict | None, assumed: list[Outcome], fitted: list[Outcome] | None) -> dict:
    judged = fitted or assumed
    values = fitted is not None
    return {"cases": len(registry.cases), "sources": len(registry.sources),
            "profiles": sorted({c.hardware["profile"] for c in registry.cases.values()}),
            "projects": len({s.project for s in registry.sources.values()}),
            "split": {k: list(v) for k, v in registry.split.items()}, "fit": fit,
            "efficiencies": "fitted on the calibration cases" if values else "assumed (no fit used)",
            "rows": rows(assumed, fitted),
            "summary": {side: summary(judged, side) for side in ("calibration", "validation")},
            "bars": judge([o for o in judged if o.case.split == "validation"])}


COLUMNS = {"case": ("case", 44), "hardware": ("hardware", 27), "mode": ("mode", 20), "published": ("published", 10),
           "interval": ("interval", 16), "predicted_assumed": ("pred, η assumed", 15),
           "predicted_fitted": ("pred, η fitted", 14), "error": ("error", 6), "direction": ("direction", 9),
           "lengths": ("lengths", 14)}


def format_report(rep: dict) -> str:
    """The command's text: the fit, both tables, the validation summary with its verdicts, the unpriced cases."""
    lines = [f"published cluster measurements: {rep['cases']} cases from {rep['sources']} sources "
             f"({rep['projects']} projects); split by source: calibration {', '.join(rep['split']['calibration'])}; "
             f"validation {', '.join(rep['split']['validation'])}",
             f"efficiencies: {rep['efficiencies']}"]
    if rep["fit"]:
        f = rep["fit"]
        lines.append("  " + ", ".join(f"{n} {p['assumed']} -> {p['fitted']:.3f} ({p['profile_key']})"
                                      for n, p in f["parameters"].items())
                     + f" on {len(f['cases'])} calibration cases, {f['fitted_at']}, split {f['split_sha256'][:12]}")
        lo, hi = f.get("bounds", (None, None))
        at_bound = [n for n, p in f["parameters"].items() if p["fitted"] in (lo, hi)]
        unmoved = [n for n, p in f["parameters"].items() if p["fitted"] == p["assumed"] and "not_fitted" not in p]
        lines += [f"  not fitted: {n}, kept at its assumed value ({p['not_fitted']})"
                  for n, p in f["parameters"].items() if "not_fitted" in p]
        if at_bound:
            lines.append(f"  at a bound of the fit ({lo}, {hi}): {', '.join(at_bound)}: the calibration cases pull it past "
                         f"any plausible value, a sign that another term of the model is wrong for them")
        if unmoved:
            lines.append(f"  not moved by the fit: {', '.join(unmoved)} (the calibration cases the cost model prices "
                         f"do not constrain it)")
        if f.get("determined") != "over":
            lines.append(f"  the fit is {f.get('determined')} determined ({len(f['cases'])} cases for "
                         f"{len(f['parameters'])} parameters): its residuals are no evidence of a good model")
    for side in ("calibration", "validation"):
        lines += ["", f"{side} cases"]
        lines.append(" ".join(f"{h:{w}.{w}}" for h, w in COLUMNS.values()))
        for r in rep["rows"]:
            if r["split"] == side:
                lines.append(" ".join(f"{str(r[k]):{w}.{w}}" for k, (_, w) in COLUMNS.items()))
        for g, label in GROUPS.items():
            s = rep["summary"][side][g]
            med = "-" if s["median_abs_error"] is None else f"{s['median_abs_error']:.0%}"
            extra = f", direction right {s['direction_right']} of {s['priced']}" if g == "ratio" else ""
            lines.append(f"  {label}: {s['priced']} of {s['cases']} priced, median |error| {med}{extra}")
            if side == "validation":
                lines += [f"    bar {k}: {v}" for k, v in s["verdicts"].items()]
    if "bars" in rep:
        lines += ["", *format_bars(rep["bars"])]
    unpriced = [r for r in rep["rows"] if r["why"]]
    if unpriced:
        lines += ["", "not priced by the cost model (left out of the numbers above):"]
        lines += [f"  {r['case']}: {r['why']}" for r in unpriced]
    return "\n".join(lines)


def html_table(table_rows: list[dict], split: str) -> str:
    """The book's table of one split: case (with where it was read), hardware, mode, published (the source's
    interval), predicted with the assumed and the fitted efficiencies, error, direction, lengths, or why not priced."""
    mended = _frozen().get("mended", {})
    head = ("case (where)", "hardware", "mode", "published", "source's interval", "predicted, assumed η",
            "predicted, fitted η", "error", "direction", "lengths")
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in table_rows:
        if r["split"] != split:
            continue
        fresh = "" if r["split"] != "validation" or r["source"] not in FRESH_SOURCES else \
            " (fresh round, mended since)" if r["case"] in mended else " (fresh round)"
        case = (f"{html.escape(r['case'])}{fresh}<br><small>{html.escape(r['source'])}: "
                f"{html.escape(r['where'])}</small>")
        cells = [case] + [html.escape(str(r[k])) for k in ("hardware", "mode", "published", "interval",
                                                            "predicted_assumed", "predicted_fitted", "error",
                                                            "direction", "lengths")]
        if r["why"]:
            cells[5] = f"not priced: {html.escape(r['why'])}"
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


# The validation sources whose cases were written from their sources without pricing them, committed, and priced
# once, with no change to the model, the fit or any earlier case in between (2026-12-04, three rounds; 2026-12-05, two more): the registry's
# cleanest test. data/published/fresh_rounds.json freezes each round's predictions as first priced, with each case
# file's hash, and the book reports the rounds from that file (:func:`fresh_rows`), so a later change to the model
# leaves their result as it was and says how many of them it moves (:func:`fresh_moved`). A case file edited after its
# round fails the test of the frozen hashes unless the file's ``mended`` names it and says why: its round's result
# stays as first priced (a fact about the case as then written), and the book's table marks it "mended since".
FRESH_SOURCES = ("rlinf-vs-verl", "verl-checkpoint-engine-readme", "verl-delta-weight-sync", "verl-sglang-one-step-off",
                 "nemo-rl-v03-blog", "miles-p2p-weight-transfer",
                 # rounds 4 and 5 (2026-12-05): written by a helper who priced none, priced once by another
                 "nemo-rl-v06-perf", "nemo-rl-v04-perf", "skyrl-megatron-backend", "nemo-rl-async-refit-blog")
FRESH_ROUNDS = PUBLISHED / "fresh_rounds.json"


def case_sha256(case_id: str, folder: Path = PUBLISHED) -> str:
    """The hash of one case file, as data/published/fresh_rounds.json keeps it for the fresh rounds' cases."""
    return hashlib.sha256((folder / "cases" / f"{case_id}.yaml").read_bytes()).hexdigest()


def _frozen(path: Path = FRESH_ROUNDS) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def fresh_rows(rep: dict, path: Path = FRESH_ROUNDS) -> list[dict]:
    """The report's rows of the fresh rounds' validation cases with the prediction, error and direction each had when
    its round priced it (the frozen file), whatever the current model says (``rep``: :func:`record_report`)."""
    priced = _frozen(path)["priced"]
    out = []
    for r in rep["rows"]:
        if r["split"] != "validation" or r["source"] not in FRESH_SOURCES:
            continue
        p, pub = priced[r["case"]], r["published_value"]
        live = None if r["error_value"] is None else pub * (1 + r["error_value"])
        moved = (live is None) != (p is None) or (p is not None and abs(live / p - 1) > 1e-6)
        d = _same_side(p, pub, r["quantity"])
        out.append(r | {"predicted_frozen": p, "moved": moved, "error_value": None if p is None else p / pub - 1,
                        "direction": "-" if d is None else ("right" if d else "wrong")})
    return out


def fresh_moved(rep: dict, path: Path = FRESH_ROUNDS) -> list[str]:
    """The fresh cases whose prediction in ``rep`` differs from their round's (relative 1e-6, or priced in one and
    not the other): empty while the model is the one that priced them."""
    return sorted(r["case"] for r in fresh_rows(rep, path) if r["moved"])


def fresh_round_rows(rep: dict, path: Path = FRESH_ROUNDS) -> list[dict]:
    """One row per fresh round (``rounds`` of data/published/fresh_rounds.json): its number, when its record was
    written, its sources, how many cases it added and how many of them its predictor priced, and the bars' three
    numbers over its cases (:func:`rows_numbers`) as first priced (:func:`fresh_rows`)."""
    frozen = fresh_rows(rep, path)
    out = []
    for r in _frozen(path)["rounds"]:
        mine = [x for x in frozen if x["source"] in r["sources"]]
        out.append({"round": r["round"], "written": str(r["record"]["written_at"])[:16].replace("T", " "),
                    "sources": ", ".join(r["sources"]), "priced": str(sum(x["error_value"] is not None for x in mine)),
                    **rows_numbers(mine)})
    return out


def rows_numbers(table_rows: list[dict]) -> dict:
    """The bars' three numbers over some table rows, as text: ratios' median |error| and direction, steps' median
    |error|, each with how many priced cases it is over ("-" when none)."""
    ratio = [r for r in table_rows if r["group"] == "ratio" and r["error_value"] is not None]
    step = [r for r in table_rows if r["group"] == "step" and r["error_value"] is not None]
    med = lambda rs: f"{statistics.median(abs(r['error_value']) for r in rs):.1%}" if rs else "-"
    return {"cases": str(len(table_rows)), "ratio_cases": str(len(ratio)), "ratio_median": med(ratio),
            "ratio_direction": f"{sum(r['direction'] == 'right' for r in ratio)} of {len(ratio)}",
            "step_cases": str(len(step)), "step_median": med(step)}


def book_numbers(rep: dict) -> dict:
    """The numbers the book's prose glues, as text: counts, the fit, each bar's verdict."""
    v = rep["summary"]["validation"]
    out = {"cases": str(rep["cases"]), "sources": str(rep["sources"]), "projects": str(rep["projects"]),
           "ratio_verdict": v["ratio"]["verdicts"]["ratio_median"],
           "direction_verdict": v["ratio"]["verdicts"]["ratio_direction"],
           "step_verdict": v["step"]["verdicts"]["step_median"],
           "priced": str(sum(v[g]["priced"] for g in GROUPS)), "validation_cases": str(sum(v[g]["cases"] for g in GROUPS))}
    out |= {f"{k}_bar": f"{b:.0%}" for k, b in BARS.items()}
    for stage in ("generation", "preparation", "training"):   # where the error sits: the validation's stage times
        errs = [r["error_value"] for r in rep["rows"] if r["split"] == "validation" and r["quantity"] == "stage_time"
                and r["stage"] == stage and r["error_value"] is not None]
        out[f"stage_{stage}_median"] = f"{statistics.median(errs):+.0%}" if errs else "-"
        out[f"stage_{stage}_range"] = f"{min(errs):+.0%} to {max(errs):+.0%}" if errs else "-"
        out[f"stage_{stage}_cases"] = str(len(errs))
    fresh = fresh_rows(rep)                                                    # as first priced
    out |= {f"fresh_{k}": v for k, v in rows_numbers(fresh).items()}
    out["fresh_moved"] = str(sum(r["moved"] for r in fresh))
    out |= {f"earlier_{k}": v for k, v in rows_numbers([r for r in rep["rows"] if r["split"] == "validation"
                                                        and r["source"] not in FRESH_SOURCES]).items()}

    out["elasticity_step"] = f"{ELASTICITY_STEP - 1:.0%}"                       # the fit's identifiability rule
    out["elasticity_move"] = f"{MIN_ELASTICITY * (ELASTICITY_STEP - 1):.0%}"

    fitted = (rep["fit"] or {}).get("parameters", {})
    for n, v in assumed_values(rep.get("profiles", ())).items():
        out[f"{n}_assumed"] = "-" if v is None else f"{v:g}"
        out[f"{n}_fitted"] = ("not fitted" if n not in fitted else f"{fitted[n]['fitted']:.2f}"
                              + (" (kept: not identified)" if "not_fitted" in fitted[n] else ""))
        el = ((rep["fit"] or {}).get("elasticity") or {}).get(n)
        out[f"{n}_max_elasticity"] = f"{max(abs(e) for e in el.values()):.3f}" if el else "-"
    return out


# ---- the committed prediction record (what the book reads) ----------------------------------------------
RECORD = PUBLISHED / "validation.json"


def registry_sha256(folder: Path = PUBLISHED) -> str:
    """One hash of everything a prediction reads from the registry: sources, split and every case file."""
    h = hashlib.sha256()
    for path in [folder / "sources.yaml", folder / "split.yaml", *sorted((folder / "cases").glob("*.yaml"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def prediction_record(rep_outcomes: dict, fit: dict | None) -> dict:
    """The record of one ``--published`` run: every case's prediction (assumed and fitted efficiencies) or reason,
    with what it was computed from (the registry's and the fit's hashes, the predictor's commit, the time);
    :func:`write_record` adds the validation split's ``summary``."""
    cases = {}
    for key, outs in rep_outcomes.items():
        for o in outs or []:
            cases.setdefault(o.case.id, {})[key] = o.predicted if o.predicted is not None else {"why": o.why}
    return {"registry_sha256": registry_sha256(), "fit_sha256": _sha(FIT_FILE) if fit else None,
            "predictor_commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain", "rlm_lab")),
            "written_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cases": cases}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bars_numbers(b: dict) -> dict:
    """The numbers of issue 39's bars a record and its history keep (published_bars.judge)."""
    g, d, st = b["gain"], b["direction"], b["step"]
    return {"gain_median": g["value"], "gain_interval": g["interval"], "gain_sources": g["sources"],
            "direction_right": d["right"], "direction_decisive": d["decisive"], "constant_right": d["constant_right"],
            "direction_p_beats_constant": d["p_beats_constant"], "step_median": st["value"],
            "step_interval": st["interval"], "step_sources": st["sources"],
            "verdicts": {"gain_median": g["verdict"], "direction": d["verdict"], "step_median": st["verdict"]}}


def history_entry(rec: dict) -> dict:
    """One earlier validation as the record's ``history`` keeps it: when, from what, its three bar numbers, and
    each case's prediction (fitted where the record has one, else assumed; None where it was not priced), so that
    a round stays checkable case by case after the model has changed."""
    v = rec.get("summary") or {}
    ratio, step = v.get("ratio") or {}, v.get("step") or {}
    predicted = {}
    for cid, p in (rec.get("cases") or {}).items():
        val = p.get("fitted", p.get("assumed")) if isinstance(p, dict) else None
        predicted[cid] = val if isinstance(val, (int, float)) else None
    return {"written_at": rec.get("written_at"), "predictor_commit": rec.get("predictor_commit"),
            "registry_sha256": rec.get("registry_sha256"), "fit_sha256": rec.get("fit_sha256"),
            "ratio_median_abs_error": ratio.get("median_abs_error"), "ratio_direction_right": ratio.get("direction_right"),
            "ratio_priced": ratio.get("priced"), "step_median_abs_error": step.get("median_abs_error"),
            "step_priced": step.get("priced"), "note": rec.get("note"),
            "verdicts": {**(ratio.get("verdicts") or {}), **(step.get("verdicts") or {})},
            "bars": rec.get("bars"),
            "advise_ranks": {p["case"]: p.get("rank") for p in rec.get("advise") or [] if isinstance(p, dict)},
            "predicted": predicted}


def carried_history(path: Path) -> list:
    """The history a new record carries: the old record's own history and the old record itself, unless the old one
    was made from the same registry and fit (then it was the same validation, written again). A record that cannot
    be read is one error line: rewriting it would lose its history."""
    return _carried(_old_record(path))


def _carried(old: dict | None) -> list:
    if old is None:
        return []
    hist = [h for h in old.get("history", []) if isinstance(h, dict)]
    return hist if _same_validation(old) else hist + [history_entry(old)]


def _old_record(path: Path) -> dict | None:
    """The record at ``path`` (None when there is none); an unreadable one is one error line, never a lost history."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise RlmLabError(f"{path.name} is not valid JSON ({e}); its history would be lost: restore it from git") from None


def _same_validation(old: dict) -> bool:
    """Was ``old`` made from the registry and fit of now (then writing again is the same validation)?"""
    return old.get("registry_sha256") == registry_sha256() and old.get("fit_sha256") == (
        _sha(FIT_FILE) if FIT_FILE.is_file() else None)


LOCK_WAIT_S = 600   # how long a writer waits for another one (predicting every case takes seconds)


def write_record(registry: Registry, fit: dict | None, path: Path = RECORD, note: str | None = None,
                 advise=None) -> dict:
    """Predict every case and write the record the book reads; returns the report. The record keeps every earlier
    validation's numbers under ``history`` (:func:`carried_history`): a registry or fit changed after a validation
    never hides what the validation before it said. Notes are append-only: a new note on the same validation carries
    the record it replaces (with its note) into the history. Writers are serialised by a lock on the record's folder
    (``filelock``: the read of the old record and the write of the new one are one step, so two concurrent writers
    each keep the other's note). ``advise``: a function of the report giving the advisor's picks on the published
    settings (:func:`.published_advise.judge_advise` with this validation's band), kept under ``advise`` and in the
    report when given."""
    values = fitted_values(fit)
    assumed = predict_all(registry)
    fitted = predict_all(registry, values) if values else None
    rep = _assemble(registry, fit, assumed, fitted)
    try:
        with FileLock(path.parent / ".lock", timeout=LOCK_WAIT_S):
            old = _old_record(path)
            history = _carried(old)
            if old is not None and _same_validation(old):
                if note is None:              # written again: keep what its note said
                    note = old.get("note")
                elif old.get("note") and old.get("note") != note:   # a new note: the old one stays, in the history
                    history = history + [history_entry(old)]
            record = prediction_record({"assumed": assumed, "fitted": fitted}, fit)
            # the validation split's numbers, for readers below this layer (rlm-lab advise prints them beside its
            # ranking)
            record["summary"] = rep["summary"]["validation"]
            record["bars"] = _bars_numbers(rep["bars"])    # issue 39's bars (published_bars), as this record judges them
            if advise is not None:
                rep["advise"] = advise(rep)
                record["advise"] = [p.to_dict() for p in rep["advise"]]
            if note:
                record["note"] = note
            record["history"] = history
            atomic_write_text(path, json_text(record, indent=1) + "\n")
    except Timeout:
        raise RlmLabError(f"another `rlm-lab validate --published --write` has held {path.parent / '.lock'} for "
                          f"{LOCK_WAIT_S} s; wait for it or remove the lock if no such process runs") from None
    return rep


def history_rows(path: Path = RECORD) -> list[dict]:
    """Every validation the record knows, oldest first, the current one last: date, predictor commit, the three
    numbers the bars judge (for the book's table of validation rounds)."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for h in [*rec.get("history", []), history_entry(rec)]:
        r, d, s = h.get("ratio_median_abs_error"), h.get("ratio_direction_right"), h.get("step_median_abs_error")
        rows.append({"written": str(h.get("written_at") or "?")[:10], "commit": str(h.get("predictor_commit") or "?")[:9],
                     "ratio_median": "-" if r is None else f"{r:.1%}",
                     "direction": "-" if d is None else f"{d} of {h.get('ratio_priced')}",
                     "step_median": "-" if s is None else f"{s:.1%}", "note": h.get("note") or "",
                     "verdicts": "; ".join(f"{k}: {v.split(' (')[0]}" for k, v in sorted((h.get("verdicts") or {}).items()))})
    return rows


def record_report(path: Path = RECORD) -> dict:
    """The report rebuilt from the committed prediction record: the verdicts are recomputed here from its numbers.
    One error line when the record is missing or was made from another registry or another fit."""
    rec, registry, fit = _current_record(path)
    rep = _assemble(registry, fit, _record_outcomes(rec, registry, "assumed"),
                    _record_outcomes(rec, registry, "fitted") if fit else None)
    rep["record"] = {k: rec[k] for k in ("predictor_commit", "dirty", "written_at")}
    return rep


def record_outcomes(path: Path = RECORD) -> list[Outcome]:
    """The committed record's predictions, one :class:`Outcome` per case, with the fitted efficiencies when
    ``fit.json`` exists (else the assumed ones): what ``predict_all`` with the committed fit gives, read
    instead of recomputed (the record test keeps the two equal). Same error lines as :func:`record_report`."""
    rec, registry, fit = _current_record(path)
    return _record_outcomes(rec, registry, "fitted" if fit else "assumed")


def _current_record(path: Path):
    """(record, registry, fit) or one error line when the record is missing or from another registry or fit."""
    if not path.is_file():
        raise RlmLabError(f"no prediction record {path.name}; write it with `rlm-lab validate --published --write`")
    rec = json.loads(path.read_text(encoding="utf-8"))
    registry = load_published()
    fit = load_fit()
    if rec.get("registry_sha256") != registry_sha256():
        raise RlmLabError(f"{path.name} was made from another registry (data/published changed since); rewrite it "
                          f"with `rlm-lab validate --published --write`")
    if rec.get("fit_sha256") != (_sha(FIT_FILE) if fit else None):
        raise RlmLabError(f"{path.name} was made with another fit than fit.json; rewrite it with "
                          f"`rlm-lab validate --published --write`")
    return rec, registry, fit


def _record_outcomes(rec: dict, registry, key: str) -> list[Outcome]:
    out = []
    for c in registry.cases.values():
        v = rec["cases"].get(c.id, {}).get(key)
        out.append(Outcome(c, v, "") if isinstance(v, (int, float)) else Outcome(c, None, (v or {}).get("why", "")))
    return out
