"""Chapter 10, "Open directions": parallel reasoning (a fork-join policy trained with Parallelism-Aware GRPO's
reward against a sequential one) and multi-domain RLVR (mixed against separate-then-merged), each predicted
from the cost model, then measured.

:mod:`.cases` (what each size runs) -> :mod:`.run` (the records ``ch10_*``, the prediction first) ->
:mod:`.compare` (predicted against measured, intervals and verdict words) -> :mod:`.report` (the notebook's
tables, texts, plots and glued numbers); :mod:`.cli`: ``rlm-lab open-directions``.

Sources: ThreadWeaver (Lian et al., arXiv 2512.07843), Parason (Zhang et al., code release
https://github.com/ZhengyangZhang06/Parason-release; paper arXiv 2608.24658), "To Mix or To Merge" (Wang et al.,
arXiv 2602.12566).
"""

from .cases import ARMS, PARTS, params
from .report import ensure_runs, names, shown_size, status

__all__ = ["ARMS", "PARTS", "ensure_runs", "names", "params", "shown_size", "status"]
