"""The survey's three families (arXiv 2608.27046 Sec. 2.4, Table 4) at one scale, predicted: PPO, GRPO and DPO on
Qwen2.5-1.5B with B = 128 prompts x K = 8 samples of S = 512 + T = 2048 tokens (DPO: 512 preference pairs, the same
1024 scored sequences), 8 H100s (datasheet profile), ZeRO-3, bf16-mixed, gradient checkpointing, micro-batches of 4,
a continuous engine for the two that generate.

Per family: the models held, the work per phase in FLOPs as the book counts it (its real GQA / SwiGLU model, full score
matrix), Table 4's work in the survey's convention (cost/paper.py: MHA, d_ff = 3I/2, half score matrix; DPO with
Algorithm 4's two sequences per pair), the depth (seconds on unboundedly many devices: the chain no device count
splits) and the model state per device. Predictions only: nothing here is measured.
"""

from __future__ import annotations

from pathlib import Path

from ...cost import predict
from ...cost.paper import dpo_work, grpo_work, paper_dims, ppo_work
from ...cost.spec import model_spec
from ...stages import Stage

S_ = Stage
REPO = Path(__file__).resolve().parents[3]
MODEL = REPO / "configs/models/qwen2.5-1.5b.config.json"
B, K, S, T = 128, 8, 512, 2048
FAMILIES = ("ppo", "grpo", "dpo")
PROFILE = "h100-sxm"
PHASE = {S_.PREFILL: "generation", S_.DECODE: "generation", S_.OLD_LOGPROB: "assessment",
         S_.REF_LOGPROB: "assessment", S_.REWARD: "assessment", S_.VALUES: "assessment", S_.ADVANTAGE: "assessment",
         S_.ACTOR_FORWARD: "training", S_.ACTOR_BACKWARD: "training", S_.OPTIMIZER: "training",
         S_.CRITIC_UPDATE: "training", S_.WEIGHT_SYNC: "training"}


def workload(family: str) -> dict:
    base = dict(prompt_len=S, response=T, precision="bf16-mixed", devices=8, zero_stage=3, micro_batch=4,
                gradient_checkpointing=True)
    if family == "dpo":
        return base | dict(prompts=B * K // 2, group_size=2)
    return base | dict(prompts=B, group_size=K, engine="continuous")


def paper_work(family: str) -> dict:
    p = paper_dims(model_spec(str(MODEL)))
    if family == "dpo":
        return dpo_work(p, B * K // 2, S, T)
    return (ppo_work if family == "ppo" else grpo_work)(p, B, K, S, T)


def families_table(profile: str = PROFILE) -> list[dict]:
    """One row per family (module docstring)."""
    rows = []
    for fam in FAMILIES:
        pred = predict(str(MODEL), fam, workload(fam), profile)
        work = {"generation": 0.0, "assessment": 0.0, "training": 0.0}
        for r in pred.rows:
            work[PHASE[r.stage]] += r.flops
        paper = sum(paper_work(fam).values())
        book = sum(work.values())
        st = pred.persistent
        rows.append({"family": fam, "models": ", ".join(pred.algo.models),
                     "gen_PFLOP": work["generation"] / 1e15, "assess_PFLOP": work["assessment"] / 1e15,
                     "train_PFLOP": work["training"] / 1e15, "book_PFLOP": book / 1e15,
                     "paper_PFLOP": float(paper) / 1e15, "book_over_paper": book / float(paper),
                     "depth_s": pred.depth, "critical_path": " -> ".join(pred.critical_path()),
                     "state_GiB_per_device": (st.weights + st.optimizer) / 2 ** 30})
    return rows
