"""Plain fixed-width text tables (no pandas needed): what the notebooks print and the reports embed in text.

    print_table([{"run": "grpo", "s_per_step": 0.41}], ["run", "s_per_step"])
"""

from __future__ import annotations


def _num(x: float) -> str:
    """Three decimals, or three significant digits for magnitudes below 0.001 (seconds per op, per byte)."""
    return f"{x:.3g}" if x and abs(x) < 1e-3 else f"{x:.3f}"


def format_table(rows: list[dict], keys=None) -> str:
    """A plain fixed-width table (no pandas needed), as text."""
    if not rows:
        return "(no runs)"
    keys = keys or list(rows[0])
    cells = [[("-" if row.get(k) is None else _num(row[k]) if isinstance(row.get(k), float) else str(row[k]))
              for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    return "\n".join(lines)


def print_table(rows: list[dict], keys=None) -> None:
    """A plain fixed-width table (no pandas needed)."""
    print(format_table(rows, keys))


def text(value, fmt: str = "") -> str:
    """The text a glued value shows in a page: ``format(value, fmt)``, or ``str(value)`` without a format
    (:func:`rlm_lab.book.glue_text` glues exactly this)."""
    return format(value, fmt) if fmt else str(value)


def entry_text(entry, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    """The text a page glues for a results-ledger entry (``rlm_lab.ledger.Entry``: its value, and its interval when
    it has one, each times ``scale``, e.g. 100 for points): "0.92 [0.82, 1.02]", or "0.92 (n = 2, no interval)"; a
    prediction, an exact count or a suite's worst case is its value alone.
    ``tests/test_ledger_glue.py`` reads the numbers back from this text against the entry."""
    if entry is None or entry.value is None:
        return "n/a"
    v = fmt.format(scale * entry.value)
    if getattr(entry, "estimator", "") in ("prediction", "exact count") or (
            getattr(entry, "estimator", "") == "over cases" and entry.lo is None):
        return v   # a formula's number, a count, the worst of a suite's cases: no interval by nature
    if entry.lo is None or entry.hi is None:
        return f"{v} ({'one run' if entry.n <= 1 else f'n = {entry.n}'}, no interval)"
    return f"{v} [{fmt.format(scale * entry.lo)}, {fmt.format(scale * entry.hi)}]"


def ledger_glue(entries, glue: dict) -> dict:
    """``{glue name: text}`` for a module's ``LEDGER_GLUE`` (glue name -> (ledger id, format, scale)), read from the
    results-ledger ``entries`` (``rlm_lab.ledger.build``); an id the ledger lacks glues "n/a"."""
    d = {e.id: e for e in entries or ()}
    return {name: entry_text(d.get(i), fmt, scale) for name, (i, fmt, scale) in glue.items()}
