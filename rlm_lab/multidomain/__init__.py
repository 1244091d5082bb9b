"""Multi-domain RLVR (chapter 10): GRPO on a mixture of the book's tasks against separate per-task runs merged.

The mixture itself is a task (:class:`rlm_lab.tasks.Mix`: tagged prompts, a verifier that routes by task), so
the book's SFT, GRPO (TRL, LoRA through TRL's ``peft_config``), records and evaluation serve it unchanged.
:mod:`.merge`: the separate runs' LoRA adapters merged with PEFT's ``add_weighted_adapter`` (linear, TIES, DARE,
and the exact concatenation); :mod:`.evaluate`: accuracy task by task.

After "To Mix or To Merge: Toward Multi-Domain Reinforcement Learning for Large Language Models" (Wang, Long, Li,
Xu, Li, Tang; arXiv 2602.12566), at toy scale: four arithmetic-flavoured tasks instead of math, code, science,
instruction following and agents; LoRA adapters instead of full weights.
"""

from .evaluate import balanced_rows, per_task
from .merge import LORA, METHODS, check_methods, folded, lora_config, merged_model

__all__ = ["LORA", "METHODS", "balanced_rows", "check_methods", "folded", "lora_config", "merged_model", "per_task"]
