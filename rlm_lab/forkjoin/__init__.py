"""Fork-join reasoning on a transformers model, trained through TRL (chapter 10).

:mod:`.layout` (pure Python): a fork-join trace's requests (outline, branches, join) and their trie row, the row
that reproduces every request's context in one sequence; :mod:`.trie`: that row as a 4-D attention mask and
position ids, hooked into the model's backbone for training and scoring; :mod:`.generate`: the branches of
every trace decoded concurrently, as one batched ``generate`` call, between the outline and the join;
:mod:`.sft`: trie rows for TRL's ``SFTTrainer``; :mod:`.rollout`: the same decoder as GRPOTrainer's
``rollout_func``, with the reward read off the trace.

After ThreadWeaver (Lian et al., arXiv 2512.07843: fork-join traces, trie-based training, P-GRPO) and Parason
(Zhang et al., code release https://github.com/ZhengyangZhang06/Parason-release: the same reward, subtask and
trial parallelism), at toy scale: one character per tag, branches known from the outline.
"""

from .generate import Batch, Decoded, Limits, fork_join_generate, sequential_generate, text
from .layout import Segments, Tags, completion, loss_mask, plan
from .rollout import ForkJoinRollout, on_trace

__all__ = ["Batch", "Decoded", "ForkJoinRollout", "Limits", "Segments", "Tags", "completion", "fork_join_generate",
           "loss_mask", "on_trace", "plan", "sequential_generate", "text"]
