"""The stages of one RL-for-LLM iteration: one vocabulary for the cost model, the tracer,
the run record and the plots, so that predicted and measured numbers join on the same key.

Stage list after HybridFlow (arXiv 2409.19256, Sec. 2.1: generation, preparation, training)
refined as in verl and OpenRLHF (arXiv 2405.11143); the models each algorithm holds follow
InstructGPT (arXiv 2203.02155, PPO) and DeepSeekMath (arXiv 2402.03300, GRPO).
"""

from enum import Enum


class Stage(str, Enum):
    GENERATE = "generate"          # rollout: prefill + decode (measured as one span)
    PREFILL = "prefill"            # cost model only: the prompt pass of generation
    DECODE = "decode"              # cost model only: token-by-token generation
    OLD_LOGPROB = "old_logprob"    # log-probs under the behaviour policy (recomputed)
    REF_LOGPROB = "ref_logprob"    # log-probs under the frozen reference model
    REWARD = "reward"              # verifier functions or a reward model forward
    VALUES = "values"              # critic forward (PPO only)
    ADVANTAGE = "advantage"        # group z-score (GRPO/RLOO) or GAE (PPO)
    ACTOR_FORWARD = "actor_forward"
    ACTOR_BACKWARD = "actor_backward"
    OPTIMIZER = "optimizer"        # optimizer.step() (actor, and critic for PPO)
    CRITIC_UPDATE = "critic_update"  # critic forward + backward (PPO only)
    WEIGHT_SYNC = "weight_sync"    # training weights -> generation engine

    def __str__(self) -> str:  # print as the plain name in tables
        return self.value


# The order stages appear in within one synchronous step (tables and Gantt rows of the tracer and the plots).
STAGE_ORDER = (Stage.WEIGHT_SYNC, Stage.GENERATE, Stage.OLD_LOGPROB, Stage.REF_LOGPROB, Stage.REWARD,
               Stage.VALUES, Stage.ADVANTAGE, Stage.ACTOR_FORWARD, Stage.ACTOR_BACKWARD, Stage.CRITIC_UPDATE,
               Stage.OPTIMIZER)

# Which models each algorithm holds (HybridFlow arXiv 2409.19256 Sec. 2.1; InstructGPT arXiv 2203.02155; DeepSeekMath arXiv 2402.03300). "verifier" is a rule, not a network.
MODELS_HELD = {
    "ppo": ("actor", "critic", "reference", "reward"),
    "grpo": ("actor", "reference", "verifier"),
    "rloo": ("actor", "reference", "verifier"),
    "reinforce_pp": ("actor", "reference", "verifier"),
    "dapo": ("actor", "verifier"),
    # DPO (Rafailov et al. arXiv 2305.18290; the survey arXiv 2608.27046 Sec. 2.4 and Algorithm 4): a trainable
    # policy and a frozen reference over stored preference pairs; no rollout, no reward model, no critic.
    "dpo": ("actor", "reference"),
}

# Algorithms that train on stored data (preference pairs) instead of generating their own samples: no rollout,
# no reward, no advantage, no weight sync (the survey arXiv 2608.27046 Table 4: DPO has no generation column).
OFFLINE = frozenset({"dpo"})
