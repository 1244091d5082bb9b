"""Everything chapter 9 takes from the other chapters and from the cost model, imported here and only here.

Nothing here computes: it names what the chapter reads (torch-free, all of it).
"""

from __future__ import annotations

from statistics import median

# the cost model
from ...cost import comm
from ...cost import longtail as cost_longtail
from ...cost.advise import advise
from ...cost.assumed import ASSUMED_TRL_STEP, OVERHEAD_GROUPS
from ...cost.asynchrony import advise_mode, simulate
from ...cost.engine import kv_capacity, vllm_defaults
from ...cost.hardware import load_profile
from ...cost.lora import Lora, lora_params
from ...cost.placement import predict_placement
from ...cost.placement_spec import Cluster, get_placement
from ...cost.spec import model_spec
from ...cost.workload import ResponseLengths, Workload, algorithm
from ...errors import RlmLabError
from ...validate import published, published_report

# chapter 4: the intra-model layouts' records, compared with the calibrated profile's predictions
from ..ch04_parallelism import report as ch04_report
from ..ch04_parallelism.compare import record_step_time as ch04_step_time
from ..ch04_parallelism.run import load_records as ch04_records

# chapter 5: the placement runs (newest completed run of a cell) and their predicted-against-measured rows
from ..ch05_placement.compare import comparison as ch05_comparison
from ..ch05_placement.run import latest as ch05_latest

# chapter 6: its pre-registered accuracy test (exact sign-flip, Holm), which decides the accuracy guidelines
from ..ch06_async import accuracy_test

# chapter 6: one run's final held-out accuracy and tokens per second, as chapter 6 defines them
from ..ch06_async.compare import final_accuracy, tokens_per_s

# chapter 7: one technique's predicted and measured gain with its interval (the chapter's own estimator)
from ..ch07_long_tail.report import GAIN as CH07_GAIN
from ..ch07_long_tail.report import gain_row as ch07_gain_row

# chapter 8: the 7B GRPO workload the book predicts at scale, its model config, a mode's step on a placement
from ..ch08_frameworks.report import MODEL_7B, mode_step, workload_7b

__all__ = ["ch04_report", "ch04_records", "ch04_step_time", "ch05_comparison", "ch05_latest", "final_accuracy", "tokens_per_s", "CH07_GAIN",
           "ch07_gain_row", "MODEL_7B", "mode_step", "workload_7b", "comm", "cost_longtail", "advise", "advise_mode",
           "simulate", "Lora", "lora_params", "predict_placement", "Cluster", "get_placement", "model_spec", "ResponseLengths",
           "Workload", "algorithm", "validation_band"]


def validation_band() -> tuple[dict | None, str]:
    """The predictor's validated error on published cluster measurements (issue 21's ``rlm-lab validate
    --published``): ``({"step_time": median |error|, "ratio": median |error|, "cases": n, "source": ...}, "")``
    from the committed prediction record ``data/published/validation.json`` (checked against the registry and
    its fit; a test keeps it equal to a fresh prediction), or ``(None, why)`` when it is missing or stale
    (then the book says "not validated yet")."""
    try:
        outcomes = published_report.record_outcomes()
    except (AttributeError, RlmLabError) as e:
        return None, f"not validated yet: the published validation could not be computed ({e})"
    return _band(outcomes, published.STEP_QUANTITIES, published.RATIO_QUANTITIES)


def _band(outcomes, step_quantities, ratio_quantities) -> tuple[dict | None, str]:
    """Median |predicted / published - 1| over the validation cases, apart for absolute step times and ratios."""
    errs: dict[str, list[float]] = {"step_time": [], "ratio": []}
    for o in outcomes:
        case = o.case
        if getattr(case, "split", None) != "validation" or o.predicted is None:
            continue
        key = "step_time" if case.quantity in step_quantities else "ratio" if case.quantity in ratio_quantities else None
        if key:
            errs[key].append(abs(o.predicted / case.published.value - 1))
    if not any(errs.values()):
        return None, "not validated yet: no validation case of the published registry could be predicted"
    return ({k: (median(v) if v else None) for k, v in errs.items()}
            | {"cases": sum(map(len, errs.values())), "source": "data/published (validation split)"}, "")
