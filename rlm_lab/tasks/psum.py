"""A sum of products, solved sequentially or with parallel branches and a join: chapter 10's task.

``"3*4+5*6+7*2="`` splits into independent sub-problems, one per product. Two reference traces solve it:

* **sequential** (``trace="seq"``): one chain, ``3*4=12,5*6=30,7*2=14,12+30+14=56``;
* **parallel** (``trace="par"``): an outline that forks one branch per product, the branches, and a join:
  ``<abc>a:3*4=12;b:5*6=30;c:7*2=14;12+30+14=56``. The outline ``<abc>`` names the branches (letters in
  order); branch ``x`` is opened by its header ``x:`` and ends at ``;``; the join sums the branches' results.

The parallel format follows the fork-join traces of ThreadWeaver (arXiv 2512.07843: ``<Parallel>``,
``<Outlines>``, ``<Thread>``) and Parason (the same tags, its code release
https://github.com/ZhengyangZhang06/Parason-release), shrunk to one character per tag so the zoo's character
tokenizer keeps one token per character. A decoder that runs the branches *concurrently* gives each branch
the context ``prompt + outline + header`` only (its siblings are not visible to it), then decodes the join
after all branches with the whole trace as context (:mod:`rlm_lab.forkjoin`).

Work and depth of a trace, in tokens (one per character, plus the EOS that ends it), counting what the model
decodes: a sequential trace has W = D = its length + 1. A parallel trace decodes the outline, every branch
body and the join: W = |outline| + sum_i |body_i| + |join| + 1, and its critical path is
D = |outline| + max_i |body_i| + |join| + 1 (the branch headers ``x:`` are inserted by the decoder, not
decoded: :attr:`Trace.inserted`). This is Parason's and ThreadWeaver's "number of tokens in the longest
thread" (their ``num_tokens_in_the_longest_thread``) against "total number of tokens".

Knobs: ``terms`` (the most products; each problem has 2..terms, uniform), ``max_number`` (the largest
factor), ``trace`` (which reference trace the ``answer`` column holds). The problems do not depend on
``trace``: a ``seq`` and a ``par`` split of the same knobs hold the same prompts. Every character is in the
zoo tokenizer's alphabet. The verifier is regular expressions and integer arithmetic (never ``eval``):
:func:`parse_trace` reads the *structure* (a trace with a wrong product is still a trace, and wrong), never
raises, and :func:`trace_error` says in one line why a string is not a trace; :meth:`Psum.is_correct` checks
every product, that the join adds the branches' results, and the total. A string that is no trace cannot be
scored (:meth:`Psum.is_scorable`): its reward is None in TRL's contract.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, fields

from ..errors import RlmLabError
from .base import Task

TRACES = ("seq", "par")
LABELS = "abcdefgh"
_PRODUCT = re.compile(r"(\d+)\*(\d+)=(\d+)")
_SUM = re.compile(r"(\d+(?:\+\d+)*)=(\d+)")
_PROMPT = re.compile(r"(\d+\*\d+(?:\+\d+\*\d+)*)=")
_MAX_LEN = 400  # longer completions are not answers; stops pathological inputs early


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its kind, the products ``(a, b, c)`` as written, the join's terms and total,
    the outline's labels (parallel only) and its work, depth and inserted header tokens."""

    kind: str
    products: tuple
    terms: tuple
    total: int
    labels: str = ""
    outline: str = ""
    bodies: tuple = ()
    join: str = ""

    @property
    def work(self) -> int:
        if self.kind == "seq":
            return len(self.join) + 1
        return len(self.outline) + sum(len(b) for b in self.bodies) + len(self.join) + 1

    @property
    def depth(self) -> int:
        if self.kind == "seq":
            return self.work
        return len(self.outline) + max((len(b) for b in self.bodies), default=0) + len(self.join) + 1

    @property
    def inserted(self) -> int:
        """Tokens the decoder writes itself (the branch headers ``x:``), prefilled, never decoded."""
        return 2 * len(self.bodies)

    @property
    def acceleration(self) -> float:
        """Parason's and ThreadWeaver's acceleration ratio 1 - D / W (0 for a sequential trace)."""
        return 1.0 - self.depth / self.work


def parse_prompt(prompt: str) -> list[tuple[int, int]] | None:
    """``"3*4+5*6="`` -> ``[(3, 4), (5, 6)]``; None when it is not a sum-of-products prompt."""
    if not isinstance(prompt, str):
        return None
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        return None
    return [tuple(int(x) for x in p.split("*")) for p in m[1].split("+")]


def _products(parts) -> list[tuple[int, int, int]] | None:
    out = []
    for part in parts:
        m = _PRODUCT.fullmatch(part)
        if m is None:
            return None
        out.append((int(m[1]), int(m[2]), int(m[3])))
    return out


def _why(text) -> tuple[Trace | None, str | None]:
    """(trace, None) or (None, the one-line reason)."""
    if not isinstance(text, str):
        return None, f"a trace is text, got {type(text).__name__}"
    text = text.strip()
    if not text:
        return None, "empty trace"
    if len(text) > _MAX_LEN:
        return None, f"trace longer than {_MAX_LEN} characters"
    if text.startswith("<"):
        return _why_parallel(text)
    parts = text.split(",")
    prods = _products(parts[:-1])
    if prods is None or not prods:
        return None, "sequential trace: every step before the last must be a product a*b=c"
    m = _SUM.fullmatch(parts[-1])
    if m is None:
        return None, "sequential trace: the last step must be a sum c1+c2+...=s"
    terms = tuple(int(x) for x in m[1].split("+"))
    return Trace("seq", tuple(prods), terms, int(m[2]), join=text), None


def _why_parallel(text: str) -> tuple[Trace | None, str | None]:
    close = text.find(">")
    if close < 0:
        return None, "parallel trace: the outline <...> is not closed"
    labels = text[1:close]
    if not labels or labels != LABELS[:len(labels)]:
        return None, f"parallel trace: outline labels must be {LABELS[:3]}... in order, got {labels!r}"
    rest, bodies, prods = text[close + 1:], [], []
    for label in labels:
        head = label + ":"
        end = rest.find(";")
        if not rest.startswith(head) or end < 0:
            return None, f"parallel trace: branch {label} must be '{head}a*b=c;'"
        body = rest[len(head):end + 1]
        p = _products([body[:-1]])
        if p is None:
            return None, f"parallel trace: branch {label} is not a product a*b=c"
        bodies.append(body)
        prods += p
        rest = rest[end + 1:]
    m = _SUM.fullmatch(rest)
    if m is None:
        return None, "parallel trace: the join must be a sum c1+c2+...=s"
    terms = tuple(int(x) for x in m[1].split("+"))
    return Trace("par", tuple(prods), terms, int(m[2]), labels, text[:close + 1], tuple(bodies), rest), None


def parse_trace(text) -> Trace | None:
    """The trace in ``text`` (sequential or parallel), or None. Never raises."""
    return _why(text)[0]


def trace_error(text) -> str | None:
    """Why ``text`` is not a trace, in one line (None when it is one). Never raises."""
    return _why(text)[1]


def sequential_trace(pairs) -> str:
    vals = [a * b for a, b in pairs]
    return ",".join(f"{a}*{b}={a * b}" for a, b in pairs) + "," + "+".join(map(str, vals)) + f"={sum(vals)}"


def parallel_trace(pairs) -> str:
    if len(pairs) > len(LABELS):
        raise RlmLabError(f"a parallel trace has at most {len(LABELS)} branches, got {len(pairs)}")
    vals = [a * b for a, b in pairs]
    labels = LABELS[:len(pairs)]
    branches = "".join(f"{x}:{a}*{b}={a * b};" for x, (a, b) in zip(labels, pairs))
    return f"<{labels}>" + branches + "+".join(map(str, vals)) + f"={sum(vals)}"


@dataclass(frozen=True)
class Psum(Task):
    terms: int = 3
    max_number: int = 9
    trace: str = "seq"

    name = "psum"

    def __post_init__(self):
        if not 2 <= self.terms <= len(LABELS):
            raise RlmLabError(f"psum terms must be 2..{len(LABELS)}, got {self.terms}")
        if not 2 <= self.max_number <= 9:
            raise RlmLabError(f"psum max_number must be 2..9, got {self.max_number}")
        if self.trace not in TRACES:
            raise RlmLabError(f"psum trace must be seq or par, got {self.trace!r}")

    @property
    def problem_key(self) -> str:
        """The problems do not depend on the trace style: seq and par splits hold the same prompts."""
        knobs = "_".join(f"{f.name}{getattr(self, f.name)}" for f in fields(self) if f.name != "trace")
        return f"{self.name}_{knobs}"

    def max_prompt_len(self) -> int:
        return 4 * self.terms  # "a*b+" per product, the last "+" being the "="

    def sample(self, rng: random.Random) -> dict:
        k = rng.randint(2, self.terms)
        pairs = [(rng.randint(1, self.max_number), rng.randint(1, self.max_number)) for _ in range(k)]
        prompt = "+".join(f"{a}*{b}" for a, b in pairs) + "="
        answer = sequential_trace(pairs) if self.trace == "seq" else parallel_trace(pairs)
        return {"prompt": prompt, "answer": answer}

    def is_well_formed(self, completion: str) -> bool:
        return parse_trace(completion) is not None

    def is_scorable(self, completion: str) -> bool:
        """A completion that is no trace (malformed fork, branch or join) cannot be scored: its reward is
        None in TRL's contract, not 0."""
        return parse_trace(completion) is not None

    def acceleration_of(self, completion: str) -> float:
        """1 - D / W of the completion's trace (0.0 when it is no trace)."""
        t = parse_trace(completion)
        return t.acceleration if t is not None else 0.0

    def is_correct(self, completion: str, row: dict) -> bool:
        t = parse_trace(completion)
        pairs = problem(row)
        if t is None or pairs is None:
            return False
        return ([(a, b) for a, b, _ in t.products] == pairs and all(a * b == c for a, b, c in t.products)
                and list(t.terms) == [c for _, _, c in t.products] and t.total == sum(a * b for a, b in pairs))


def problem(row) -> list[tuple[int, int]] | None:
    """The products of a row: from the reference ``answer`` (TRL passes it to reward functions; it keeps
    ``prompt`` for itself), else from ``prompt``/``prompts``. Never raises."""
    if not isinstance(row, dict):
        return None
    ref = parse_trace(row.get("answer"))
    if ref is not None:
        return [(a, b) for a, b, _ in ref.products]
    for key in ("prompt", "prompts"):
        pairs = parse_prompt(row.get(key))
        if pairs is not None:
            return pairs
    return None
