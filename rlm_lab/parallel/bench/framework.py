"""The distributed calibration's shared pieces: the hidden-16 models it measures, and how a profile's
``distributed`` section is found (in the profile, or in its companion file) and applied at a rank's thread count.

Measured by :mod:`rlm_lab.calibrate.dist_benchmarks`; used by :mod:`rlm_lab.parallel.bench.step_time`. Kept apart
from both so that neither imports the other's module back (the predictor must not import the calibration
that is fitted with it).
"""

from __future__ import annotations

import json

from ...cost.hardware import HARDWARE_DIR, load_profile
from ...cost.spec import spec_from_dict
from ...errors import RlmLabError
from ...models.tokenizer import ALPHABET, SPECIALS
from ...models.zoo import ZooSpec

COMPANION_DIR = HARDWARE_DIR / "distributed"
BATCH, SEQ = 4, 8
DEPTHS = (1, 4)
PP_DEPTH = 2


def tiny(layers: int, moe: bool = False):
    """A hidden-16 zoo-shaped model (``ZooSpec``): compute ~0, every framework call still made."""
    if moe:
        return ZooSpec(16, layers, 2, 2, 32, arch="mixtral", experts=4, top_k=2, max_positions=64)
    return ZooSpec(16, layers, 2, 2, 32, max_positions=64)


def spec_of(zoo_spec):
    """The cost model's ModelSpec of a ``ZooSpec`` (the zoo's tokenizer vocabulary)."""
    z = zoo_spec
    cfg = dict(model_type=z.arch, vocab_size=len(SPECIALS) + len(ALPHABET), hidden_size=z.hidden,
               num_hidden_layers=z.layers, num_attention_heads=z.heads, num_key_value_heads=z.kv_heads,
               intermediate_size=z.intermediate, tie_word_embeddings=False)
    if z.arch == "mixtral":
        cfg |= dict(num_local_experts=z.experts, num_experts_per_tok=z.top_k)
    return spec_from_dict(cfg, f"tiny-{z.arch}-L{z.layers}")


def distributed_section(profile) -> tuple[dict, str | None]:
    """(the profile's ``distributed`` section, where it came from): the profile itself, its companion file
    ``data/hardware/distributed/<name>.json``, or ({}, None)."""
    prof = load_profile(profile)
    if prof.distributed:
        return prof.distributed, f"profile {prof.name}"
    path = COMPANION_DIR / f"{prof.name}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())["distributed"], str(path.relative_to(HARDWARE_DIR.parents[1]))
        except (json.JSONDecodeError, KeyError) as e:
            raise RlmLabError(f"{path} is not a distributed calibration ({e})") from None
    return {}, None


def at_threads(profile, threads: int | None):
    """(profile with the rates measured at ``threads`` torch threads, the thread count those rates were
    measured with). Unchanged when the profile was calibrated with ``threads`` or has no such entry."""
    prof = load_profile(profile)
    if threads is None or threads == prof.threads:
        return prof, prof.threads
    sec, _ = distributed_section(prof)
    entry = sec.get("threads", {}).get(str(threads))
    if not entry:
        return prof, prof.threads
    d = prof.to_dict()
    # the dtypes measured at ``threads`` (fp32 on CPU) replace the profile's; others (bf16 autocast) are kept
    d["matmul_curve"] = d["matmul_curve"] | entry["matmul_curve"]
    d["matmul_flops"] = d["matmul_flops"] | entry["matmul_flops"]
    d["overhead"] = d["overhead"] | entry["overhead"]
    d["kernels"] = d["kernels"] | entry.get("kernels", {})
    d["threads"] = threads
    d["name"] = f"{prof.name}@{threads}thread"
    return load_profile(d), threads
