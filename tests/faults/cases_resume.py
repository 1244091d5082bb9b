"""``rlm-lab train --resume`` (issue 18 item 6) from a checkpoint that is damaged or is not the record's: a file
cut short (``model.safetensors``, ``optimizer.pt``, ``trainer_state.json``...), a record edited to another model,
algorithm or length. Each is one line before the run folder is taken over (the row's folder, holding the run,
must stay exactly as it was).

Every row copies one interrupted nano run (checkpoint at step 2 of 4), trained once per session in a temporary
folder (about ten seconds) and then damaged in the copy."""

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

from fault_matrix import Case

_BASE: list[Path] = []


def interrupted_run() -> Path:
    """A nano GRPO run stopped (KeyboardInterrupt, as Ctrl-C) right after its checkpoint at step 2 of 4."""
    if _BASE:
        return _BASE[0]
    from transformers import TrainerCallback

    from rlm_lab.train.config import make_config
    from rlm_lab.train.run import run

    class StopAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt

    root = Path(tempfile.mkdtemp(prefix="rlm-faults-resume-"))
    atexit.register(shutil.rmtree, root, True)
    old = {k: os.environ.get(k) for k in ("RLM_CACHE_DIR", "RLM_RUNS_DIR")}
    os.environ.update(RLM_CACHE_DIR=str(root / "cache"), RLM_RUNS_DIR=str(root / "runs"))
    try:
        cfg = make_config("grpo", "smoke", model="nano", sft_steps=2, sft_batch_size=8, rl_steps=4, batch_size=4,
                          num_generations=2, max_completion_length=2, eval_problems=4, eval_every=0,
                          eval_batch_size=4, eval_max_new_tokens=2, disable_tqdm=True, trace=False,
                          extra={"save_steps": 2}, out=str(root / "runs" / "cut"))
        try:
            run(cfg, callbacks=[StopAfterSave()])
        except KeyboardInterrupt:
            pass
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert (root / "runs" / "cut" / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()
    _BASE.append(root / "runs" / "cut")
    return _BASE[0]


CKPT = Path("checkpoints") / "checkpoint-2"


def truncate(name, keep=0.5):
    def damage(run: Path):
        p = run / CKPT / name
        os.truncate(p, int(p.stat().st_size * keep))
    return damage


def edit_record(**changes):
    def damage(run: Path):
        rec = json.loads((run / "record.json").read_text())
        rec["config"].update(changes)
        (run / "record.json").write_text(json.dumps(rec, indent=2))
    return damage


def edit_state(**changes):
    def damage(run: Path):
        p = run / CKPT / "trainer_state.json"
        p.write_text(json.dumps(json.loads(p.read_text()) | changes))
    return damage


CASES = []
ENV = {"RLM_CACHE_DIR": "{tmp}/cache", "RLM_RUNS_DIR": "{tmp}/runs"}


def add(id, what, damage, message):
    def setup(tmp):
        shutil.copytree(interrupted_run(), tmp / "run")
        damage(tmp / "run")
    CASES.append(Case(id, what, argv=["train", "--resume", "{tmp}/run"], setup=setup, env=ENV, message=message))


add("safetensors-half", "model.safetensors cut to half its size", truncate("model.safetensors"),
    r"checkpoint-2: model\.safetensors is damaged \(.*incomplete metadata.*truncated")
add("safetensors-header", "model.safetensors cut inside its header", truncate("model.safetensors", 0.0001),
    r"model\.safetensors is damaged")
add("safetensors-empty", "model.safetensors empty (a save killed at once)", truncate("model.safetensors", 0),
    r"model\.safetensors is damaged")
add("optimizer-half", "optimizer.pt cut to half its size", truncate("optimizer.pt"),
    r"optimizer\.pt is damaged \(File is not a zip file")
add("optimizer-tail", "optimizer.pt missing its last 100 bytes", lambda run: os.truncate(
    run / CKPT / "optimizer.pt", (run / CKPT / "optimizer.pt").stat().st_size - 100), r"optimizer\.pt is damaged")
add("scheduler-half", "scheduler.pt cut to half its size", truncate("scheduler.pt"), r"scheduler\.pt is damaged")
add("rng-half", "rng_state.pth cut to half its size", truncate("rng_state.pth"), r"rng_state\.pth is damaged")


def _flip_byte(run: Path):
    """One byte of the optimizer's stored tensor data changed: the archive is whole, a CRC is not."""
    p = run / CKPT / "optimizer.pt"
    import zipfile

    with zipfile.ZipFile(p) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(p.read_bytes())
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.file_size // 2
    data[at] ^= 0xFF
    p.write_bytes(bytes(data))


add("optimizer-bit-flip", "optimizer.pt with one byte of its tensors changed", _flip_byte,
    r"optimizer\.pt is damaged \(member .* fails its CRC check\)")
add("state-half", "trainer_state.json cut to half its size", truncate("trainer_state.json"),
    r"trainer_state\.json is damaged \(.*truncated or partly written")
add("state-missing", "trainer_state.json deleted", lambda run: (run / CKPT / "trainer_state.json").unlink(),
    r"it has no trainer_state\.json")
add("state-list", "trainer_state.json holding a list", lambda run: (run / CKPT / "trainer_state.json").write_text("[]"),
    r"trainer_state\.json holds list")
add("state-step-mismatch", "trainer_state.json of another step than its folder", edit_state(global_step=3),
    r"says global_step=3, but the folder is step 2")
add("record-other-model", "the record edited to another model (micro for a nano checkpoint)", edit_record(model="micro"),
    r"its weights are not those of the record's model 'micro' \(\d+ tensor\(s\) differ, e\.g\. .*\[52, 64\]")
add("record-other-arch", "the record edited to a model of another architecture (mini, qwen2)", edit_record(model="mini"),
    r"its weights are not those of the record's model 'mini'")
add("record-rl-steps-below", "the record edited to rl_steps=1 with a checkpoint at step 2 (would run 'completed' past it)",
    edit_record(rl_steps=1), r"the record asks for rl_steps=1, but the checkpoint is already at step 2")
add("record-rl-steps-above", "the record edited to rl_steps=20 for a checkpoint of a 4-step run",
    edit_record(rl_steps=20), r"saved by a run of 4 steps but the record asks for rl_steps=20")
add("record-other-algo", "the record edited to PPO for a GRPO checkpoint (no critic saved)",
    edit_record(algo="ppo"), r"algorithm is ppo but the checkpoint has no critic/model\.safetensors")


def _ppo_with_torn_critic(run: Path):
    """A PPO record whose checkpoint's critic weights were cut short (a copy of the actor's, truncated)."""
    edit_record(algo="ppo")(run)
    critic = run / CKPT / "critic"
    critic.mkdir()
    shutil.copy(run / CKPT / "model.safetensors", critic / "model.safetensors")
    os.truncate(critic / "model.safetensors", 1000)


add("critic-truncated", "a PPO checkpoint whose critic/model.safetensors is cut short", _ppo_with_torn_critic,
    r"critic/model\.safetensors is damaged")


# ---- issue 42: re-checked with weights that load but are wrong, and files that are gone -----------------------------

def _rewrite_weights(change):
    def damage(run: Path):
        from safetensors.torch import load_file, save_file

        p = run / CKPT / "model.safetensors"
        tensors = load_file(p)
        save_file(change(tensors), p, metadata={"format": "pt"})
    return damage


def _nan_first(tensors):
    name = min(tensors)
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = float("nan")
    return tensors


def _inf_last(tensors):
    name = max(tensors)
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[-1] = float("inf")
    return tensors


add("weights-nan", "model.safetensors whole, with one weight NaN (would train on from a broken model)",
    _rewrite_weights(_nan_first), r"checkpoint-2: model\.safetensors holds a non-finite value \(NaN or inf\) in ")
add("weights-inf", "model.safetensors whole, with one weight infinite", _rewrite_weights(_inf_last),
    r"checkpoint-2: model\.safetensors holds a non-finite value \(NaN or inf\) in ")
add("weights-renamed-keys", "model.safetensors whose tensors carry other names (wrong keys)",
    _rewrite_weights(lambda t: {f"x.{k}": v for k, v in t.items()}), r"its weights are not those of the record's model")
add("weights-missing", "model.safetensors deleted", lambda run: (run / CKPT / "model.safetensors").unlink(),
    r"checkpoint-2.*model\.safetensors")
add("optimizer-missing", "optimizer.pt deleted", lambda run: (run / CKPT / "optimizer.pt").unlink(),
    r"checkpoint-2.*optimizer\.pt")
add("scheduler-missing", "scheduler.pt deleted", lambda run: (run / CKPT / "scheduler.pt").unlink(),
    r"checkpoint-2.*scheduler\.pt")
