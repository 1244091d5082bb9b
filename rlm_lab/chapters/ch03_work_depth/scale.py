"""Chapter 3's prediction at scale: a GRPO iteration of a Qwen2.5-1.5B-shaped actor on H200s, against
Brent's bounds from the one-device work and depth. Prediction only; it rests on the profile's assumptions."""

from __future__ import annotations

from ...cost import Workload, predict
from ...cost.workload import ResponseLengths

# ---- depth at scale (prediction only) -----------------------------------------------------------------

# Qwen2.5-1.5B's shape (its config.json on the Hugging Face Hub, Qwen/Qwen2.5-1.5B).
QWEN25_1_5B = {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "num_hidden_layers": 28,
               "num_attention_heads": 12, "num_key_value_heads": 2, "intermediate_size": 8960,
               "tie_word_embeddings": True, "_name_or_path": "Qwen2.5-1.5B (shape only)"}


def scaling(profile: str = "h200", devices=(1, 2, 4, 8, 16, 32, 64), model=None) -> list[dict]:
    """Predicted GRPO iteration time on p data-parallel devices against Brent's bounds from the
    one-device work and depth (a worked example: B = 32 prompts, G = 8, P = 256, lognormal
    lengths with median 690 and mean ~946, clipped at 4096; continuous-batching engine). Prediction only."""
    spec = model or QWEN25_1_5B
    resp = ResponseLengths("lognormal", median=690, sigma=0.794, max=4096)

    def wl(p):
        return Workload(prompts=32, group_size=8, prompt_len=256, response=resp, micro_batch=8, gen_batch=256,
                        recompute_old=True, precision="bf16-mixed", engine="continuous", devices=p)

    base = predict(spec, "grpo", wl(1), profile)
    rows = []
    for p in devices:
        pred = predict(spec, "grpo", wl(p), profile)
        lower, upper = base.brent(p)
        rows.append({"devices": p, "predicted_s": pred.total_time if pred.fits else float("nan"),
                     "lower_s": lower, "upper_s": upper, "work_s": base.work, "depth_s": base.depth,
                     "critical_path": " -> ".join(base.critical_path())})
    return rows
