"""PPO's configuration: ``trl.GRPOConfig`` plus PPO's knobs, and one clear error for every GRPOConfig option that
:class:`rlm_lab.train.ppo.PPOTrainer` would otherwise silently ignore.

Which options are ignored was read from TRL 1.16's ``GRPOTrainer._compute_loss`` and the advantage part of
``_generate_and_score_completions`` (the two methods PPO replaces): the loss variants (``loss_type`` other than the
normalisations implemented here, SAPO/VESPO/CISPO/LUSPO), entropy masking (``top_entropy_quantile``, Wang et al.
arXiv 2506.01939) and entropy bonuses, sequence-level importance ratios (GSPO, arXiv 2507.18071), two-sided
clipping (``delta``), off-policy masking, vLLM importance-sampling correction, and GRPO's reward normalisation
(``scale_rewards``, ``multi_objective_aggregation``). Each is refused unless it is at the value where ignoring it
changes nothing. ``fp16`` on CPU is refused too: accelerate 1.15 creates no ``GradScaler`` and no fp16 autocast on
a CPU device (``Accelerator.__init__``), so the run would silently be fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from ..errors import RlmLabError

REWARD_SOURCES = ("verifier", "reward_model")
# The model structure of the critic (the cost model's ``critic`` argument, rlm_lab.cost.workload.SHARED): a separate
# value model, or a value head on the policy's backbone (rlm_lab.train.shared_critic).
CRITIC_STRUCTURES = ("separate", "shared")
# Schedules the Trainer steps on evaluation metrics, not per optimizer step (transformers Trainer's training loop).
METRIC_SCHEDULES = ("reduce_lr_on_plateau", "greedy")
# The token-loss normalisations PPO implements, named as TRL's ``loss_type`` (grpo_trainer.py ``_compute_loss``):
# "bnpo" = mean over the micro-batch's tokens; "dapo" = sum over tokens / tokens of the whole accumulated batch.
LOSS_TYPES = ("dapo", "bnpo")
# GRPOConfig options read by the GRPOTrainer methods PPO overrides (``_compute_loss``, the advantage part of
# ``_generate_and_score_completions``) and by nothing else, with the value at which ignoring them is harmless;
# any other value is refused. (option, harmless value, what it is)
IGNORED_OPTIONS = (
    ("top_entropy_quantile", 1.0, "token masking by entropy (Wang et al. arXiv 2506.01939)"),
    ("importance_sampling_level", "token", "sequence-level importance ratios (GSPO, arXiv 2507.18071)"),
    ("delta", None, "two-sided clipping of the ratio"),
    ("off_policy_mask_threshold", None, "off-policy sequence masking"),
    ("entropy_coef", 0.0, "an entropy bonus in the loss"),
    ("use_adaptive_entropy", False, "an adaptive entropy bonus"),
    ("scale_rewards", "group", "GRPO's reward normalisation (PPO's baseline is the critic)"),
    ("multi_objective_aggregation", "sum_then_normalize", "normalising each reward function before the sum"),
)


@dataclass
class PPOConfig(GRPOConfig):
    """GRPOConfig plus PPO's knobs. ``beta`` is the per-token KL penalty *in the reward* (not in the loss)."""

    beta: float = field(default=0.05, metadata={"help": "KL coefficient in the per-token reward r_t = -beta*KL_t."})
    gamma: float = field(default=1.0, metadata={"help": "Discount over completion tokens."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss in the critic's loss."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip of the value change per update."})
    critic_learning_rate: float | None = field(
        default=None, metadata={"help": "Critic AdamW learning rate (default: learning_rate)."})
    whiten_advantages: bool = field(default=True, metadata={"help": "Normalise advantages over the batch."})
    reward_source: str = field(default="verifier", metadata={"help": "verifier | reward_model"})
    reward_model_path: str | None = field(
        default=None, metadata={"help": "Folder of a sequence-classification reward model (reward_model)."})
    value_model_path: str | None = field(
        default=None, metadata={"help": "Folder/hub id of the critic; default: built from the policy."})

    critic: str = field(default="separate", metadata={
        "help": "separate (a value model of its own) | shared (a value head on the policy's backbone, one backward)"})

    def __post_init__(self):
        super().__post_init__()
        if self.critic not in CRITIC_STRUCTURES:
            raise RlmLabError(f"unknown critic {self.critic!r}; choose one of: {', '.join(CRITIC_STRUCTURES)}")
        if self.critic == "shared" and self.value_model_path:
            raise RlmLabError("critic='shared' puts the value head on the policy's backbone; it takes no "
                              "value_model_path")
        if self.reward_source not in REWARD_SOURCES:
            raise RlmLabError(f"unknown reward_source {self.reward_source!r}; choose one of: {', '.join(REWARD_SOURCES)}")
        if self.reward_source == "reward_model" and not self.reward_model_path:
            raise RlmLabError("reward_source='reward_model' needs reward_model_path=<folder>; train one with "
                              "rlm_lab.train.reward_model.train_reward_model")
        if not (0.0 < self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise RlmLabError(f"PPO needs 0 < gamma <= 1 and 0 <= lam <= 1, got gamma={self.gamma}, lam={self.lam}")
        if self.cliprange_value <= 0 or self.vf_coef <= 0:
            raise RlmLabError("PPO needs cliprange_value > 0 and vf_coef > 0")
        if self.critic_learning_rate is None:
            self.critic_learning_rate = self.learning_rate
        self._refuse_ignored_options()

    def _refuse_ignored_options(self) -> None:
        """One clear error for a GRPOConfig option this PPO would silently ignore (module doc)."""
        if self.loss_type not in LOSS_TYPES:
            raise RlmLabError(f"PPO implements loss_type {' or '.join(map(repr, LOSS_TYPES))}, not "
                              f"{self.loss_type!r} (a GRPO variant's loss)")
        if self.fp16 and self.use_cpu:
            raise RlmLabError("fp16 on CPU: accelerate 1.15 neither autocasts nor scales the loss on a CPU device, so "
                              "the run would silently be fp32; use fp16=False (and bf16=False) on CPU")
        if str(getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)) in METRIC_SCHEDULES:
            raise RlmLabError(f"lr_scheduler_type {self.lr_scheduler_type!r} steps on evaluation metrics; PPO's critic "
                              "follows the actor's per-step schedule, so choose a per-step one (e.g. linear, constant)")
        if self.use_vllm and self.vllm_importance_sampling_correction:
            raise RlmLabError("PPO does not apply vLLM importance-sampling correction; set "
                              "vllm_importance_sampling_correction=False (or use_vllm=False)")
        for name, harmless, what in IGNORED_OPTIONS:
            value = getattr(self, name)
            if value != harmless:
                raise RlmLabError(f"PPO ignores {name} ({what}); leave it at {harmless!r}, got {value!r}")
