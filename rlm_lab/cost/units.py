"""How the cost model's reports write numbers: SI and binary prefixes, parameter counts, seconds.

Shared by every report (``cli``, ``placement_config``, ``advise``), kept apart so that none of them imports
another report's module for its formatting (an import loop).
"""

from __future__ import annotations


def _si(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _bytes(x: float) -> str:
    """Bytes in binary units (KiB, MiB, GiB, ...), the units of the memory check's message too."""
    for power, prefix in ((5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        if abs(x) >= 1024**power:
            return f"{x / 1024**power:.3g} {prefix}B"
    return f"{x:.3g} B"


def _count(n: float) -> str:
    """A parameter count: 341,632 -> '342k', 1.54e9 -> '1.54B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.0f}"


def _seconds(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"
