"""What every verifiable task provides, and the task-file format.

A task turns a seed into problems (``prompt``, ``answer`` and the fields its verifier needs),
checks a completion against a problem, and names itself with a slug that encodes its knobs.
Task files are JSON Lines, one problem per line, under ``data/tasks/<slug>/{train,test}.jsonl``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import RlmLabError
from ..models.tokenizer import ALPHABET
from ..record import atomic_write_text

REQUIRED_FIELDS = ("prompt", "answer")
_GIVE_UP = 20_000  # consecutive samples that found no new problem


@dataclass(frozen=True)
class Task:
    """Base class: subclasses are frozen dataclasses whose fields are the difficulty knobs."""

    name = "task"

    @property
    def slug(self) -> str:
        knobs = "_".join(f"{f.name}{getattr(self, f.name)}" for f in fields(self))
        return f"{self.name}_{knobs}" if knobs else self.name

    @property
    def problem_key(self) -> str:
        """What seeds the problem draw (:meth:`split`): the slug, unless some knob changes only how an answer
        is written (then two tasks that differ in it hold the same problems)."""
        return self.slug

    def sample(self, rng: random.Random) -> dict:
        """One random problem as a row: at least ``prompt`` and ``answer`` (the reference completion)."""
        raise NotImplementedError

    def is_correct(self, completion: str, row: dict) -> bool:
        """True when ``completion`` solves the problem in ``row``. Must not raise on any string."""
        raise NotImplementedError

    def is_well_formed(self, completion: str) -> bool:
        """True when ``completion`` has the answer format (correct or not). Must not raise."""
        raise NotImplementedError

    def is_scorable(self, completion: str) -> bool:
        """False when the verifier cannot score ``completion`` at all (its reward is then None in TRL's
        contract, not 0). Most tasks score every string (a malformed answer is simply wrong). Must not raise."""
        return True

    def max_prompt_len(self) -> int:
        """An upper bound on a prompt's length in characters (= tokens of the character tokenizer)."""
        raise NotImplementedError

    def all_problems(self) -> list[dict] | None:
        """Every distinct problem, when there are few enough to enumerate (else None)."""
        return None

    def split(self, n_train: int, n_test: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
        """Deterministic train/test split with no prompt in both."""
        rng = random.Random(f"{self.problem_key}:{seed}")
        pool = self.all_problems()
        if pool is not None:
            rng.shuffle(pool)
            if n_test + 1 > len(pool):
                raise RlmLabError(f"{self.slug} has only {len(pool)} distinct problems; ask for fewer test problems")
            test = pool[:n_test]
            rest = pool[n_test:]
            train = [rest[i % len(rest)] for i in range(n_train)]  # repeat if more asked than exist
            return train, test
        # Sampling without a list of every problem: give up (one clear error, not a hang) once _GIVE_UP samples
        # in a row bring nothing usable, i.e. the task has (almost) no problems left to draw.
        seen, test, misses = set(), [], 0
        while len(test) < n_test:
            row = self.sample(rng)
            if row["prompt"] not in seen:
                seen.add(row["prompt"])
                test.append(row)
                misses = 0
            elif (misses := misses + 1) >= _GIVE_UP:
                raise RlmLabError(f"{self.slug} gave only {len(test)} distinct problems in {_GIVE_UP:,} tries; ask for "
                                  f"fewer test problems than {n_test:,} or make the task larger")
        train, misses = [], 0
        while len(train) < n_train:
            row = self.sample(rng)
            if row["prompt"] not in seen:
                train.append(row)
                misses = 0
            elif (misses := misses + 1) >= _GIVE_UP:
                raise RlmLabError(f"{self.slug}: every problem drawn in {_GIVE_UP:,} tries is in the {n_test:,} test "
                                  "problems; ask for fewer test problems or make the task larger")
        return train, test


def write_rows(path: str | Path, rows: list[dict]) -> Path:
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    return atomic_write_text(path, text)


def read_rows(path: str | Path, extra_fields: tuple[str, ...] = (), alphabet: str | None = None) -> list[dict]:
    """Read a task file; a malformed line (not UTF-8, not JSON, missing fields, a character the tokenizer
    cannot encode) is one error naming the file and line. ``alphabet`` defaults to the zoo's character
    tokenizer's: any other character would silently become ``<unk>`` in training."""
    if alphabet is None:
        alphabet = ALPHABET
    path = Path(path)
    if path.is_dir():
        raise RlmLabError(f"task file {path} is a folder, not a JSON Lines file")
    if not path.exists():
        raise RlmLabError(f"task file {path} does not exist; run `rlm-lab tasks generate` to create it")
    allowed = set(alphabet)
    rows = []
    for i, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RlmLabError(f"{path}:{i}: not text (byte {e.start + 1} of the line is not UTF-8); "
                              "regenerate with `rlm-lab tasks generate`") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RlmLabError(f"{path}:{i}: not valid JSON ({e.msg}); regenerate with `rlm-lab tasks generate`") from None
        if not isinstance(row, dict):
            raise RlmLabError(f"{path}:{i}: expected a JSON object per line, got {type(row).__name__}")
        missing = [k for k in REQUIRED_FIELDS + tuple(extra_fields) if not isinstance(row.get(k), str)]
        if missing:
            raise RlmLabError(f"{path}:{i}: missing or non-string field(s) {', '.join(missing)}; "
                              "regenerate with `rlm-lab tasks generate`")
        for key in REQUIRED_FIELDS:
            if not row[key]:
                raise RlmLabError(f"{path}:{i}: field {key} is empty")
            bad = sorted(set(row[key]) - allowed)
            if bad:
                raise RlmLabError(f"{path}:{i}: {key} has character(s) {''.join(bad)!r} outside the tokenizer's "
                                  f"alphabet {alphabet!r}; they would train as <unk>")
        rows.append(row)
    if not rows:
        raise RlmLabError(f"task file {path} is empty; regenerate with `rlm-lab tasks generate`")
    return rows
