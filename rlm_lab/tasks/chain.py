"""Chained arithmetic with a worked solution: a task whose answer length is *generated* and problem-dependent.

``"3+4*2-5="`` -> ``"3+4=7,7*2=14,14-5=9"``: the operations are applied left to right, one worked step
per operation, so the reference answer grows with the number of operations (about 6-9 characters a step).
The number of operations per problem is drawn from a truncated geometric distribution on 1..``steps``
(P(s) proportional to 2^-(s-1)): most problems are short and a few are long, the long tail that chapter 7
studies (the survey's "the longest response sets the pace", arXiv 2608.27046). Knobs: ``steps`` (the most
operations), ``max_number`` (the largest operand).

The verifier is a regular expression plus integer arithmetic (never ``eval``): a completion is *well
formed* when it is a chain ``a op b = c`` joined by commas whose every step starts from the previous
step's result; it is *correct* when it is well formed, its steps use the prompt's operands in order and
its last result is the problem's value. Every character is in the zoo tokenizer's alphabet
(``rlm_lab.models.tokenizer.ALPHABET``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ..errors import RlmLabError
from .base import Task

_STEP = re.compile(r"(-?\d+)([+\-*])(\d+)=(-?\d+)")
_PROMPT = re.compile(r"\d+|[+\-*]")
_MAX_LEN = 400  # longer completions are not answers; stops pathological inputs early
_CAP = 999  # a product that would leave [-999, 999] becomes a sum, so numbers stay short


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def parse_prompt(prompt: str) -> tuple[int, list[tuple[str, int]]] | None:
    """``"3+4*2="`` -> ``(3, [("+", 4), ("*", 2)])``; None when it is not a chain prompt."""
    if not isinstance(prompt, str) or not prompt.endswith("="):
        return None
    toks = _PROMPT.findall(prompt[:-1])
    if "".join(toks) != prompt[:-1] or len(toks) < 3 or len(toks) % 2 == 0:
        return None
    try:
        first = int(toks[0])
        ops = [(toks[i], int(toks[i + 1])) for i in range(1, len(toks), 2)]
    except ValueError:
        return None
    return first, ops


def worked_chain(first: int, ops: list[tuple[str, int]]) -> str:
    """The reference answer: one ``a op b = c`` step per operation, joined by commas."""
    steps, value = [], first
    for op, b in ops:
        nxt = _apply(value, op, b)
        steps.append(f"{value}{op}{b}={nxt}")
        value = nxt
    return ",".join(steps)


def parse_chain(completion: str) -> list[tuple[int, str, int, int]] | None:
    """The steps of a well-formed chain, or None. Never raises."""
    if not isinstance(completion, str):
        return None
    text = completion.strip()
    if not text or len(text) > _MAX_LEN:
        return None
    steps = []
    for part in text.split(","):
        m = _STEP.fullmatch(part)
        if m is None:
            return None
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        if _apply(a, op, b) != c or (steps and steps[-1][3] != a):
            return None
        steps.append((a, op, b, c))
    return steps


@dataclass(frozen=True)
class Chain(Task):
    steps: int = 8
    max_number: int = 9

    name = "chain"

    def __post_init__(self):
        if not 1 <= self.steps <= 16:
            raise RlmLabError(f"chain steps must be 1..16, got {self.steps}")
        if not 2 <= self.max_number <= 99:
            raise RlmLabError(f"chain max_number must be 2..99, got {self.max_number}")

    def max_prompt_len(self) -> int:
        return (self.steps + 1) * len(str(self.max_number)) + self.steps + 1

    def n_steps(self, rng: random.Random) -> int:
        """1..steps with P(s) proportional to 2^-(s-1) (a truncated geometric: the long tail)."""
        weights = [2.0 ** -(s - 1) for s in range(1, self.steps + 1)]
        return rng.choices(range(1, self.steps + 1), weights)[0]

    def sample(self, rng: random.Random) -> dict:
        s = self.n_steps(rng)
        value = first = rng.randint(1, self.max_number)
        ops = []
        for _ in range(s):
            op, b = rng.choice("+-*"), rng.randint(1, self.max_number)
            if op == "*" and abs(value * b) > _CAP:
                op = "+"
            ops.append((op, b))
            value = _apply(value, op, b)
        prompt = str(first) + "".join(f"{op}{b}" for op, b in ops) + "="
        return {"prompt": prompt, "answer": worked_chain(first, ops)}

    def is_well_formed(self, completion: str) -> bool:
        return parse_chain(completion) is not None

    def is_correct(self, completion: str, row: dict) -> bool:
        steps = parse_chain(completion)
        problem = _problem(row)
        if steps is None or problem is None:
            return False
        first, ops = problem
        return (len(steps) == len(ops) and steps[0][0] == first
                and all((op, b) == (s[1], s[2]) for (op, b), s in zip(ops, steps)))


def _problem(row) -> tuple[int, list[tuple[str, int]]] | None:
    """The problem from the reference ``answer`` (the column TRL passes to reward functions: it keeps
    ``prompt`` for itself and passes ``prompts``), else from ``prompt``/``prompts``. Never raises."""
    if not isinstance(row, dict):
        return None
    ref = parse_chain(row.get("answer"))
    if ref:
        return ref[0][0], [(op, b) for _, op, b, _ in ref]
    for key in ("prompt", "prompts"):
        problem = parse_prompt(row.get(key))
        if problem is not None:
            return problem
    return None


def answer_length(row: dict) -> int:
    """Tokens of the reference answer (one per character) plus the EOS: the length a model that has
    learnt the task generates for this problem."""
    return len(row["answer"]) + 1


def predicted_length(prompt: str) -> int:
    """A length predictor read off the prompt alone (RollPacker and StreamRL predict lengths; here the
    number of operations fixes the chain, so the prediction is exact for a model that has learnt the task):
    the worked chain of the prompt, plus the EOS. An unparsable prompt raises a clear error."""
    problem = parse_prompt(prompt)
    if problem is None:
        raise RlmLabError(f"chain prompt {prompt!r} is not of the form 3+4*2=")
    return len(worked_chain(*problem)) + 1
