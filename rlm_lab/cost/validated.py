"""The predictor's validated error band: ``rlm-lab validate --published``'s result (data/published/validation.json)
in one line, for ``predict`` and ``advise`` alike (its own module so that neither imports the other)."""

from __future__ import annotations

import json
from pathlib import Path

VALIDATION_FILE = Path(__file__).resolve().parents[2] / "data" / "published" / "validation.json"


def validated_error(path: Path = VALIDATION_FILE, fitted: bool | None = None) -> str:
    """The predictor's error against published cluster measurements, from ``rlm-lab validate --published``'s result
    file (``data/published/validation.json``: its ``summary`` of the validation split, ``ratio`` and ``step``
    groups with ``median_abs_error``, ``priced``, ``direction_right``), or "not validated" when there is none."""
    try:
        doc = json.loads(Path(path).read_text())
        summary = doc["summary"]
        parts = []
        for group, what in (("ratio", "ratios (speed-ups, shares)"), ("step", "absolute step times")):
            g = summary.get(group) or {}
            if g.get("median_abs_error") is not None:
                ci = lambda key: (f" [{100 * g[key][0]:.0f}, {100 * g[key][1]:.0f} %]"
                                  if isinstance(g.get(key), list) and len(g[key]) == 2 else "")
                extra = (f", direction right in {g['direction_right']} of {g['priced']}{ci('direction_interval')}"
                         if group == "ratio" and "direction_right" in g else "")
                parts.append(f"{what} median |error| {100 * g['median_abs_error']:.0f} %{ci('median_abs_error_interval')} "
                             f"over {g.get('priced', '?')} cases{extra}")
        if parts:
            which = ("" if fitted is None else
                     "; this ranking uses those efficiencies (--fitted)" if fitted else
                     "; this ranking uses the profile's assumed efficiencies instead (--fitted applies the fitted ones)")
            return ("validated error of the predictor against published cluster measurements (validation split, "
                    f"{Path(path).name}, with the efficiencies fitted on its calibration cases; 95 % intervals over "
                    "the cases): " + "; ".join(parts) + which)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return ("validated error of the predictor at cluster scale: not validated (no result of `rlm-lab validate "
            "--published` in data/published/validation.json): read the ranking as a relative guide")


def validated_ratio_error(path: Path = VALIDATION_FILE) -> float | None:
    """The validation split's ratio median |error| (speed-ups and shares) of the record, as a fraction (None when the
    record has none): the band within which two configurations' predicted steps cannot be told apart."""
    try:
        v = json.loads(Path(path).read_text())["summary"]["ratio"]["median_abs_error"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
