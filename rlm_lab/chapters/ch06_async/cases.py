"""Chapter 6's campaign matrix and its runs' settings (read by the driver, the plain-TRL reference and the
analysis): the cells, their record folders, the GRPO config every run shares and the held-out curve; and
:data:`REFERENCES`, the runtime-overhead comparisons ``rlm-lab reference --chapter 6`` re-measures."""

from __future__ import annotations

import datetime as _dt

from ...errors import RlmLabError
from ...protocol import Reference
from ...sizes import check_size, get, long_tail_learning
from ...tasks import ensure_files, parse_task
from ...train.run import cache_root
from ...train.sft import sft_cache_key
from ..ch05_placement.cases import run_config

MODES = ("sync", "one_step_off", "eta2", "eta4", "eta8", "async")
CORRECTIONS = (None, "token_truncate")
SEEDS = (0, 1, 2)


def budget(size: str) -> dict:
    """Steps per run and the curve's interval at ``size`` (``rlm_lab.sizes``: ``async_campaign``)."""
    b = dict(get(size).async_campaign)
    if not b:
        raise RlmLabError(f"chapter 6's campaign runs at smoke or cpu size, not {size!r}")
    return b


def corr_label(correction) -> str:
    return "none" if correction is None else ("tis" if correction == "token_truncate" else correction)


def cell_name(mode: str, correction, seed: int) -> str:
    return f"ch06_{mode}_{corr_label(correction)}_seed{seed}"


def reference_name(seed: int) -> str:
    return f"ch06_trl_reference_seed{seed}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def campaign_config(size: str, seed: int, steps: int | None = None):
    """The GRPO config of every run of the campaign: chapter 7's learning runs' task, model, lengths and
    SFT warm start (its cached checkpoint when it exists, else the placement runtime trains the same SFT)."""
    size = check_size(size)
    steps = steps or budget(size)["steps"]
    s = long_tail_learning(size)
    cfg = run_config(size, task=get(size).long_tail["task"], model=s["model"], seed=seed,
                     rl_steps=steps, max_completion_length=s["max_completion_length"],
                     eval_max_new_tokens=s["max_completion_length"], eval_problems=s["eval_problems"])

    sft = cache_root() / "sft" / sft_cache_key(cfg.replace(seed=0), ensure_files(parse_task(cfg.task))["train"])
    if (sft / "config.json").is_file():  # chapter 7's warm start (seed 0's SFT): the same starting model
        cfg = cfg.replace(sft_checkpoint=str(sft))
    return cfg


def curve_spec(cfg, size: str) -> dict:
    return {"task": cfg.task, "every": budget(size)["every"], "problems": cfg.eval_problems,
            "max_new_tokens": cfg.eval_max_new_tokens, "batch_size": cfg.eval_batch_size}




# rlm-lab reference --chapter 6: the runtime's own cost against plain trl.GRPOTrainer on the same cores (the
# page's overhead sentences read data/runs/cpu/ch06_overhead), tokens per second (higher is better), each repeat
# one arm of rlm_lab.chapters.ch06_async.overhead in a fresh process with its default completion lengths: fixed
# since 2026-12-04 (every arm the same work; the windows before ran sampled lengths). One repeat at cpu size (the
# mean of both arms below), from the committed sampled-length protocol records' wall times on the slower machine of
# 2026-12-03 (plain about 30 s, sync_all about 68 s, sync about 85 s) scaled by how much longer fixed lengths ran on
# 2026-12-04 (plain 1.42x, sync_all 1.23x, in the 12-pair records of both lengths). The colocated arm is left out
# to keep the chapter within 20 min.
_OVERHEAD = "rlm_lab.chapters.ch06_async.overhead:run_arm"
REFERENCES = (
    Reference("sync_all_vs_plain", ("sync_all", "plain"), _OVERHEAD, "tokens_per_s", True,
              ("ch06_overhead/overhead_sync_all_vs_plain",
               "ch06_overhead/overhead_sync_all_vs_plain_fixed_lengths"), 63.0),
    Reference("sync_vs_plain", ("sync", "plain"), _OVERHEAD, "tokens_per_s", True,
              ("ch06_overhead/overhead_sync_vs_plain",), 74.0),
)
