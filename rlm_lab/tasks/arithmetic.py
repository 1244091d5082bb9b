"""Multi-digit arithmetic: ``"37+45="`` -> ``"82"``. Knobs: digits per operand, operators."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ..errors import RlmLabError
from .base import Task

_OPS = {"add": "+", "sub": "-", "mul": "*"}
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Arithmetic(Task):
    digits: int = 2
    ops: str = "add"  # one or more of add, sub, mul joined by '+', e.g. "add+sub"

    name = "arithmetic"

    def __post_init__(self):
        if not 1 <= self.digits <= 6:
            raise RlmLabError(f"arithmetic digits must be 1..6, got {self.digits}")
        bad = [o for o in self.ops.split("+") if o not in _OPS]
        if bad or not self.ops:
            raise RlmLabError(f"arithmetic ops {self.ops!r}: use add, sub, mul joined by '+'")

    def _row(self, a: int, op: str, b: int) -> dict:
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        return {"prompt": f"{a}{op}{b}=", "answer": str(value)}

    def max_prompt_len(self) -> int:
        return 2 * self.digits + 2  # "a", the operator, "b", "="

    def sample(self, rng: random.Random) -> dict:
        hi = 10**self.digits - 1
        op = _OPS[rng.choice(self.ops.split("+"))]
        return self._row(rng.randint(0, hi), op, rng.randint(0, hi))

    def all_problems(self):
        n = 10**self.digits
        if n * n * len(self.ops.split("+")) > 200_000:
            return None
        return [self._row(a, _OPS[o], b) for o in self.ops.split("+") for a in range(n) for b in range(n)]

    def is_well_formed(self, completion: str) -> bool:
        return isinstance(completion, str) and _INT.fullmatch(completion.strip()) is not None

    def is_correct(self, completion: str, row: dict) -> bool:
        return self.is_well_formed(completion) and completion.strip() == row["answer"]
