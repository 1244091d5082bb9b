"""The trie layout of a fork-join trace: one token row that holds every request a concurrent decoder made.

A fork-join trace is decoded as separate requests (:mod:`rlm_lab.forkjoin.generate`): the outline from the
prompt; branch i from ``prompt + outline + header_i`` (its siblings are not in its context); the join from
``prompt + outline + branch_1 ... branch_K`` as one plain sequence. Training must see each token in the
context it was sampled in, or the loss scores tokens the policy never produced that way. ThreadWeaver
(arXiv 2512.07843) calls this its trie-based training-inference co-design; here the trie of the requests is
laid out in one row::

    prompt | outline | leaf_1 ... leaf_K | trunk_1 ... trunk_K | join EOS
             prefix    leaf_i = header_i + body_i   trunk = the same headers and bodies again, as the join saw them

with a visibility rule and positions that reproduce each request exactly: a prefix token sees the prefix
before it (causal); a leaf token sees the prefix and its own leaf; a trunk or join token sees the prefix and
the trunk and join before it. Positions restart after the prefix in every leaf and in the trunk. The
completion's loss covers what the model decoded (outline, bodies, join and EOS), never the headers the
decoder inserted nor the trunk's copies (:func:`loss_mask`, TRL's ``env_mask``).

Pure Python over token ids (no torch): :mod:`rlm_lab.forkjoin.trie` turns a :class:`Plan` into the 4-D
attention mask and position ids a transformers model accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RlmLabError

PREFIX = 0  # segment id of the prompt and the outline; leaves are 1..K, the trunk (and join) K+1


@dataclass(frozen=True)
class Tags:
    """Token ids of the trace's tags (one character each in the zoo tokenizer)."""

    open: int   # "<": the outline starts
    close: int  # ">": the outline ends
    colon: int  # ":": a branch header ends
    semi: int   # ";": a branch ends
    eos: int

    @classmethod
    def of(cls, tokenizer) -> "Tags":
        ids = {}
        for name, ch in (("open", "<"), ("close", ">"), ("colon", ":"), ("semi", ";")):
            got = tokenizer(ch, add_special_tokens=False)["input_ids"]
            if len(got) != 1:
                raise RlmLabError(f"the fork-join tags need one token per tag; {ch!r} is {len(got)} tokens here")
            ids[name] = got[0]
        return cls(eos=tokenizer.eos_token_id, **ids)


@dataclass(frozen=True)
class Segments:
    """The requests of one fork-join trace as token ids: the outline (``<ab>``), each branch's header
    (``a:``, inserted by the decoder) and body (``3*4=12;``, decoded), and the join (decoded, EOS last)."""

    outline: tuple
    headers: tuple
    bodies: tuple
    join: tuple

    def __post_init__(self):
        if len(self.headers) != len(self.bodies) or not self.headers:
            raise RlmLabError(f"a fork-join trace needs one header per branch and at least one branch "
                              f"({len(self.headers)} headers, {len(self.bodies)} bodies)")

    @property
    def work(self) -> int:
        """Tokens decoded: outline, every body, the join."""
        return len(self.outline) + sum(map(len, self.bodies)) + len(self.join)

    @property
    def depth(self) -> int:
        """Tokens on the critical path: outline, the longest body, the join."""
        return len(self.outline) + max(map(len, self.bodies)) + len(self.join)

    def trace(self) -> list[int]:
        """The trace as the join saw it: outline, then every header and body in order, then the join."""
        return [*self.outline, *self._branches(), *self.join]

    def _branches(self) -> list[int]:
        return [t for h, b in zip(self.headers, self.bodies) for t in (*h, *b)]


def completion(seg: Segments) -> list[int]:
    """The completion row: outline, the leaves, the trunk (the same branches again), the join."""
    branches = seg._branches()
    return [*seg.outline, *branches, *branches, *seg.join]


def loss_mask(seg: Segments) -> list[int]:
    """1 on the tokens the model decoded in that context (outline, leaf bodies, join), 0 on the inserted
    headers and the trunk's copies; aligned with :func:`completion`."""
    leaves = [m for h, b in zip(seg.headers, seg.bodies) for m in ([0] * len(h) + [1] * len(b))]
    return [1] * len(seg.outline) + leaves + [0] * len(leaves) + [1] * len(seg.join)


@dataclass(frozen=True)
class Plan:
    """Per token of a row: its segment (``PREFIX``, leaf 1..K, trunk K+1) and its position."""

    segment: tuple
    position: tuple

    def sees(self, t: int, s: int) -> bool:
        """Whether token ``t`` attends to token ``s`` (indices into the row)."""
        return s <= t and (self.segment[s] == PREFIX or self.segment[s] == self.segment[t])


def causal_plan(n: int) -> Plan:
    return Plan((PREFIX,) * n, tuple(range(n)))


def plan(row: list[int], tags: Tags) -> Plan | None:
    """The trie plan of ``row`` (prompt + completion, no padding), or None when the row is not a complete
    trie layout (no outline, a leaf that is not ``label : ... ;``, a trunk that is not the leaves again):
    such a row is an ordinary causal sequence. Never raises."""
    try:
        start = row.index(tags.open)
        close = row.index(tags.close, start)
    except ValueError:
        return None
    labels = row[start + 1:close]
    if not labels or tags.semi in labels or tags.colon in labels:
        return None
    n0, i = close + 1, close + 1
    leaves = []
    for copy in (False, True):
        for k, label in enumerate(labels):
            if i + 1 >= len(row) or row[i] != label or row[i + 1] != tags.colon:
                return None
            try:
                end = row.index(tags.semi, i + 2)
            except ValueError:
                return None
            piece = row[i:end + 1]
            if tags.open in piece or tags.close in piece:
                return None
            if copy and piece != leaves[k]:
                return None
            if not copy:
                leaves.append(piece)
            i = end + 1
    K = len(labels)
    segment, position = [PREFIX] * n0, list(range(n0))
    for k, piece in enumerate(leaves, 1):
        segment += [k] * len(piece)
        position += range(n0, n0 + len(piece))
    trunk = len(row) - n0 - sum(map(len, leaves))
    segment += [K + 1] * trunk
    position += range(n0, n0 + trunk)
    return Plan(tuple(segment), tuple(position))
