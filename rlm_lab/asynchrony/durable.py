"""What survives a trainer crash in the asynchronous modes: the buffer's samples and the last checkpoint.

- :class:`SampleLog`: every sample the buffer receives is appended, as one JSON line, to
  ``<run dir>/buffer.jsonl`` (uid, policy version, generation call, position, completion ids, behaviour
  log-probs), and every hand-out as ``{"taken": [uids], "version": v}``, through
  :func:`rlm_lab.record.append_jsonl` (one write per line). A crash can only tear the last line, which
  :func:`read_samples` drops; what is left says which samples were generated, by which version, and which
  were trained on.
- :func:`make_checkpointer`: a ``transformers.TrainerCallback`` that saves the policy every ``every``
  optimizer steps to ``<run dir>/checkpoint`` with the project's ``save`` (safetensors + tokenizer), written
  to a temporary folder and renamed over the old one (:func:`os.replace` on the folder after moving the old
  one aside), so a crash mid-save leaves the previous checkpoint loadable, never half of a new one.

The run's TRL ``output_dir`` is a temporary folder that disappears with the trainer; these two live in the
run's record folder instead. Not in the committed campaign runs (they add I/O to every step).

Why a second checkpointer beside the Trainer's own (``save_strategy="steps"``, which ``rlm-lab train`` turns on
in :func:`rlm_lab.train.run._checkpointing` and checks in :mod:`rlm_lab.train.checkpoint`): that one saves what
``Trainer.train(resume_from_checkpoint=...)`` needs to continue the same run (optimizer, scheduler, RNG and data
position) into ``checkpoint-<step>`` folders written in place, where a crash mid-save leaves a partial folder
that is refused on resume. An asynchronous run is not resumed by the Trainer: what a crash must leave is the
policy the buffer's samples were generated with, replaced whole or not at all, next to the sample log that names
those versions. So this one writes the weights only, into the run's record folder, by a rename.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .. import models
from ..models import load
from ..record import append_jsonl, atomic_write_json, read_jsonl


class SampleLog:
    def __init__(self, path):
        self.path = Path(path)

    def put(self, sample) -> None:
        b, i, completion, logprobs = sample.payload
        append_jsonl(self.path, {"uid": sample.uid, "version": sample.version, "call": b, "index": i,
                                 "completion_ids": list(completion), "logprobs": [float(x) for x in logprobs]})

    def taken(self, samples, version: int) -> None:
        append_jsonl(self.path, {"taken": [s.uid for s in samples], "version": version})


def read_samples(path) -> dict:
    """``{"samples": {uid: row}, "taken": set of uids, "pending": uids generated but never trained on}``
    from a (possibly crash-torn) sample log."""
    rows = read_jsonl(path, torn_tail="drop")
    samples = {r["uid"]: r for r in rows if "uid" in r}
    taken = {u for r in rows if "taken" in r for u in r["taken"]}
    return {"samples": samples, "taken": taken, "pending": sorted(set(samples) - taken)}


def save_checkpoint(model, tokenizer, folder, step: int) -> Path:
    """Save to ``folder`` atomically: write ``folder``.tmp, move the old ``folder`` aside, rename, drop the old."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    models.save(model, tokenizer, tmp)
    atomic_write_json(tmp / "step.json", {"step": step})
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
    return folder


def load_checkpoint(folder):
    """The newest complete checkpoint: ``folder``, or the one moved aside if a crash hit between the two
    renames. Returns (model, tokenizer, step)."""
    folder = Path(folder)
    for cand in (folder, folder.with_name(folder.name + ".old")):
        if (cand / "step.json").exists():
            model, tok = load(str(cand))
            return model, tok, json.loads((cand / "step.json").read_text())["step"]
    raise FileNotFoundError(f"no complete checkpoint at {folder}")


def make_checkpointer(folder, every: int):
    """A ``Checkpointer`` callback saving to ``folder`` every ``every`` steps; a class built here because its base,
    transformers' TrainerCallback, is not imported at this module's top."""
    from transformers import TrainerCallback

    class Checkpointer(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, control, **kwargs):
            if every and state.global_step % every == 0 and self.trainer is not None:
                t = self.trainer
                save_checkpoint(t.accelerator.unwrap_model(t.model), t.processing_class, folder, state.global_step)

    return Checkpointer()
