"""Generation controls for transformers' ``generate`` that its own options do not give.

:func:`force_lengths_class` returns ``ForceLengths``, a ``transformers.LogitsProcessor``
(https://huggingface.co/docs/transformers/main/en/internal/generation_utils#logitsprocessor) that makes row i
emit exactly R_i tokens, the last one EOS: chapter 3 forces the response lengths it measures the decode loop
at, chapter 7's engine forces each row to its problem's answer length. The class is defined inside the
function so that importing this module needs neither torch nor transformers (the package's lazy-import rule).
"""

from __future__ import annotations


def force_lengths_class():
    """The ``ForceLengths`` logits processor; a class built here because its base, transformers'
    ``LogitsProcessor``, is not imported at this module's top."""
    import torch
    from transformers import LogitsProcessor

    class ForceLengths(LogitsProcessor):
        """Row i emits exactly R_i tokens, the last one EOS: EOS is banned before step R_i and forced at it.

        Hand-written because transformers' min/max_new_tokens are per call, not per row."""

        def __init__(self, lengths, prompt_len: int, eos: int):
            self.lengths = torch.tensor(lengths)
            self.prompt_len, self.eos = prompt_len, eos

        def __call__(self, input_ids, scores):
            if self.lengths.device != scores.device:  # once, on a GPU run
                self.lengths = self.lengths.to(scores.device)
            step = input_ids.shape[1] - self.prompt_len + 1  # the token being chosen is number ``step``
            early = self.lengths > step
            scores[early, self.eos] = float("-inf")
            last = self.lengths == step
            if last.any():
                scores[last] = float("-inf")
                scores[last, self.eos] = 0.0
            return scores

    return ForceLengths
