"""Countdown: reach a target from given numbers with + - * and parentheses, each number once.

``"3,5,7;22="`` -> ``"3*5+7"``. Knobs: how many numbers, and their largest value.
The verifier parses the expression with a small recursive-descent parser (never ``eval``):
it must be well formed, use exactly the given numbers, and evaluate to the target.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from ..errors import RlmLabError
from .base import Task

_TOKEN = re.compile(r"\d+|[+\-*()]")
_MAX_LEN = 64  # longer completions are not answers; stops pathological inputs early


def _tokens(expr: str) -> list[str] | None:
    expr = expr.replace(" ", "")
    if not expr or len(expr) > _MAX_LEN:
        return None
    toks = _TOKEN.findall(expr)
    return toks if "".join(toks) == expr else None


def evaluate(expr: str) -> tuple[int, list[int]] | None:
    """Value and the numbers used, or None when ``expr`` is not a valid expression."""
    toks = _tokens(expr) if isinstance(expr, str) else None
    if toks is None:
        return None
    pos, used = 0, []

    def atom():
        nonlocal pos
        if pos >= len(toks):
            raise ValueError
        t = toks[pos]
        pos += 1
        if t == "(":
            v = add()
            if pos >= len(toks) or toks[pos] != ")":
                raise ValueError
            pos += 1
            return v
        if t.isdigit():
            if len(t) > 1 and t[0] == "0":
                raise ValueError
            used.append(int(t))
            return int(t)
        raise ValueError

    def mul():
        nonlocal pos
        v = atom()
        while pos < len(toks) and toks[pos] == "*":
            pos += 1
            v *= atom()
        return v

    def add():
        nonlocal pos
        v = mul()
        while pos < len(toks) and toks[pos] in "+-":
            op = toks[pos]
            pos += 1
            v = v + mul() if op == "+" else v - mul()
        return v

    try:
        value = add()
    except (ValueError, RecursionError):
        return None
    if pos != len(toks):
        return None
    return value, used


@dataclass(frozen=True)
class Countdown(Task):
    numbers: int = 3
    max_number: int = 9

    name = "countdown"

    def __post_init__(self):
        if not 2 <= self.numbers <= 5:
            raise RlmLabError(f"countdown numbers must be 2..5, got {self.numbers}")
        if not 2 <= self.max_number <= 99:
            raise RlmLabError(f"countdown max_number must be 2..99, got {self.max_number}")

    def max_prompt_len(self) -> int:
        # "n1,...,nk;" then the target (at most max_number**numbers in size, maybe negative) and "="
        return self.numbers * (len(str(self.max_number)) + 1) + len(str(self.max_number**self.numbers)) + 2

    def sample(self, rng: random.Random) -> dict:
        nums = [rng.randint(1, self.max_number) for _ in range(self.numbers)]
        order = nums[:]
        rng.shuffle(order)
        expr = str(order[0])
        for x in order[1:]:
            op = rng.choice("+-*")
            # parenthesise the left side sometimes so that targets need brackets too
            left = f"({expr})" if op == "*" and ("+" in expr or "-" in expr) and rng.random() < 0.5 else expr
            expr = f"{left}{op}{x}"
        value, _ = evaluate(expr)
        return {
            "prompt": f"{','.join(map(str, nums))};{value}=",
            "answer": expr,
            "numbers": ",".join(map(str, nums)),
            "target": str(value),
        }

    def is_well_formed(self, completion: str) -> bool:
        return isinstance(completion, str) and evaluate(completion) is not None

    def is_correct(self, completion: str, row: dict) -> bool:
        result = evaluate(completion) if isinstance(completion, str) else None
        if result is None:
            return False
        value, used = result
        try:
            given = [int(x) for x in row["numbers"].split(",")]
            target = int(row["target"])
        except (KeyError, ValueError, AttributeError):
            return False
        return value == target and Counter(used) == Counter(given)
