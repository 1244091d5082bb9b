"""Fork-join decoding inside TRL's ``GRPOTrainer``, through its ``rollout_func`` hook (TRL 1.16:
https://huggingface.co/docs/trl/main/en/grpo_trainer, "rollout_func ... must return prompt_ids,
completion_ids and logprobs; any other fields are forwarded to the reward functions").

:class:`ForkJoinRollout` decodes each prompt's trace (:func:`rlm_lab.forkjoin.generate.fork_join_generate`,
sampling at the trainer's temperature) and returns, per trace, the trie row as the completion
(:func:`rlm_lab.forkjoin.layout.completion`), TRL's ``env_mask`` (TRL: "marks model tokens (1) vs external
tokens (0)": the loss skips the inserted headers and the trunk's copies, and TRL's logged completion lengths
count the decoded tokens) and the trace text under ``trace`` for the reward (:func:`on_trace`). The backbone
is hooked (:func:`rlm_lab.forkjoin.trie.install`) before TRL scores the rows, so every token's log-probability
is computed in the context it was sampled in. A malformed trace goes back as the tokens it decoded, causal,
with its reward None.

``logprobs`` are zeros: TRL reads a rollout's sampling log-probs only on its vLLM importance-sampling path.
"""

from __future__ import annotations

from ..errors import RlmLabError
from .generate import Limits, fork_join_generate, text
from .layout import completion, loss_mask
from .trie import install

FIELD = "trace"


class ForkJoinRollout:
    def __init__(self, limits: Limits = Limits(), seed: int = 0):
        self.limits, self.seed, self.calls = limits, seed, 0
        self.work: list[list[int]] = []   # decoded tokens of each trace, per call
        self.depth: list[list[int]] = []  # critical-path tokens of each trace, per call

    def __call__(self, prompts, trainer) -> dict:
        tok = trainer.processing_class
        model = install(trainer.model, tok)
        got = fork_join_generate(model, tok, list(prompts), self.limits, sample=True, seed=self.seed + 1000 * self.calls,
                                 temperature=trainer.args.temperature)
        self.calls += 1
        comps, masks = [], []
        for d in got.traces:
            if d.segments is not None:
                comps.append(completion(d.segments))
                masks.append(loss_mask(d.segments))
            else:
                comps.append(list(d.trace))
                masks.append(list(d.mask))
        self.work.append([d.work for d in got.traces])
        self.depth.append([d.depth for d in got.traces])
        return {"prompt_ids": [d.prompt for d in got.traces], "completion_ids": comps,
                "logprobs": [[0.0] * len(c) for c in comps], "env_mask": masks,
                FIELD: [text(tok, d.trace) for d in got.traces]}


def on_trace(reward_func):
    """A reward function in TRL's signature that scores the ``trace`` field of :class:`ForkJoinRollout` (the
    completion TRL decodes is the trie row, with the branches twice) with ``reward_func``."""

    def traced(completions, **columns):
        traces = columns.pop(FIELD, None)
        if not isinstance(traces, list) or len(traces) != len(completions):
            raise RlmLabError("a trace reward needs the traces of ForkJoinRollout: pass rollout_func=ForkJoinRollout() "
                              "to the GRPOTrainer")
        return reward_func(traces, **columns)

    traced.__name__ = getattr(reward_func, "__name__", "trace_reward")
    return traced
