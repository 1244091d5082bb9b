"""Chapter 7's sizes: how many prompts, rows and repeats each technique's measurement uses.

Kept here (not in ``rlm_lab.sizes``) while the chapter is built; ``check_size`` still names the sizes."""

from __future__ import annotations

from ..sizes import check_size

_P = {
    "smoke": dict(model="nano", task="chain:steps=5", pool=64, n=4, n_prime=6, op_steps=2, batch=4, rounds_n=16,
                  tail_fraction=0.25, workers=2, dispatch_n=6, pack_n=8, micro=4, groups=6, group_size=4,
                  fusion_n=6, reps=1),
    "cpu": dict(model="micro", task="chain:steps=8", pool=1024, n=16, n_prime=24, op_steps=8, batch=16,
                rounds_n=128, tail_fraction=0.25, workers=4, dispatch_n=64, pack_n=64, micro=8, groups=32,
                group_size=8, fusion_n=32, reps=3),
    "gpu": dict(model="small", task="chain:steps=12", pool=8192, n=64, n_prime=96, op_steps=16, batch=64,
                rounds_n=1024, tail_fraction=0.25, workers=8, dispatch_n=512, pack_n=256, micro=16, groups=128,
                group_size=8, fusion_n=128, reps=3),
}


def params(size: str) -> dict:
    return dict(_P[check_size(size)])
