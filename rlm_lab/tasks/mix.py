"""A mixture of the book's tasks, for multi-domain RLVR (chapter 10): one dataset, one verifier that routes.

``mix:tasks=arithmetic+countdown+chain+psum`` holds problems of each named task, each prompt prefixed by its
task's tag (``ar:37+45=``, ``cd:3,5,7;22=``, ``ch:3+4*2=``, ``ps:3*4+5*6=``) so the policy can tell the
domains apart (a one-operation chain prompt is also an arithmetic prompt), and a ``task`` column naming it;
the verifier routes each completion to its task's verifier by that column. ``mix:tasks=arithmetic`` holds the
*same* arithmetic problems as the four-task mixture (each task's problems are drawn from its own seed, in
shares of ``n // len(COMPONENTS)`` whatever the mixture holds), so a separate run on one domain trains and is
evaluated on exactly that domain's part of the mixture. Rows are interleaved round-robin over the tasks.

Every row has the same columns (``prompt``, ``answer``, ``task``, ``numbers``, ``target``; the last two are
countdown's and empty elsewhere), so TRL builds one dataset. The components' knobs are fixed here
(:data:`COMPONENTS`): the ``tasks`` knob chooses among them only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RlmLabError
from .arithmetic import Arithmetic
from .base import Task
from .chain import Chain
from .countdown import Countdown
from .psum import Psum

# name: (prompt tag, the component task). The tags are in the zoo tokenizer's alphabet.
COMPONENTS = {
    "arithmetic": ("ar:", Arithmetic(digits=2)),
    "countdown": ("cd:", Countdown(numbers=3)),
    "chain": ("ch:", Chain(steps=4)),
    "psum": ("ps:", Psum(terms=3, max_number=3)),
}
COLUMNS = ("prompt", "answer", "task", "numbers", "target")


def share(n: int) -> int:
    """Problems per task for ``n`` asked (the same for every mixture, so mixtures share their problems)."""
    return max(1, n // len(COMPONENTS))


@dataclass(frozen=True)
class Mix(Task):
    tasks: str = "+".join(COMPONENTS)

    name = "mix"

    def __post_init__(self):
        names = self.tasks.split("+")
        bad = [n for n in names if n not in COMPONENTS]
        if not self.tasks or bad:
            raise RlmLabError(f"mix tasks {self.tasks!r}: use {', '.join(COMPONENTS)} joined by '+'")
        if len(set(names)) != len(names):
            raise RlmLabError(f"mix tasks {self.tasks!r} names a task twice")

    @property
    def names(self) -> list[str]:
        return self.tasks.split("+")

    def component(self, name: str) -> Task:
        return COMPONENTS[name][1]

    def max_prompt_len(self) -> int:
        return max(len(COMPONENTS[n][0]) + COMPONENTS[n][1].max_prompt_len() for n in self.names)

    def _tag(self, name: str, row: dict) -> dict:
        out = {k: "" for k in COLUMNS}
        out.update({k: v for k, v in row.items() if k in COLUMNS})
        out["prompt"], out["task"] = COMPONENTS[name][0] + row["prompt"], name
        return out

    def split(self, n_train: int, n_test: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
        parts = {n: self.component(n).split(share(n_train), share(n_test), seed) for n in self.names}
        train = [self._tag(n, parts[n][0][i]) for i in range(share(n_train)) for n in self.names]
        test = [self._tag(n, parts[n][1][i]) for i in range(share(n_test)) for n in self.names]
        return train, test

    def sample(self, rng):
        raise RlmLabError("a mixture is drawn task by task (Mix.split), not one problem at a time")

    def route(self, row) -> Task | None:
        name = row.get("task") if isinstance(row, dict) else None
        return self.component(name) if name in COMPONENTS else None

    def is_correct(self, completion: str, row: dict) -> bool:
        task = self.route(row)
        return task is not None and task.is_correct(completion, row)

    def is_well_formed(self, completion: str) -> bool:
        """Without the row the task is unknown: well formed for at least one of the mixture's tasks."""
        return any(self.component(n).is_well_formed(completion) for n in self.names)
