"""The cost model: FLOPs, bytes, memory, time, work and depth of one RL-for-LLM iteration.

Formulas and sources: each module's docstring cites its own primary sources (arXiv ids, DOIs,
documentation URLs); the book's bibliography, book/references.bib, lists them all. No torch import here, not even inside a function (tests/test_layers.py checks it): the benchmarks that measure a machine are in :mod:`rlm_lab.calibrate`.

Main entry points::

    predict(model, algo, workload, profile) -> Prediction     (predict.py)
    model_spec(name_or_config) -> ModelSpec                     (spec.py)
    load_profile(name_or_path) -> HardwareProfile               (hardware.py)
    decode_step_time(spec, batch, context, profile)             (timing.py)
    generate_time(spec, profile, prompt_len, lengths, batch)    (timing.py)
    collective_time(op, nbytes, world, profile, nodes=1)        (comm.py; Topology, RankSpan)
    Engine(...).drain(lengths) / .stream(lengths, cap)          (engine.py: vLLM/SGLang-style continuous batching)
    tail_bubble(lengths), dynamic_sampling_inflation(p, G)      (workdepth.py)
    predict_placement(placement, model, algo, workload, profile, cluster, mode="sync", eta=None)
        -> PlacementPrediction (.step_s in its mode, .sync_step_s, .in_mode(mode, eta))     (placement.py, modes.py)
    advise(model, algo, workload, cluster, profile, modes=("sync",), eta=None) -> Advice     (advise.py)
    apply_assumptions(profile, {"eta_F": 0.5, ...}) -> HardwareProfile                       (assumed.py)
    Lora(rank, targets), lora_params(spec, lora)                 (lora.py)
"""

from .comm import OPS, bytes_per_rank, collective_time, ring_factor
from .hardware import HardwareProfile, known_profiles, load_profile
from .memory import MemoryBreakdown
from .predict import Prediction, StageCost, predict
from .spec import ModelSpec, model_spec, scalar_head, spec_from_config, spec_from_dict
from .timing import backward_time, decode_step_time, forward_time, generate_time
from .workdepth import WorkDepth, dynamic_sampling_inflation, tail_bubble
from .workload import Algorithm, ResponseLengths, Workload, algorithm, workload_from_dict
from .lora import Lora, lora_params
from .placement import PlacementPrediction, predict_placement
from .advise import Advice, advise, kendall_tau, regret

__all__ = [
    "Advice", "Lora", "PlacementPrediction", "advise", "kendall_tau", "lora_params", "predict_placement", "regret",
    "OPS", "Algorithm", "HardwareProfile", "MemoryBreakdown", "ModelSpec", "Prediction", "ResponseLengths",
    "StageCost", "WorkDepth", "Workload", "algorithm", "bytes_per_rank", "collective_time", "decode_step_time",
    "dynamic_sampling_inflation", "forward_time", "generate_time", "backward_time", "known_profiles", "load_profile", "model_spec", "predict",
    "ring_factor", "scalar_head", "spec_from_config", "spec_from_dict", "tail_bubble", "workload_from_dict",
]
