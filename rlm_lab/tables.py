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
