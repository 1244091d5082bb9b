"""Off-policy correction by TRL's own code: truncated / masked importance sampling, unforked.

TRL (1.16, ``trl/trainer/grpo_trainer.py``) already implements truncated and masked importance sampling
against the behaviour log-probs a generator returned (``vllm_importance_sampling_correction``, modes
``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``, caps
``vllm_importance_sampling_clip_min/max``; docs: https://huggingface.co/docs/trl/main/en/grpo_trainer). It is
inline code, not a function: in ``_generate_and_score_completions`` it recomputes ``old_per_token_logps``
under the trainer's current weights, forms exp(old - behaviour), truncates or masks it, and
``_compute_loss`` multiplies the per-token loss by it. Every one of those lines is gated by
``self.use_vllm`` ("the generator was vLLM"), although nothing in them touches vLLM.

Why an adapter (the only hand-written part): TRL ties the correction to vLLM. Verified gate by gate in the
installed file, with ``rollout_func`` set, the only ``use_vllm`` gates reached are

1. ``_generate``: ``self.vllm_generation.sync_weights()`` before a ``rollout_func`` call when ``global_step``
   changed; the asynchronous glue pushes the weights itself (it must: the push is versioned and, for η >= 1,
   must not wait for the generation in flight), so :class:`_GluePushes` makes that call a no-op;
2. the four correction gates (``old_per_token_logps`` recomputed, the ratio, its metrics, the loss factor);
3. the tool-calling branch (``vllm_mode == "colocate"``), unreached without ``tools``;
4. ``__init__`` (``VLLMGeneration`` is built there only) and the VESPO check, both before the adapter runs.

So, after constructing the trainer with ``use_vllm=False``, :func:`enable` sets ``trainer.use_vllm = True``
and gives it a ``vllm_generation`` whose ``sync_weights`` does nothing: TRL then computes, truncates and
applies the correction itself. :func:`enable` refuses (one error line) a TRL whose ``use_vllm`` gates differ
from the verified list (:data:`VERIFIED_GATES`), so a future TRL that adds a gate fails loudly instead of
calling a vLLM that does not exist; a TRL of another version whose gates are the same passes (the version policy
of :mod:`rlm_lab.compat`, whose :func:`rlm_lab.compat.trl.check_use_vllm_gates` checks them).

Behaviour log-probs: the rollout workers (:class:`rlm_lab.placement.rollout.RolloutEngine`) return the
log-softmax of ``generate``'s processed scores, i.e. of logits / temperature (TRL's generation config has no
top-k / top-p here), the same distribution TRL scores with in ``_get_per_token_logps_and_entropies`` (logits
divided by ``temperature``). At η = 0 the ratio is 1 within fp noise (tests/asynchrony/test_correction.py).

Decoupled PPO (AReaL, arXiv 2505.24298, its decoupled objective; https://inclusionai.github.io/AReaL/algorithms/async.html):
J = E[ π_prox/π_behav · min(u·A, clip(u, 1±ε)·A) ] with u = π_θ/π_prox, π_prox the policy before the update. With the correction on, TRL's loss is exactly
that: ``old_per_token_logps`` is recomputed under the weights before the update (π_prox),
``coef_1 = exp(logp - old)`` is u, clipped by ε (``epsilon``), and the per-token loss is multiplied by
π_prox/π_behav (``importance_sampling_ratio``). The one difference: TRL truncates (or masks) the behaviour
weight at ``clip_max`` (3 here, TRL's default), the paper's objective leaves it untruncated. So "decoupled
PPO" here is the correction on, ``token_truncate`` (a truncated decoupled PPO); no separate mode. With one
update per batch (``num_iterations = 1``, as here) u = 1 at the update, the ε-clip is inactive and the
objective is the policy gradient weighted by the truncated π_prox/π_behav.
"""

from __future__ import annotations

from ..compat.trl import check_use_vllm_gates, mark_weights_loaded
from ..errors import RlmLabError

CORRECTIONS = (None, "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# Every source line of GRPOTrainer that reads use_vllm, as verified in trl 1.16.0 (whitespace stripped).
VERIFIED_GATES = (
    "self.use_vllm = args.use_vllm",
    'if self.loss_type == "vespo" and self.use_vllm and self.vllm_importance_sampling_correction:',
    "if self.use_vllm:",  # __init__: VLLMGeneration
    "if self.use_vllm:",  # _generate_single_turn: unreached with a rollout_func
    'if self.use_vllm and self.vllm_mode == "colocate":',  # tool calling: unreached without tools
    "if self.use_vllm and self.state.global_step != self._last_loaded_step:",  # sync before rollout_func
    "self.use_vllm and self.vllm_importance_sampling_correction",  # old_per_token_logps recomputed
    "if self.use_vllm and self.vllm_importance_sampling_correction:",  # the ratio
    "if self.use_vllm and self.vllm_importance_sampling_correction:",  # its metrics
    "if self.use_vllm and self.vllm_importance_sampling_correction:",  # output["importance_sampling_ratio"]
    'if self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo":',  # loss
)
METRICS = ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
           "sampling/importance_sampling_ratio/max", "sampling/sampling_logp_difference/mean",
           "sampling/sampling_logp_difference/max")


class _GluePushes:
    """Stands in for TRL's ``VLLMGeneration``: the only method reached is ``sync_weights`` (before each
    ``rollout_func`` call), and the glue has already pushed (or queued) the weights itself."""

    def sync_weights(self) -> None:
        return None


def check_correction(correction) -> str | None:
    if correction not in CORRECTIONS:
        raise RlmLabError(f"unknown off-policy correction {correction!r}; choose none or one of "
                          f"{', '.join(c for c in CORRECTIONS if c)}")
    return correction


def enable(trainer, mode: str = "token_truncate", clip_min: float | None = None,
           clip_max: float | None = 3.0) -> None:
    """Switch TRL's own importance-sampling correction on for a trainer fed by a ``rollout_func``."""
    check_correction(mode)
    if mode is None:
        return
    check_use_vllm_gates(trainer, VERIFIED_GATES)
    if trainer.use_vllm or trainer.rollout_func is None or trainer.tools or trainer.loss_type == "vespo":
        raise RlmLabError("TRL's off-policy correction needs a trainer built with use_vllm=False, a rollout_func, "
                          "no tools and a loss other than vespo")
    trainer.use_vllm = True
    trainer.vllm_generation = _GluePushes()
    mark_weights_loaded(trainer)
    trainer.vllm_importance_sampling_correction = True
    trainer.vllm_importance_sampling_mode = mode
    trainer.vllm_importance_sampling_clip_min = clip_min
    trainer.vllm_importance_sampling_clip_max = clip_max


def is_ratio_steps(log_history: list[dict]) -> list[dict]:
    """Per logged step, TRL's own importance-ratio metrics (empty without the correction)."""
    out = []
    for row in log_history:
        got = {k.split("/", 1)[1]: row[k] for k in METRICS if k in row}
        if got:
            out.append({"step": row.get("step"), **got})
    return out
