"""The rollout engine: one code path that generates GRPO's completions, in-process or in a Ray actor.

TRL 1.16's ``GRPOTrainer(rollout_func=f)`` hands ``f(prompts, trainer)`` the prompts of one generation
batch (already repeated ``num_generations`` times by TRL's sampler: one completion is expected back per
entry) and takes back ``prompt_ids``, ``completion_ids`` and ``logprobs``
(https://huggingface.co/docs/trl/main/en/grpo_trainer, "rollout_func"; read in trl/trainer/grpo_trainer.py
``_generate``). The same :class:`RolloutEngine` runs

- in the trainer's process on the trainer's own module (``colocated``: no copy, no weight sync), and
- in every rollout worker actor on its own copy (``disaggregated``: weights arrive by
  :mod:`rlm_lab.placement.weights` before each generation).

Sampling is driven by a seed the trainer sends for every chunk of prompts (:func:`chunk_seed`), inside
``torch.random.fork_rng`` so it never touches the trainer's RNG stream: with equal weights both placements
draw exactly the same completions. Generation itself mirrors TRL's transformers path (left padding,
``model.generate`` with the trainer's ``GenerationConfig``, everything after the first EOS dropped).
"""

from __future__ import annotations

import time

from ..compat.transformers import compile_on_every_device


def chunk_seed(base_seed: int, call: int, chunk: int) -> int:
    """The sampling seed of chunk ``chunk`` of generation call ``call`` (same in every placement)."""
    return (base_seed * 1_000_003 + call * 1009 + chunk) % (2**63 - 1)


def chunks(n: int, parts: int, group: int) -> list[tuple[int, int]]:
    """Split ``n`` prompt entries into ``parts`` contiguous ``(start, stop)`` slices of whole groups of
    ``group`` entries (GRPO's G completions of one prompt stay on one worker); empty slices are dropped."""
    if parts < 1 or group < 1 or n % group:
        raise ValueError(f"cannot split {n} prompts into {parts} parts of whole groups of {group}")
    groups = n // group
    out, start = [], 0
    for p in range(parts):
        k = groups // parts + (1 if p < groups % parts else 0)
        if k:
            out.append((start, start + k * group))
            start += k * group
    return out


def left_pad(prompt_ids: list[list[int]], pad: int):
    """``(input_ids, attention_mask)``: the prompts left-padded to one width, as TRL's transformers path."""
    import torch

    tensors = [torch.tensor(ids) for ids in prompt_ids]
    width = max(len(t) for t in tensors)
    input_ids = torch.full((len(tensors), width), pad, dtype=torch.long)
    mask = torch.zeros((len(tensors), width), dtype=torch.long)
    for i, t in enumerate(tensors):
        input_ids[i, width - len(t):] = t
        mask[i, width - len(t):] = 1
    return input_ids, mask


def cut_completions(completion, scores, eos) -> tuple[list[list[int]], list[list[float]]]:
    """Per row: the generated ids up to and including the first EOS (TRL's completion mask) and each kept
    token's log-prob under the processed scores ``generate`` sampled from (one tensor per decode step)."""
    import torch

    completion_ids, logprobs = [], []
    scores = torch.stack(scores, dim=1).float().log_softmax(-1) if scores else None
    for i in range(completion.size(0)):
        row = completion[i].tolist()
        cut = next((j + 1 for j, tok in enumerate(row) if tok in eos), len(row))
        completion_ids.append(row[:cut])
        if scores is not None:
            lp = scores[i, torch.arange(cut, device=scores.device), completion[i, :cut]]
            logprobs.append(lp.tolist())
        else:
            logprobs.append([0.0] * cut)
    return completion_ids, logprobs


class RolloutEngine:
    """Generates completions with ``model`` (a transformers causal LM) under TRL's generation settings.

    ``gen`` is ``trainer.generation_config.to_dict()`` (plus ``pad_token_id``/``eos_token_id``), so the
    engine samples exactly as TRL would on the trainer. ``compile``: let transformers ``torch.compile`` the decode
    step (it needs a compilable cache, ``cache_implementation="static"`` in ``gen``; on a CPU only when the compile
    config allows every device; https://huggingface.co/docs/transformers/main/en/llm_optims).
    """

    def __init__(self, model, gen: dict, pad_token_id: int, eos_token_ids, compile: bool = False):
        from transformers import GenerationConfig

        self.model = model
        self.gen = GenerationConfig(**{k: v for k, v in gen.items() if not k.startswith("_")})
        if compile:  # transformers compiles the decode step itself (a compilable cache; every device allowed)
            self.gen.disable_compile = False
            self.gen.compile_config = compile_on_every_device()
        self.pad = pad_token_id
        self.eos = list(eos_token_ids) if isinstance(eos_token_ids, (list, tuple)) else [eos_token_ids]
        self.spans: list[dict] = []  # (name, start, end) in time.perf_counter() seconds

    def generate(self, prompt_ids: list[list[int]], seed: int) -> dict:
        """Completions (one per prompt entry), their sampled-token log-probs, and the generate span."""
        import torch

        t0 = time.perf_counter()
        input_ids, mask = left_pad(prompt_ids, self.pad)
        width = input_ids.size(1)
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device  # cuda on a GPU set
            # the seed reaches the CUDA generator too: fork (and restore) it as well on a GPU
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
                torch.manual_seed(seed)
                out = self.model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                          generation_config=self.gen,
                                          output_scores=True, return_dict_in_generate=True)
        finally:
            self.model.train(was_training)
        completion_ids, logprobs = cut_completions(out.sequences[:, width:], out.scores, self.eos)
        t1 = time.perf_counter()
        self.spans.append({"name": "generate", "stage": "generate", "start": t0, "end": t1})
        return {"completion_ids": completion_ids, "logprobs": logprobs}
