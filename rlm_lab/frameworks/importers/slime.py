"""slime (github.com/THUDM/slime): a run script's ``train.py`` / ``train_async.py`` command, its shell variables and
arrays expanded (:mod:`.shell`, nothing run), read by the kinds of slime's own parser (``configs/frameworks/slime/
options.txt``, from slime/utils/arguments.py at a pinned commit) and mapped onto the predictor's run:

- ``--actor-num-nodes`` x ``--actor-num-gpus-per-node``: the trainer's GPUs (Megatron, ``--tensor-model-parallel-size``
  and ``--expert-model-parallel-size``, ``--pipeline-model-parallel-size`` the set's pp: 1F1B stages, resharded into
  the engines' TP when colocated; context parallelism > 1 refused in one line);
- ``--colocate``: the SGLang engines on the trainer's GPUs (slime then offloads each side while the other runs), else
  ``--rollout-num-gpus`` GPUs of their own with weights broadcast after each update; ``--rollout-num-gpus-per-engine``
  is the engines' TP, ``--sglang-mem-fraction-static`` their memory share;
- ``--rollout-batch-size`` prompts x ``--n-samples-per-prompt``, ``--global-batch-size`` samples per optimizer step
  (slime's help: "the gbs is of sample, not of prompts"), ``--micro-batch-size`` or ``--use-dynamic-batch-size`` with
  ``--max-tokens-per-gpu``; ``--recompute-granularity`` full or selective: activation checkpointing;
- ``--advantage-estimator`` grpo, gspo, cispo (GRPO's cost), reinforce_plus_plus(_baseline); ppo: PPO with a rule
  reward (a verifier, no reward model), the critic on the actor's GPUs as slime places it;
- a reference model is loaded when ``--use-kl-loss`` or ``--kl-coef`` != 0 (slime's validate_args), even at a zero
  coefficient: then it is priced (said).

``train_async.py`` starts rollout k+1 before training on rollout k (its loop at the pinned commit; colocation
asserted off): mode one_step_off, eta 1. slime's fully asynchronous example (examples/full_async) is not read.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from ...errors import RlmLabError
from .common import (Key, Keys, capped_response, finish, load_options, mean_response, read_key, resolve_model, roles_of,
                     set_dict, text_int, text_num)
from .shell import commands

NAME = "slime"
MAINS = {"train.py": "sync", "train_async.py": "one_step_off"}
ESTIMATORS = {"grpo": "grpo", "gspo": "grpo", "cispo": "grpo", "reinforce_plus_plus": "reinforce_plus_plus",
              "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline"}
DEFAULT_PROMPT = 512
NOTES = {"hf-checkpoint": "the model (its name)", "ref-load": "checkpoints", "load": "checkpoints", "save": "checkpoints",
         "save-interval": "checkpoints", "prompt-data": "data location", "eval-*": "evaluation (not in a step)",
         "n-samples-per-eval-prompt": "evaluation (not in a step)", "lr*": "optimizer hyper-parameters do not change "
         "the step's cost", "adam-*": "optimizer hyper-parameters do not change the step's cost",
         "use-wandb": "logging", "wandb-*": "logging"}


def words_from_script(path: str) -> tuple[list[str], str]:
    """The words after slime's ``train.py`` (or ``train_async.py``) in the script, and which of the two it runs."""
    p = Path(path)
    if not p.is_file():
        raise RlmLabError(f"slime script {path} not found")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RlmLabError(f"slime script {path} is not a text file (byte {e.start} is not UTF-8)") from None
    for words, _ in commands(text, f"slime script {path}"):
        main = next((w for w in words if Path(w).name in MAINS), None)
        if main is not None:
            return words[words.index(main) + 1:], Path(main).name
    raise RlmLabError(f"slime script {path} runs no slime train.py or train_async.py command")


def parse(words: list[str]) -> dict:
    """``--a 1 --flag --pair x y`` -> {"a": "1", "flag": True, "pair": ["x", "y"]} by slime's parser's kinds."""
    kinds = load_options(NAME, kinds=True)
    out, i = {}, 0
    while i < len(words):
        tok = words[i]
        if not tok.startswith("--"):
            raise RlmLabError(f"slime arguments: {tok!r} follows no option that takes a value")
        name, eq, val = tok[2:].partition("=")
        i += 1
        if eq:
            out[name] = val
            continue
        kind = kinds.get(name, "value" if name.startswith("sglang-") else None)
        if kind == "flag":
            out[name] = True
            continue
        values = []
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
            if kind == "value":
                break
        if kind is not None and not values:
            raise RlmLabError(f"slime --{name} needs a value")
        out[name] = True if not values else values[0] if len(values) == 1 else values
    return out


# ---- the key tables: (option, field, kind, default, what it sets); read in order, refusals name "slime --option" --
INT, NUM, TEXT, RAW = text_int(1), text_num(), (lambda v, _label, _choices: str(v)), "raw"
CP = Key("context-parallel-size", "cp", INT, 1, "checked: 1")
PP = Key("pipeline-model-parallel-size", "pp", INT, 1, "training pp (Megatron's 1F1B stages)")
ESTIMATOR = Key("advantage-estimator", "est", TEXT, "grpo", "algorithm")
KL = (Key("use-kl-loss", "kl_loss", RAW, False, "the reference model is loaded"),
      Key("kl-loss-coef", "beta", NUM, 0.0, "beta"), Key("kl-coef", "beta", NUM, 0.0, "beta"))
BATCH = (Key("rollout-batch-size", "prompts", INT, None, "workload.prompts"),
         Key("n-samples-per-prompt", "group", INT, 1, "workload.group_size"))
GLOBAL_BATCH = Key("global-batch-size", "gbs", INT, None, "samples per optimizer step -> workload.minibatches")
RESPONSE = Key("rollout-max-response-len", "cap", INT, None, "workload.response (the cap's assumed distribution)")
PROMPT = Key("rollout-max-prompt-len", "prompt_len", INT, DEFAULT_PROMPT, "workload.prompt_len (the cap)",
             assumed=f"prompts of {DEFAULT_PROMPT} tokens (slime's script sets no --rollout-max-prompt-len; pass "
                     f"--prompt-len)")
DYNAMIC = (Key("use-dynamic-batch-size", "dynamic", RAW, False, "micro-batches by tokens"),
           Key("max-tokens-per-gpu", "tokens", INT, None, "workload.micro_batch = tokens / mean sequence length"))
MICRO = Key("micro-batch-size", "micro_batch", INT, 1, "workload.micro_batch")
RECOMPUTE = Key("recompute-granularity", "granularity", RAW, None, "workload.gradient_checkpointing")
TRAINING = (Key("tensor-model-parallel-size", "tp", INT, 1, "training tp"),
            Key("expert-model-parallel-size", "ep", INT, 1, "training ep"))
DEVICES = (Key("actor-num-nodes", "nodes", INT, 1, "trainer GPUs = nodes x GPUs per node"),
           Key("actor-num-gpus-per-node", "per_node", INT, 8, "trainer GPUs = nodes x GPUs per node"),
           Key("rollout-num-gpus-per-engine", "gen_tp", INT, 1, "generation tp (GPUs per SGLang engine)"),
           Key("sglang-mem-fraction-static", "memory_fraction", NUM, 0.9, "the engine's memory share (KV cache)"))
COLOCATE = Key("colocate", "colocate", RAW, False, "the engines on the trainer's GPUs (offloaded in turn)")
ROLLOUT_GPUS = Key("rollout-num-gpus", "rollout", INT, None, "the engines' GPUs (a set of their own)")


def _read(k: Keys, row: Key, assumed: list | None = None):
    return read_key(k, row, assumed, label="slime --{}")


# ---- derived values ---------------------------------------------------------------------------------------
def _words(arg: str) -> tuple[str, list, str]:
    """(source, the words after train.py, which main runs): a command line or a run script."""
    arg = arg.strip()
    if not arg.startswith("-"):
        words, main = words_from_script(arg)
        return arg, words, main
    try:
        return "arguments", shlex.split(arg, comments=True), "train.py"
    except ValueError as e:
        raise RlmLabError(f"slime arguments do not split as a shell line ({e})") from None


def _algorithm(k: Keys, assumed: list) -> tuple[int, str, str]:
    """(pp, algorithm, scoring); refused: context parallelism, an estimator with no predictor algorithm."""
    if _read(k, CP) > 1:
        raise RlmLabError(f"slime --context-parallel-size {k.flat['context-parallel-size']}: context parallelism is "
                          f"not modelled by the predictor")
    pp = _read(k, PP)
    est = _read(k, ESTIMATOR)
    if est not in ESTIMATORS and est != "ppo":
        raise RlmLabError(f"slime --advantage-estimator {est!r} has no predictor algorithm; known: "
                          f"{', '.join([*ESTIMATORS, 'ppo'])}")
    # slime's PPO (arguments.py: use_critic when the estimator is ppo) trains a critic on the actor's GPUs (the
    # actor's placement group, placement_group.py) and scores with a rule: PPO with reward "rule"
    algo, scoring = ("ppo", "rule") if est == "ppo" else (ESTIMATORS[est], "model")
    if scoring == "rule":
        assumed.append("slime PPO: the critic on the actor's GPUs with the actor's shape, a rule reward (no reward "
                       "model); slime offloads each trainer while the other runs, priced as both resident")
    return pp, algo, scoring


def _beta(k: Keys, assumed: list) -> float | None:
    """--kl-loss-coef, else --kl-coef; None (the predictor's default beta) when --use-kl-loss keeps a zero-coefficient
    reference (slime's validate_args loads and scores it)."""
    kl_loss = _read(k, KL[0]) is True
    beta = _read(k, KL[1]) or _read(k, KL[2])
    if kl_loss and beta == 0:
        assumed.append("--use-kl-loss with a zero coefficient: slime still loads and scores the reference model "
                       "(validate_args), so it is priced")
        return None
    return beta


def _workload(k: Keys, assumed: list) -> tuple[dict, int]:
    """(workload, samples of a rollout): batch, caps, micro-batches, activation checkpointing."""
    b = {row.field: _read(k, row) for row in BATCH}
    n = b["prompts"] * b["group"]
    gbs = _read(k, replace(GLOBAL_BATCH, default=n))
    if n % gbs:
        raise RlmLabError(f"slime --global-batch-size {gbs} must divide the {n} samples of a rollout "
                          f"(--rollout-batch-size x --n-samples-per-prompt)")
    if k.get("rollout-max-response-len") is None:
        raise RlmLabError("slime arguments need --rollout-max-response-len (the response cap the predictor prices)")
    response = capped_response(_read(k, RESPONSE), "--rollout-max-response-len", assumed)
    prompt_len = _read(k, PROMPT, assumed)
    wl = {"prompts": b["prompts"], "group_size": b["group"], "prompt_len": prompt_len, "response": response,
          "minibatches": n // gbs, "epochs": 1, "precision": "bf16-mixed", "engine": "continuous"}
    assumed.append("bf16 mixed precision (slime's scripts pass --bf16 in the model arguments they source)")
    if _read(k, DYNAMIC[0]) is True:
        tokens = _read(k, DYNAMIC[1])
        wl["micro_batch"], wl["padding"] = max(1, int(tokens // (prompt_len + mean_response(response)))), "none"
    else:
        wl["micro_batch"] = _read(k, MICRO)
    wl["gradient_checkpointing"] = _read(k, RECOMPUTE) in ("full", "selective")
    return wl, n


def _placement(k: Keys, roles, lay: dict, pp: int, wl: dict, assumed: list) -> dict:
    """The SGLang engines on the trainer's GPUs (--colocate, offloaded in turn) or on --rollout-num-gpus of their own."""
    tp, ep, gen_tp, devices = lay["tp"], lay["ep"], lay["gen_tp"], lay["nodes"] * lay["per_node"]
    if _read(k, COLOCATE) is True:
        if gen_tp != tp and pp == 1:
            assumed.append(f"generation priced at the training layout (tp {tp}), not the engines' tp {gen_tp}: the "
                           f"predictor reshards only a ZeRO-3 (FSDP) or pipeline-parallel trainer")
        wl["offload"] = ["sleep"]
        return {"name": "colocated",
                "sets": [set_dict("all", devices, tp=tp, ep=ep, key="slime trainer GPUs", pp=pp,
                                  gen_tp=gen_tp if pp > 1 and gen_tp > 1 else 0)],
                "roles": {r: "all" for r in roles}, "sync": "none", "reshard": pp > 1}
    if k.get("rollout-num-gpus") is None:
        raise RlmLabError("slime without --colocate needs --rollout-num-gpus (the SGLang engines' own GPUs)")
    rollout = _read(k, ROLLOUT_GPUS)
    placement = {"name": "disaggregated",
                 "sets": [set_dict("rollout", rollout, tp=gen_tp, key="slime --rollout-num-gpus"),
                          set_dict("train", devices, tp=tp, ep=ep, key="slime trainer GPUs", pp=pp)],
                 "roles": {r: ("rollout" if r == "rollout" else "train") for r in roles}, "sync": "collective",
                 "reshard": False}
    assumed.append("weights broadcast (NCCL) from the trainer to the SGLang engines after each update")
    return placement


def import_config(arg: str, **_):
    source, words, main = _words(arg)
    k = Keys(NAME, parse(words), NOTES)
    assumed: list[str] = []
    pp, algo, scoring = _algorithm(k, assumed)
    if k.get("hf-checkpoint") is None:
        raise RlmLabError("slime arguments need --hf-checkpoint (the policy model's Hugging Face checkpoint)")
    model = resolve_model(Path(str(k.get("hf-checkpoint", to="model (its folder's name)"))).name, "--hf-checkpoint")
    beta = _beta(k, assumed)
    wl, n = _workload(k, assumed)
    lay = {row.field: _read(k, row) for row in TRAINING}
    k.use("sequence-parallel", "with tp: activations split over the tp ranks (priced with tp)")
    k.use("expert-tensor-parallel-size", "checked: experts' tp")
    lay |= {row.field: _read(k, row) for row in DEVICES}
    engine = {"what": "SGLang engine", "memory_fraction": lay["memory_fraction"]}
    placement = _placement(k, roles_of(algo, beta, scoring), lay, pp, wl, assumed)
    engine["max_num_seqs"] = -(-n // max(1, placement["sets"][0]["devices"] // lay["gen_tp"]))
    assumed.append("SGLang's max_running_requests unset: each engine runs its share of the batch, limited only by "
                   "its KV cache")
    mode, eta = MAINS[main], (1 if MAINS[main] == "one_step_off" else 0)
    if mode == "one_step_off" and placement["name"] == "colocated":
        raise RlmLabError("slime train_async.py with --colocate: the asynchronous loop needs the engines on GPUs of "
                          "their own (slime asserts it)")
    cfg = {"model": model, "algorithm": algo, "workload": wl, "placement": placement,
           "cluster": {"devices": sum(s["devices"] for s in placement["sets"]), "kind": "gpu"}} | (
        {"reward": "rule"} if scoring == "rule" else {})
    if beta is not None:
        cfg["beta"] = beta
    return finish(NAME, source, k, cfg, mode, eta, assumed, engine=engine,
                  prompt_cap="--rollout-max-prompt-len" if k.has("rollout-max-prompt-len") else None)
