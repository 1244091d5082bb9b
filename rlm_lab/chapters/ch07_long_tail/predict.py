"""Predicted seconds for chapter 7's measurements, made before each run from the lengths it will use: the
decode-step counts of :mod:`rlm_lab.cost.longtail` turned into seconds by the cost model's roofline
(:func:`rlm_lab.cost.generate_time`, :func:`rlm_lab.cost.forward_time`, :func:`rlm_lab.cost.backward_time`)
on the hardware profile chapter 3 uses (``rlm_lab.cost.hardware.profile_for``). The zoo models run in
fp32. What it ignores: two threads sharing the cores (fusion), Python time between calls, other users of
the machine."""

from __future__ import annotations

from ...cost import backward_time, forward_time, generate_time, load_profile, model_spec
from ...cost import longtail as cost
from ...cost.hardware import profile_for

DTYPE, DTYPE_BYTES = "fp32", 4


class Predictor:
    def __init__(self, size: str, model: str, profile=None):
        """``profile``: a profile name or path (``rlm-lab reference`` passes its window's); default the size's."""
        self.profile_name = profile if profile is not None else profile_for(size)
        self.profile, self.spec = load_profile(self.profile_name), model_spec(model)

    def gen(self, prompt_len: int, lengths, batch: int | None = None) -> float:
        """One static ``generate`` call producing ``lengths`` (rows padded to ``prompt_len``)."""
        return generate_time(self.spec, self.profile, prompt_len, list(lengths), batch, dtype=DTYPE,
                             dtype_bytes=DTYPE_BYTES)

    def train(self, batch: int, seq: int) -> float:
        """One training forward + backward over ``batch`` rows of ``seq`` tokens."""
        kw = dict(dtype=DTYPE, dtype_bytes=DTYPE_BYTES)
        return forward_time(self.spec, self.profile, batch, seq, grad=True, **kw) + \
            backward_time(self.spec, self.profile, batch, seq, **kw)

    def overprovision(self, prompt_len: int, lengths, n: int, n_prime: int) -> dict:
        """Step seconds: a batch of n that runs to E[X_(n:n)] against n' rows stopped at E[X_(n:n')]."""
        op = cost.overprovision(lengths, n, n_prime)
        full = self.gen(prompt_len, [max(1, round(op["t_full"]))] * n)
        early = self.gen(prompt_len, [max(1, round(op["t_early"]))] * n_prime)
        return {**op, "speedup_steps": op["speedup"], "full_s": full, "early_s": early, "speedup": full / early}

    def rounds(self, prompt_len: int, rounds) -> float:
        return sum(self.gen(prompt_len, r) for r in rounds if r)

    def dispatch(self, prompt_len: int, shares) -> float:
        """Makespan of workers decoding their share one sequence at a time."""
        return max(sum(self.gen(prompt_len, [x]) for x in share) for share in shares)

    def packing(self, chunks, bins) -> dict:
        """Seconds of forward + backward: padded chunks, the same chunks packed, token-budget bins packed."""
        return {"padded_s": sum(self.train(len(c), max(c)) for c in chunks),
                "packed_s": sum(self.train(1, sum(c)) for c in chunks),
                "token_budget_s": sum(self.train(1, sum(b)) for b in bins)}

    def fusion(self, prompt_len: int, lengths) -> dict:
        """Row i finishes when a static batch of n has run R_i steps; each score is one reference forward
        of the whole row; one scorer: :func:`rlm_lab.cost.longtail.fusion_time`."""
        n = len(lengths)
        finish = [self.gen(prompt_len, [r], batch=n) for r in lengths]
        s = forward_time(self.spec, self.profile, 1, prompt_len + round(sum(lengths) / n), dtype=DTYPE,
                         dtype_bytes=DTYPE_BYTES)
        out = cost.fusion_time(finish, s)
        return {**out, "score_s": s}
