"""Before ``rlm-lab train --resume`` starts anything: is the run's last checkpoint whole, and is it a checkpoint
of the run its record describes?

The Trainer resumes from ``<run>/checkpoints/checkpoint-<step>/`` (``Trainer.train(resume_from_checkpoint=...)``,
https://huggingface.co/docs/transformers/main_classes/trainer#transformers.Trainer.train), loading the weights
(``model.safetensors``), the optimizer, scheduler and RNG states (``torch.save`` files: zip archives,
https://pytorch.org/docs/stable/notes/serialization.html) and ``trainer_state.json``. A file cut short (a full
disk, a copy that stopped, a writer killed mid-save) or a record edited to another model or another length
would otherwise surface minutes later as a 30-60-line traceback from deep inside torch or safetensors, or, for
``rl_steps`` below the checkpoint's step, as a "completed" run longer than its record says. Each is checked
here, before the Trainer starts:

* the files the Trainer reads to continue where it stopped are there (the weights, optimizer, scheduler and RNG
  states: without the optimizer's it would resume silently with a fresh one);
* every ``*.safetensors``: its header parses and its tensors cover the file exactly (``safetensors.safe_open``
  refuses a truncated file: https://huggingface.co/docs/safetensors/metadata_parsing), and every floating-point
  tensor is finite (read one tensor at a time: the only tensors this check loads);
* every ``*.pt`` / ``*.pth`` / ``*.bin``: a whole zip archive whose members' CRC-32s match (``zipfile.testzip``);
* ``trainer_state.json``: valid JSON with ``global_step`` equal to the folder's step and ``max_steps`` equal to
  the record's ``rl_steps`` (the LR schedule and the data order were built for that length);
* the weights: every tensor of ``model.safetensors`` has the name and shape the record's model has (the
  model built on PyTorch's meta device, so no memory is used), and a PPO record's checkpoint has its critic.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open

from ..errors import RlmLabError
from ..models.tokenizer import char_tokenizer
from ..models.zoo import ZOO, make_config

TORCH_FILES = ("*.pt", "*.pth", "*.bin")
STATE = "trainer_state.json"
WEIGHTS = "model.safetensors"
# what the Trainer reads to continue where it stopped (one process: one rng_state.pth)
REQUIRED = (WEIGHTS, "optimizer.pt", "scheduler.pt", "rng_state.pth")


def _refuse(ckpt: Path, what: str) -> RlmLabError:
    return RlmLabError(f"cannot resume from {ckpt}: {what}; remove that folder to restart the run from its "
                       f"first step")


def check_checkpoint(cfg, ckpt: Path | None) -> Path | None:
    """``ckpt`` if the run described by ``cfg`` can resume from it (None: no checkpoint, the run restarts);
    one clear error otherwise (module docstring). Reads files only: nothing is written, nothing loaded."""
    if ckpt is None:
        return None
    ckpt = Path(ckpt)
    step = int(ckpt.name.rsplit("-", 1)[1])
    _check_state(cfg, ckpt, step)
    missing = [name for name in REQUIRED if not (ckpt / name).is_file()]
    if missing:   # the Trainer would stop with a ValueError (no weights) or resume silently with a fresh optimizer
        raise _refuse(ckpt, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing (a save that did "
                            f"not finish, or a file removed): the run cannot continue where it stopped")
    for path in sorted(ckpt.rglob("*.safetensors")):
        _check_safetensors(ckpt, path)
    for pattern in TORCH_FILES:
        for path in sorted(ckpt.rglob(pattern)):
            _check_zip(ckpt, path)
    if (ckpt / WEIGHTS).is_file():
        _check_shapes(cfg, ckpt)
    if cfg.algo == "ppo" and not (ckpt / "critic" / WEIGHTS).is_file():
        raise _refuse(ckpt, f"the record's algorithm is ppo but the checkpoint has no critic/{WEIGHTS} "
                            f"(it was not saved by a PPO run)")
    return ckpt


def _check_state(cfg, ckpt: Path, step: int) -> None:
    path = ckpt / STATE
    if not path.is_file():
        raise _refuse(ckpt, f"it has no {STATE} (a save that did not finish)")
    try:
        state = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _refuse(ckpt, f"{STATE} is damaged ({e}: a truncated or partly written file)") from None
    if not isinstance(state, dict):
        raise _refuse(ckpt, f"{STATE} holds {type(state).__name__}, not the Trainer's state object")
    got = state.get("global_step")
    if got != step:
        raise _refuse(ckpt, f"{STATE} says global_step={got!r}, but the folder is step {step}")
    if cfg.rl_steps < step:
        raise RlmLabError(f"cannot resume from {ckpt}: the record asks for rl_steps={cfg.rl_steps}, but the "
                          f"checkpoint is already at step {step} (was the record edited?); set rl_steps back to "
                          f"{state.get('max_steps', '?')} in its record.json")
    max_steps = state.get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0 and max_steps != cfg.rl_steps:
        raise RlmLabError(f"cannot resume from {ckpt}: it was saved by a run of {max_steps} steps but the record "
                          f"asks for rl_steps={cfg.rl_steps} (the schedule and data order were built for "
                          f"{max_steps}; was the record edited?)")


def _check_safetensors(ckpt: Path, path: Path) -> None:
    import torch
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - a safe_open handle, not a dict; one tensor at a time: memory bounded by the largest tensor
                t = f.get_tensor(name)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise _refuse(ckpt, f"{path.relative_to(ckpt)} holds a non-finite value (NaN or inf) in "
                                        f"{name}: the run diverged or the file was damaged before its save")
    except (SafetensorError, OSError, ValueError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _refuse(ckpt, f"{path.relative_to(ckpt)} is damaged ({why}: a truncated or partly written "
                            f"file)") from None


def _check_zip(ckpt: Path, path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise _refuse(ckpt, f"{path.relative_to(ckpt)} is damaged ({e}: a truncated or partly written "
                            f"file)") from None
    if bad is not None:
        raise _refuse(ckpt, f"{path.relative_to(ckpt)} is damaged (member {bad} fails its CRC check)")


def expected_shapes(model: str) -> dict[str, tuple] | None:
    """Parameter name -> shape of ``model`` (a zoo name or a saved folder) as a trainer would hold it, built
    on the meta device (no memory, no weights); None for a hub id (not checked offline)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if model in ZOO:
        conf = make_config(model, vocab_size=len(char_tokenizer()))
    elif (Path(model) / "config.json").is_file():
        conf = AutoConfig.from_pretrained(model)
    else:
        return None
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(conf)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def _check_shapes(cfg, ckpt: Path) -> None:
    want = expected_shapes(cfg.model)
    if want is None:
        return
    with safe_open(str(ckpt / WEIGHTS), framework="pt") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    differ = [f"{k} {list(got[k])} (the record's model: {list(want[k])})" for k in sorted(got)
              if k in want and got[k] != want[k]]
    foreign = sorted(set(got) - set(want))
    missing = sorted(k for k in set(want) - set(got) if not re.search(r"lm_head\.weight$", k))  # may be tied
    if differ or foreign or missing:
        detail = (differ[:1] or [f"{foreign[0]} is not in the record's model" if foreign else
                                 f"{missing[0]} of the record's model is missing"])[0]
        n = len(differ) + len(foreign) + len(missing)
        raise RlmLabError(f"cannot resume from {ckpt}: its weights are not those of the record's model "
                          f"{cfg.model!r} ({n} tensor(s) differ, e.g. {detail}; was the record edited?)")
