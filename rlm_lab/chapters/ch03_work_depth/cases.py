"""Chapter 3's cases: sizes, length distributions (same mean, growing tails), the bubble of a static batch,
and how a batch is split over generation replicas."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from ...cost import tail_bubble
from ...errors import RlmLabError
from ...sizes import get

PROMPT_LEN = 8
EOS = 1

def params(size: str) -> dict:
    """The sweep of this size (models, batches, tail, replicas): ``rlm_lab.sizes``, the one registry."""
    return dict(get(size).work_depth)


# ---- length distributions ------------------------------------------------------------------------

@dataclass(frozen=True)
class Lengths:
    """n response lengths with a given mean: fixed, uniform on [1, 2 mean - 1], or lognormal with
    spread ``sigma`` (clipped at ``cap``), at the quantiles (i + 0.5) / n, then shuffled (seeded)."""

    kind: str
    n: int
    mean: int
    sigma: float = 0.0
    cap: int = 0

    def values(self, seed: int = 0) -> list[int]:
        q = [(i + 0.5) / self.n for i in range(self.n)]
        if self.kind == "fixed":
            out = [self.mean] * self.n
        elif self.kind == "uniform":
            out = [max(1, round(1 + p * (2 * self.mean - 2))) for p in q]
        elif self.kind == "lognormal":
            z = statistics.NormalDist()
            mu = math.log(self.mean) - self.sigma ** 2 / 2  # so that E[R] = mean before clipping
            cap = self.cap or 8 * self.mean
            out = [min(cap, max(1, round(math.exp(mu + self.sigma * z.inv_cdf(p))))) for p in q]
        else:
            raise RlmLabError(f"length kind must be fixed, uniform or lognormal, got {self.kind!r}")
        random.Random(seed).shuffle(out)
        return out

    @property
    def label(self) -> str:
        return {"fixed": "fixed", "uniform": "uniform"}.get(self.kind, f"lognormal σ={self.sigma:g}")


def distributions(size: str, p: dict | None = None) -> list[Lengths]:
    """The four distributions of a size, or of the sweep ``p`` (a size's params with overrides)."""
    p = p or params(size)
    n, mean = p["n"], p["mean"]
    return [Lengths("fixed", n, mean), Lengths("uniform", n, mean), Lengths("lognormal", n, mean, 0.5),
            Lengths("lognormal", n, mean, 1.0)]


def bubble(lengths) -> float:
    """1 - sum R_i / (n R_max) (the cost model's ``tail_bubble``)."""
    return tail_bubble(lengths)


def assign(lengths, p: int, how: str = "round_robin") -> list[list[int]]:
    """Split sequences over p replicas: ``round_robin`` (arrival order, as a data-parallel sampler) or
    ``by_length`` (sorted, contiguous chunks: long sequences share a replica)."""
    if p < 1:
        raise RlmLabError(f"replicas must be >= 1, got {p}")
    if how == "round_robin":
        return [list(lengths[r::p]) for r in range(p)]
    if how == "by_length":
        s = sorted(lengths, reverse=True)
        k = math.ceil(len(s) / p)
        return [s[i * k:(i + 1) * k] for i in range(p)]
    raise RlmLabError(f"assignment must be round_robin or by_length, got {how!r}")
