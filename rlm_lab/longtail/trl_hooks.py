"""Inter-stage fusion inside TRL's GRPOTrainer, through its own hooks (RLHFuse, arXiv 2409.13221).

:class:`FusedRollout` is a ``rollout_func`` (TRL 1.16 ``GRPOTrainer(rollout_func=...)``:
https://huggingface.co/docs/trl/main/en/grpo_trainer): it generates the batch's prompts (already repeated
``num_generations`` times by TRL's sampler) with transformers ``generate``, and scores each completion on a
scorer thread the moment its row emits EOS, while the other rows keep decoding. The rewards go back to TRL as
an extra key of the rollout output, which TRL merges into the reward functions' inputs
(``_generate_and_score_completions``: "Merge extra_fields from rollout_func into inputs for reward
functions"); :func:`fused_reward` is the reward function that reads them. The trainer is not forked.

The scorer sees only the prompt (a rollout_func is given the prompts, not the dataset's other columns), which
suffices for the ``chain`` task: its verifier reads the problem from the prompt.

``logprobs`` are returned as zeros: TRL reads a rollout's sampling log-probs only on its vLLM
importance-sampling path (``use_vllm and vllm_importance_sampling_correction``), never used here.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import RlmLabError
from . import engine

FIELD = "fused_reward"


class FusedRollout:
    """``reward_func``: a reward function in TRL's signature, called per finished completion with
    ``prompt``/``prompts``. ``force_length``: optional ``f(prompt) -> tokens`` (e.g.
    :func:`rlm_lab.tasks.chain.predicted_length`) forcing each row's length, for an untrained model at
    ``smoke`` size as the rest of the chapter does; None lets the model stop at its own EOS."""

    def __init__(self, reward_func, seed: int = 0, force_length=None):
        self.reward, self.seed, self.calls, self.force_length = reward_func, seed, 0, force_length
        self.last: dict = {}
        self.lengths: list[list[int]] = []

    def _score(self, prompt: str, text: str) -> float:
        return float(self.reward([text], prompt=[prompt], prompts=[prompt])[0])

    def _generate_scored(self, prompts, trainer) -> dict:
        """One generate call over ``prompts``, each completion scored on a scorer thread as it finishes."""
        tok = trainer.processing_class
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = max(len(p) for p in prompt_ids)
        rewards: list = [None] * len(prompts)
        scored_at: list = [None] * len(prompts)
        t0 = time.perf_counter()

        def score(i, new_ids):
            text = tok.decode([t for t in new_ids if t != engine.EOS], skip_special_tokens=True)
            rewards[i] = self._score(prompts[i], text)
            scored_at[i] = time.perf_counter() - t0

        model = trainer.model
        was_training = model.training
        model.eval()
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                futures = []
                lengths = None if self.force_length is None else [
                    min(self.force_length(p), trainer.args.max_completion_length) for p in prompts]
                gen = engine.generate(model, prompt_ids, lengths, seed=self.seed + self.calls,
                                      max_new_tokens=trainer.args.max_completion_length,
                                      on_finish=lambda i, ids: futures.append(pool.submit(score, i, ids[width:].tolist())))
                gen_end = time.perf_counter() - t0
                for f in futures:
                    f.result()
        finally:
            model.train(was_training)
        self.calls += 1
        for i, r in enumerate(rewards):  # rows cut by max_completion_length: scored once generation ends
            if r is None:
                score(i, gen.new_tokens[i])
        self.last = {"prompts": list(prompts), "gen_s": gen.seconds, "gen_end_s": gen_end, "scored_at": scored_at,
                     "finish_s": gen.finish_s}
        self.lengths.append([len(c) for c in gen.new_tokens])  # the generated length distribution, per call
        return {"prompt_ids": prompt_ids, "completion_ids": gen.new_tokens, FIELD: rewards}

    def __call__(self, prompts, trainer) -> dict:
        out = self._generate_scored(prompts, trainer)
        return {**out, "logprobs": [[0.0] * len(c) for c in out["completion_ids"]]}


class DynamicSamplingRollout(FusedRollout):
    """DAPO's dynamic sampling (arXiv 2503.14476) inside TRL's GRPOTrainer, as a ``rollout_func``: every group
    (TRL's sampler repeats each prompt ``num_generations`` times in a row) whose rewards are all equal is
    replaced by a group of a prompt drawn from ``pool`` (prompt strings), generated and scored again, until no
    group is all-equal or ``max_rounds`` rounds were made (the all-equal groups left are then kept and counted).

    The trainer trains on the prompt ids and rewards returned here, so a replaced group is consistent in
    itself; TRL's own reward functions and logs still see the sampler's prompt text, so use
    :func:`fused_reward` as the only reward function. ``groups_generated`` / ``groups_returned`` is the
    measured generation inflation."""

    def __init__(self, reward_func, pool, seed: int = 0, force_length=None, max_rounds: int = 8):
        super().__init__(reward_func, seed, force_length)
        if not pool:
            raise RlmLabError("dynamic sampling needs a pool of prompts to draw replacements from (empty)")

        self.pool, self.max_rounds, self.rng = list(pool), max_rounds, random.Random(seed)
        self.groups_generated = self.groups_returned = self.all_equal_left = 0

    def __call__(self, prompts, trainer) -> dict:
        g = trainer.num_generations
        if g < 2:
            raise RlmLabError("group size 1: every group's rewards are all equal, so dynamic sampling never "
                              "fills a batch; use num_generations >= 2")
        prompts = list(prompts)
        out = self._generate_scored(prompts, trainer)
        ids, comps, rewards = out["prompt_ids"], out["completion_ids"], out[FIELD]
        n_groups = len(prompts) // g
        self.groups_generated += n_groups
        for _ in range(self.max_rounds):
            flat = [k for k in range(n_groups) if len(set(rewards[k * g:(k + 1) * g])) == 1]
            if not flat:
                break
            drawn = [self.rng.choice(self.pool) for _ in flat]
            new_prompts = [p for p in drawn for _ in range(g)]  # TRL's layout: each prompt g times in a row
            again = self._generate_scored(new_prompts, trainer)
            self.groups_generated += len(flat)
            for j, k in enumerate(flat):
                for m in range(g):
                    prompts[k * g + m] = new_prompts[j * g + m]
                    ids[k * g + m] = again["prompt_ids"][j * g + m]
                    comps[k * g + m] = again["completion_ids"][j * g + m]
                    rewards[k * g + m] = again[FIELD][j * g + m]
        self.all_equal_left += sum(1 for k in range(n_groups) if len(set(rewards[k * g:(k + 1) * g])) == 1)
        self.groups_returned += n_groups
        self.last["prompts"] = prompts
        return {"prompt_ids": ids, "completion_ids": comps, "logprobs": [[0.0] * len(c) for c in comps],
                FIELD: rewards}


def fused_reward(completions, **columns) -> list[float]:
    """The reward :class:`FusedRollout` computed while generating (TRL passes it as the ``fused_reward``
    column)."""
    values = columns.get(FIELD)
    if not isinstance(values, list) or len(values) != len(completions):
        raise RlmLabError("fused_reward needs the rewards of FusedRollout: pass rollout_func=FusedRollout(...) "
                          "to the GRPOTrainer")
    return [float(v) for v in values]
