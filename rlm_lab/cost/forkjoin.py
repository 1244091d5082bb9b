"""Work, depth and latency of one reasoning trace, sequential or fork-join, predicted from its token counts.

A sequential trace of R tokens is a chain: W = D = R decode steps. A fork-join trace is a DAG (the outline,
then K independent branches, then the join; :mod:`rlm_lab.forkjoin`):

    outline -> branch_1 .. branch_K -> join,   W = O + sum_i B_i + J,   D = O + max_i B_i + J

(tokens; Parason's and ThreadWeaver's "total tokens" and "tokens in the longest thread"). Brent's bounds on p
processors hold for it as for any DAG (:meth:`rlm_lab.cost.workdepth.WorkDepth.brent`): with one decoder row per
branch (p >= K) the greedy schedule runs every stage's rows in lock step, so the decode steps are exactly D, the
lower bound. In seconds, each stage is one ``generate`` call: its prefill, its fixed cost and max-length decode
steps at its batch (:func:`rlm_lab.cost.generate_time`, the roofline of chapter 3), so the parallel trace pays
three calls' fixed costs against one. :func:`latency` sums them.

:func:`batch_bubble`: the idle share of a static batch whose lengths are drawn from a distribution, predicted as
1 - E[X] / E[max of n draws] (the ratio of expectations; chapter 7's bubble, exact order statistics from
:func:`rlm_lab.cost.longtail.expected_order_statistic`): a mixture of short and long tasks in one batch idles
more slots than each task alone.

Formulas only, no torch.
"""

from __future__ import annotations

from ..errors import RlmLabError
from .longtail import expected_order_statistic, pmf
from .timing import generate_time
from .workdepth import WorkDepth


def _tokens(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RlmLabError(f"{what} must be an integer >= 1 (tokens), got {value!r}")
    return value


def sequential_dag(length: int) -> WorkDepth:
    """One chain of ``length`` decode steps."""
    n = _tokens(length, "a sequential trace's length")
    return WorkDepth({"trace": float(n)}, {"trace": float(n)}, ())


def fork_join_dag(outline: int, bodies, join: int) -> WorkDepth:
    """The outline, ``len(bodies)`` branches of ``bodies[i]`` tokens, then the join (each node a chain)."""
    o, j = _tokens(outline, "the outline"), _tokens(join, "the join")
    bodies = [_tokens(b, "a branch") for b in bodies]
    if not bodies:
        raise RlmLabError("a fork-join trace needs at least one branch")
    nodes = {"outline": o, **{f"branch_{i}": b for i, b in enumerate(bodies, 1)}, "join": j}
    edges = tuple([("outline", f"branch_{i}") for i in range(1, len(bodies) + 1)]
                  + [(f"branch_{i}", "join") for i in range(1, len(bodies) + 1)])
    return WorkDepth({k: float(v) for k, v in nodes.items()}, {k: float(v) for k, v in nodes.items()}, edges)


def latency(spec, profile, prompt_len: int, outline: int, bodies, join: int, header: int = 2,
            dtype: str = "fp32", dtype_bytes: int = 4) -> dict:
    """Predicted seconds of one fork-join trace decoded alone: the outline call (one row), the branch call
    (one row per branch, prompt + outline + header), the join call (one row, prompt + the whole trace)."""
    bodies = list(bodies)
    fork_join_dag(outline, bodies, join)  # checks the counts
    kw = dict(dtype=dtype, dtype_bytes=dtype_bytes)
    t_o = generate_time(spec, profile, prompt_len, [outline], **kw)
    t_b = generate_time(spec, profile, prompt_len + outline + header, bodies, **kw)
    context = prompt_len + outline + sum(header + b for b in bodies)
    t_j = generate_time(spec, profile, context, [join], **kw)
    return {"outline_s": t_o, "branches_s": t_b, "join_s": t_j, "total_s": t_o + t_b + t_j}


def sequential_latency(spec, profile, prompt_len: int, length: int, dtype: str = "fp32", dtype_bytes: int = 4) -> float:
    """Predicted seconds of one sequential trace decoded alone (one ``generate`` call)."""
    return generate_time(spec, profile, prompt_len, [_tokens(length, "a sequential trace's length")], dtype=dtype,
                         dtype_bytes=dtype_bytes)


def batch_bubble(lengths, n: int) -> float:
    """Expected idle share of a static batch of ``n`` responses drawn from the empirical distribution of
    ``lengths``: 1 - E[X] / E[X_(n:n)]."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RlmLabError(f"a batch needs n >= 1 responses, got {n!r}")
    dist = pmf(lengths)
    mean = sum(x * p for x, p in dist.items())
    return 1.0 - mean / expected_order_statistic(dist, n, n)
