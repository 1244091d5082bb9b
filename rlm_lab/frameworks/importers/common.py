"""What every importer shares: reading a framework's keys (and telling used, ignored and unknown ones apart),
the model map, the predict config an import produces, and the prediction of the imported run with its mode.

An import is an :class:`Imported`: a predict config (``model``, ``algorithm``, ``hardware``, ``beta``,
``workload``, ``placement`` as a full ``{sets, roles}`` mapping, ``cluster``, ``lora``; the keys of
``rlm-lab predict``, see :mod:`rlm_lab.cost.cli`; and ``reward``: ``rule`` for a PPO scored by a rule, a verifier in
place of the reward model, :func:`import_algorithm`), the execution mode (``sync``, ``one_step_off`` or ``async``
with a staleness bound eta, :mod:`rlm_lab.cost.asynchrony`) and three lists: every key of the framework's config
that the import **used** (and what it set), that it **ignored** (an option the framework has, per its own schema
file shipped as ``configs/frameworks/<framework>/options.txt``, that the predictor does not price) and that it
**did not know** (not in that schema: a typo, or an option newer than the schema). What the predictor cannot
express (context parallelism, ring attention, a model with no shipped config...) is refused with one line.

The mode's step time (:func:`predict_imported`): the synchronous step of the placement
(:func:`rlm_lab.cost.placement.predict_placement`) split into generation g (reshard + generation phase), the
trainer's work t (preparation + advantage + training) and the exposed weight sync s; ``sync`` is g + t + s;
``one_step_off`` and ``async`` run the discrete-event recurrence of :func:`rlm_lab.cost.asynchrony.simulate`
with the staleness bound eta (one rollout replica: the rollout set's data-parallel replicas are already in g).
With generation and training on the same devices nothing overlaps, so an asynchronous mode predicts the
synchronous step (said in the report).
"""

from __future__ import annotations

import contextvars
import copy
import fnmatch
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...cost.asynchrony import simulate
from ...cost.hardware import load_profile
from ...cost.offload import check_offload
from ...cost.offload import note as offload_note
from ...cost.placement import _Predictor, predict_placement
from ...cost.placement_config import cluster_from, format_placement, placement_from
from ...cost.placement_spec import roles_for
from ...cost.run_input import run_algorithm
from ...cost.spec import model_spec
from ...cost.units import _bytes, _seconds
from ...cost.workload import algorithm as algo
from ...cost.workload import assumed_lengths, assumed_lengths_note, response_lengths
from ...errors import RlmLabError
from ...models.zoo import ZOO
from .bounded import read_text, safe_load

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs" / "frameworks"
MODELS = REPO / "configs" / "models"
DEFAULT_HARDWARE = "h100-sxm"
MODES = ("sync", "one_step_off", "async")

# Hugging Face model ids -> a shipped model config with the same shape (layers, widths, heads, vocabulary);
# only the shape matters to the predictor. Qwen2-7B and Qwen2.5-Math-7B have Qwen2.5-7B's shape
# (hidden 3584, 28 layers, 28/4 heads, MLP 18944, vocabulary 152064; their config.json on the Hub); the
# Qwen2.5-1.5B family shares one (hidden 1536, 28 layers, 12/2 heads, MLP 8960, vocabulary 151936, tied).
MODEL_MAP = {
    "qwen/qwen2.5-7b": "qwen2.5-7b", "qwen/qwen2.5-7b-instruct": "qwen2.5-7b", "qwen/qwen2.5-math-7b": "qwen2.5-7b",
    "qwen/qwen2-7b": "qwen2.5-7b", "qwen/qwen2-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-3b": "qwen2.5-3b", "qwen/qwen2.5-3b-instruct": "qwen2.5-3b",
    "qwen/qwen2.5-1.5b": "qwen2.5-1.5b", "qwen/qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
    "qwen/qwen2.5-math-1.5b": "qwen2.5-1.5b",
    # Qwen2.5-32B (hidden 5120, 64 layers, 40/8 heads, MLP 27648, vocabulary 152064, untied; its config.json,
    # https://huggingface.co/Qwen/Qwen2.5-32B/blob/main/config.json); the instruct model keeps the shape
    "qwen/qwen2.5-32b": "qwen2.5-32b", "qwen/qwen2.5-32b-instruct": "qwen2.5-32b",
    # Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads, MLP 4864, vocabulary 151936, tied)
    "qwen/qwen2.5-0.5b": "qwen2.5-0.5b", "qwen/qwen2.5-0.5b-instruct": "qwen2.5-0.5b",
    # Llama-3-8B's shape (hidden 4096, 32 layers, 32/8 heads, MLP 14336, vocabulary 128256), which Llama-3.1-8B
    # keeps; OpenRLHF's SFT and reward models are fine-tunes of Llama-3-8B
    "meta-llama/meta-llama-3-8b": "llama3-8b", "meta-llama/meta-llama-3-8b-instruct": "llama3-8b",
    "meta-llama/llama-3.1-8b": "llama3-8b", "meta-llama/llama-3.1-8b-instruct": "llama3-8b",
    "openrlhf/llama-3-8b-sft-mixture": "llama3-8b", "openrlhf/llama-3-8b-rm-700k": "llama3-8b",
    # Qwen3-4B (hidden 2560, 36 layers, 32/8 heads of 128, MLP 9728, vocabulary 151936, tied)
    "qwen/qwen3-4b": "qwen3-4b", "qwen/qwen3-4b-base": "qwen3-4b", "qwen/qwen3-4b-instruct-2507": "qwen3-4b",
    "qwen/qwen3-4b-thinking-2507": "qwen3-4b",
    # the other shipped model configs, by their hub ids (configs/models/*.config.json hold the Hub's config.json)
    "deepseek-ai/deepseek-r1-distill-qwen-1.5b": "r1-distill-qwen-1.5b",
    # R1-Distill-Qwen-7B is distilled into Qwen2.5-Math-7B: Qwen2.5-7B's shape
    "deepseek-ai/deepseek-r1-distill-qwen-7b": "qwen2.5-7b",
    "qwen/qwen3-0.6b": "qwen3-0.6b", "qwen/qwen3-0.6b-base": "qwen3-0.6b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b", "qwen/qwen3-30b-a3b-base": "qwen3-30b-a3b",
    "qwen/qwen3-30b-a3b-instruct-2507": "qwen3-30b-a3b", "qwen/qwen3-30b-a3b-thinking-2507": "qwen3-30b-a3b",
    "qwen/qwen3-32b": "qwen3-32b",
    # Qwen3-8B (hidden 4096, 36 layers, 32/8 heads of 128, MLP 12288, vocabulary 151936, untied; the Hub's config.json)
    "qwen/qwen3-8b": "qwen3-8b", "qwen/qwen3-8b-base": "qwen3-8b",
    # Qwen3-1.7B (hidden 2048, 28 layers, 16/8 heads of 128, MLP 6144, vocabulary 151936, tied)
    "qwen/qwen3-1.7b": "qwen3-1.7b", "qwen/qwen3-1.7b-base": "qwen3-1.7b",
    # Llama-3.2-1B (hidden 2048, 16 layers, 32/8 heads of 64, MLP 8192, vocabulary 128256, tied)
    "meta-llama/llama-3.2-1b": "llama3.2-1b", "meta-llama/llama-3.2-1b-instruct": "llama3.2-1b",
    # Llama-3.3-70B keeps Llama-3.1-70B's shape (hidden 8192, 80 layers, 64/8 heads, MLP 28672, vocabulary 128256)
    "meta-llama/llama-3.3-70b-instruct": "llama3.1-70b",
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b", "qwen/qwen3-235b-a22b-instruct-2507": "qwen3-235b-a22b",
    "meta-llama/llama-2-7b-hf": "llama2-7b", "meta-llama/llama-2-7b-chat-hf": "llama2-7b",
    "meta-llama/llama-2-13b-hf": "llama2-13b", "meta-llama/llama-2-13b-chat-hf": "llama2-13b",
    "meta-llama/llama-2-70b-hf": "llama2-70b", "meta-llama/llama-2-70b-chat-hf": "llama2-70b",
    "meta-llama/llama-3.1-70b": "llama3.1-70b", "meta-llama/llama-3.1-70b-instruct": "llama3.1-70b",
    "meta-llama/meta-llama-3.1-70b": "llama3.1-70b", "meta-llama/meta-llama-3.1-70b-instruct": "llama3.1-70b",
    "meta-llama/meta-llama-3.1-8b": "llama3-8b", "meta-llama/meta-llama-3.1-8b-instruct": "llama3-8b",
}
# a model a --model flag names: it replaces the config's model before the config's model is looked up
POLICY_KEYS = {"actor_rollout_ref.model.path", "--actor.model_name_or_path", "model_name_or_path", "policy.model_name",
               "actor.path"}
MODEL_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("MODEL_OVERRIDE", default=None)


def resolve_model(name, key: str) -> str:
    """The model config for a framework's model path: a local folder or file with a config.json, a name the
    model map knows (its last path parts, so ``~/models/Qwen2.5-Math-7B`` works), or a refusal naming the map."""
    override = MODEL_OVERRIDE.get()
    if override is not None and key in POLICY_KEYS:
        return resolve_model(override, "--model") if _resolvable(override) else override
    if not isinstance(name, str) or not name.strip():
        raise RlmLabError(f"{key} must name a model (a Hugging Face id or a local path), got {name!r}")
    p = Path(name).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return model_json(p / "config.json", key)
    if p.is_file() and p.suffix == ".json":
        return model_json(p, key)
    parts = name.strip().rstrip("/").lower().split("/")
    if "/".join(parts[-2:]) in MODEL_MAP:
        return _short(MODELS / f"{MODEL_MAP['/'.join(parts[-2:])]}.config.json")
    by_last = {k.split("/")[1]: v for k, v in MODEL_MAP.items()}
    if parts[-1] in by_last:      # a local folder named after the hub id (~/models/Qwen2.5-Math-7B)
        return _short(MODELS / f"{by_last[parts[-1]]}.config.json")
    known = ", ".join(sorted({k.split("/")[1] for k in MODEL_MAP}))
    raise RlmLabError(f"{key}={name!r}: no model config ships for it (known: {known}); pass --model with the "
                      f"path of its config.json (nothing is downloaded)")


def _resolvable(name) -> bool:
    """Whether --model names something :func:`resolve_model` reads (a hub id or a config path), not a zoo name."""
    return isinstance(name, str) and name not in ZOO


def model_json(path: Path, key: str) -> str:
    """A local model config.json, checked before use: a JSON object (bounded size) whose numbers are finite;
    anything else is one line naming the file and the field."""
    where = f"{key}: model config {path}"
    try:
        cfg = json.loads(read_text(path, f"{key}: model config"))
    except ValueError as e:
        raise RlmLabError(f"{where} is not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise RlmLabError(f"{where} must be a JSON object (a Hugging Face config.json), got {type(cfg).__name__}")
    for field_name, v in cfg.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise RlmLabError(f"{where}: field {field_name!r} must be a finite number, got {v!r}")
    return str(path)


def _short(path: Path) -> str:
    """A path relative to the working folder when it lies below it (reports stay readable), else absolute."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else str(path)


# ---- reading keys ---------------------------------------------------------------------------------
def flatten(d, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; dotted keys stay as written (Hydra-style overrides)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out |= flatten(v, key + ".")
        else:
            out[key] = v
    return out


def load_options(framework: str, kinds: bool = False):
    """The framework's option names (``configs/frameworks/<framework>/options.txt``): exact names and
    patterns of mappings that take any key; with ``kinds``, {name: what follows the name on its line}."""
    path = CONFIGS / framework / "options.txt"
    names, open_maps, kind = set(), [], {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line, _, rest = line.partition(" ")
        kind[line] = rest.strip()
        if line.endswith(".*"):
            open_maps.append(line[:-2] + ".")
        else:
            names.add(line)
    return kind if kinds else (names, open_maps)


class Keys:
    """A framework config's flat keys: :meth:`get` marks a key used (with what it set); :meth:`finish` sorts
    the rest into ignored (the framework knows it) and unknown (it does not)."""

    def __init__(self, framework: str, flat: dict, notes: dict | None = None, written=None):
        self.framework, self.flat = framework, dict(flat)
        # a composed config holds every option; only what the user wrote is sorted into ignored / unknown
        self.written = None if written is None else list(written)
        self.used: dict[str, str] = {}
        self.notes = notes or {}
        self._names, self._open = load_options(framework)

    def has(self, key: str) -> bool:
        return key in self.flat

    def get(self, key: str, default=None, to: str | None = None):
        """The key's value (or ``default``); a present key is recorded as used, with ``to`` (what it sets)."""
        if key in self.flat:
            self.used[key] = to or "read"
            return self.flat[key]
        below = next((k for k in self.flat if k.startswith(key + ".")), None)
        if below is not None:
            raise RlmLabError(f"{self.framework} {key} must be a value, got a mapping ({below} = {self.flat[below]!r}); "
                              f"nothing is substituted for it")
        return default

    def use(self, key: str, to: str) -> None:
        if key in self.flat:
            self.used[key] = to

    def known(self, key: str) -> bool:
        k = key.lstrip("+")
        return k in self._names or any(k.startswith(p) for p in self._open)

    def finish(self) -> tuple[dict, list]:
        ignored, unknown = {}, []
        for key in (self.flat if self.written is None else self.written):
            if key in self.used:
                continue
            if self.known(key):
                note = next((n for pat, n in self.notes.items() if fnmatch.fnmatchcase(key.lstrip("+"), pat)), None)
                ignored[key] = note or "not priced by the predictor"
            else:
                unknown.append(key)
        return ignored, unknown


def need_int(value, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RlmLabError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def need_str(value, key: str, choices=None) -> str:
    """A string option (one of ``choices`` when given): a list, mapping or number is one line, never a default."""
    if not isinstance(value, str):
        raise RlmLabError(f"{key} must be a string{' (one of ' + ', '.join(choices) + ')' if choices else ''}, "
                          f"got {value!r}")
    if choices is not None and value not in choices:
        raise RlmLabError(f"{key}={value!r}: one of {', '.join(choices)}")
    return value


def need_num(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RlmLabError(f"{key} must be a number >= 0, got {value!r}")
    return float(value)


def need_bool(value, key: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise RlmLabError(f"{key} must be true or false, got {value!r}")
    return value



# ---- declarative key tables: an importer's plain keys as rows, read by one engine --------------------------
@dataclass(frozen=True)
class Key:
    """One row of an importer's key table: the framework's ``key`` read into ``field`` through ``kind`` (``int``:
    an integer >= 1, ``int0``: >= 0, ``num``: a number >= 0, ``bool``, ``str`` (one of ``choices`` when given),
    ``raw``: as written), ``default`` when the key is absent, recorded as used with ``to`` (what it sets; "read" when
    None); ``label`` names the key in a refusal (the key itself when None); ``assumed`` is the line added to the
    import's assumed lines when the key is absent and the default is priced (``{value}`` is the default)."""
    key: str
    field: str
    kind: object = "int"       # a name in CONVERTERS, or a converter of its own: (value, label, choices) -> value
    default: object = None
    to: str | None = None
    label: str | None = None
    choices: tuple | None = None
    assumed: str | None = None


# a row's default that the framework's own library states (TRL's config dataclasses): read_key's ``library(key)``
FROM_LIBRARY = "<the library's default>"


CONVERTERS = {"int": lambda v, label, _: need_int(v, label), "int0": lambda v, label, _: need_int(v, label, minimum=0),
              "num": lambda v, label, _: need_num(v, label), "bool": lambda v, label, _: need_bool(v, label),
              "str": need_str, "raw": lambda v, _label, _choices: v}


def text_int(minimum: int = 1, prefix: str = ""):
    """A row kind for an integer option written as text (a command line's ``--rollout-batch-size 128``): a word that
    is no integer is one line (``prefix`` before the key's label), then :func:`need_int`'s check."""
    def convert(v, label: str, _choices=None) -> int:
        try:
            v = int(v) if not isinstance(v, bool) else v
        except (TypeError, ValueError):
            raise RlmLabError(f"{prefix}{label} must be an integer, got {v!r}") from None
        return need_int(v, label, minimum)
    return convert


def text_num(prefix: str = ""):
    """A row kind for a number option written as text (``--kl-coef 0.01``), as :func:`text_int`."""
    def convert(v, label: str, _choices=None) -> float:
        try:
            return need_num(float(v), label)
        except (TypeError, ValueError):
            raise RlmLabError(f"{prefix}{label} must be a number, got {v!r}") from None
    return convert


def read_key(k: Keys, row: Key, assumed: list | None = None, prefix: str = "", label: str = "{}", library=None):
    """One table row's value (:class:`Key`): read, recorded as used, converted, and its assumed line added when the
    default stands in for an absent key; a refusal names the key as ``label`` formats it (``"--{}"`` for a
    command-line option) unless the row names it; a :data:`FROM_LIBRARY` default is ``library(key)``, asked only
    when the key is absent (a config that sets the key needs no library)."""
    key = prefix + row.key
    present = k.has(key)
    default = row.default
    if default is FROM_LIBRARY:
        default = None if present else library(key)
    convert = CONVERTERS[row.kind] if isinstance(row.kind, str) else row.kind
    value = convert(k.get(key, default, row.to), row.label or label.format(key), row.choices)
    if row.assumed and not present and assumed is not None:
        assumed.append(row.assumed.format(value=value))
    return value


def read_table(k: Keys, table, assumed: list | None = None, prefix: str = "", label: str = "{}",
               library=None) -> dict:
    """{field: value} of every row of ``table``, read in the table's order (the order refusals and the used keys
    keep)."""
    return {row.field: read_key(k, row, assumed, prefix, label, library) for row in table}


# NeMo-RL's resolvers, as nemo_rl/utils/config.py registers them (its configs write ${mul:a,b} and ${div:a,b})
NEMO_RESOLVERS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
                  "max": lambda a, b: max(a, b)}


def resolve_refs(flat: dict, where: str) -> dict:
    """Resolve the interpolations of a framework's YAML (verl, NeMo-RL and AReaL write OmegaConf's ``${a.b}``,
    ``${oc.select:...}``, NeMo-RL's ``${mul:...}``) with OmegaConf itself; a value whose interpolation does not
    resolve stays as written (the importer's type check then names its key if it is read)."""
    from omegaconf import OmegaConf  # noqa: PLC0415  optional: omegaconf is not a dependency every install has

    if not any(isinstance(v, str) and "${" in v for v in flat.values()):
        return dict(flat)
    for name, fn in NEMO_RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    nested: dict = {}
    for key, v in flat.items():
        node, parts = nested, str(key).split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[parts[-1]] = v
    try:
        cfg = OmegaConf.create(nested)
    except Exception:       # noqa: BLE001 - keys OmegaConf cannot hold: leave every value as written
        return dict(flat)
    out = dict(flat)
    for key, v in flat.items():
        if isinstance(v, str) and "${" in v:
            try:
                r = OmegaConf.select(cfg, str(key), throw_on_resolution_failure=True)
            except Exception:   # noqa: BLE001 - OmegaConf's resolution errors have no common base it exports
                continue
            out[key] = OmegaConf.to_container(r, resolve=True) if OmegaConf.is_config(r) else r
    return out


def load_yaml(path, framework: str) -> dict:
    """A framework's YAML config as a mapping, read in bounded time and memory (:mod:`.bounded`); a missing file,
    binary or malformed YAML is named in one line."""
    where = f"{framework} config {path}"
    data = safe_load(read_text(path, f"{framework} config"), where)
    if not isinstance(data, dict) or not data:
        raise RlmLabError(f"{where} must be a non-empty YAML mapping of {framework} options")
    return data


# ---- placements -------------------------------------------------------------------------------------
def set_dict(name: str, devices: int, tp: int = 1, zero: int = 0, gen_tp: int = 0, key: str = "", ep: int = 1,
             pp: int = 1, sp: int = 1) -> dict:
    if devices % (tp * pp):
        what = f"tensor-parallel size {tp}" + (f" x pipeline-parallel size {pp}" if pp > 1 else "")
        raise RlmLabError(f"{key or name}: {what} does not divide the set's {devices} GPUs")
    if gen_tp and devices % gen_tp:
        raise RlmLabError(f"{key or name}: generation tensor-parallel size {gen_tp} does not divide {devices} GPUs")
    dp = devices // (tp * pp)
    if ep > 1 and dp % ep:
        raise RlmLabError(f"{key or name}: expert-parallel size {ep} does not divide the set's {dp} "
                          f"data-parallel ranks ({devices} GPUs / tp {tp}{f' / pp {pp}' if pp > 1 else ''}); Megatron "
                          f"may spread experts over tensor-parallel ranks too, the predictor places them over "
                          f"data-parallel ranks only")
    if sp > 1 and dp % sp:
        raise RlmLabError(f"{key or name}: sequence-parallel size {sp} does not divide the set's {dp} data-parallel "
                          f"ranks")
    d = {"name": name, "devices": devices, "kind": "gpu", "dp": dp, "tp": tp, "zero": zero, "gen_tp": gen_tp}
    return d | ({"ep": ep} if ep > 1 else {}) | ({"pp": pp} if pp > 1 else {}) | ({"sp": sp} if sp > 1 else {})


def one_set(roles, devices: int, zero: int, gen_tp: int = 1, tp: int = 1, ep: int = 1, assumed=None,
            pp: int = 1, sp: int = 1) -> dict:
    """Every role on one set: the hybrid engine (FSDP/ZeRO-3 resharded into generation TP ``gen_tp``) when the
    training is ZeRO-3, else colocated with the training layout (tensor-parallel size ``tp``, expert-parallel ``ep``,
    Ulysses ``sp``).
    The predictor reshards only a ZeRO-3 trainer or a pipeline-parallel one (``pp`` > 1, Megatron's 1F1B stages:
    resharded into ``gen_tp``, the engine's TP), so a colocated engine whose TP differs from the training TP is
    otherwise priced at the training TP and ``assumed`` says so (before, the training TP and EP were dropped too:
    NeMo-RL's Megatron recipes were priced at TP 1)."""
    gen = gen_tp if gen_tp and gen_tp > 1 else 0
    if zero == 3 and tp == 1 and pp == 1:
        return {"name": "hybrid", "sets": [set_dict("all", devices, zero=3, gen_tp=gen, ep=ep, sp=sp)],
                "roles": {r: "all" for r in roles}, "sync": "none", "reshard": True}
    if pp > 1:
        return {"name": "colocated", "sets": [set_dict("all", devices, tp=tp, zero=zero, gen_tp=gen, ep=ep, pp=pp,
                                                       sp=sp)],
                "roles": {r: "all" for r in roles}, "sync": "none", "reshard": True}
    if gen and gen != tp and assumed is not None:
        assumed.append(f"generation priced at the training layout (tp {tp}{f', ep {ep}' if ep > 1 else ''}), not "
                       f"the engine's tp {gen}: the predictor reshards only a ZeRO-3 (FSDP) or pipeline-parallel "
                       f"trainer")
    return {"name": "colocated", "sets": [set_dict("all", devices, tp=tp, zero=zero, ep=ep, sp=sp)],
            "roles": {r: "all" for r in roles}, "sync": "none", "reshard": False}


def two_sets(roles, rollout_devices: int, train_devices: int, rollout_tp: int, zero: int, tp: int = 1,
             ep: int = 1, pp: int = 1, sp: int = 1) -> dict:
    """Rollout on its own set, every other role on the trainer's; weights broadcast (NCCL) after each update."""
    return {"name": "disaggregated",
            "sets": [set_dict("rollout", rollout_devices, tp=rollout_tp),
                     set_dict("train", train_devices, tp=tp, zero=zero, ep=ep, pp=pp, sp=sp)],
            "roles": {r: ("rollout" if r == "rollout" else "train") for r in roles}, "sync": "collective",
            "reshard": False}


def capped_response(cap: int, where: str, assumed: list) -> dict:
    """The workload ``response`` of a config that states only the cap ``where``: the cost model's stated default
    distribution (rlm_lab.cost.workload.assumed_lengths; not every response at the cap), its line added to
    ``assumed``."""
    if cap > MAX_TOKENS:      # no model reads that far: check_shape refuses it with the model's own limit
        return cap
    assumed.append(assumed_lengths_note(cap, where))
    return assumed_lengths(cap)


def mean_response(resp) -> float:
    """The mean response length of a workload ``response`` (a length or a distribution mapping)."""
    xs = response_lengths(resp).sample(512)
    return sum(xs) / len(xs)


def import_algorithm(algorithm: str, beta, reward: str = "model"):
    """The cost model's algorithm of an import: PPO whose reward is a rule (``reward="rule"``: a verifier, no reward
    model; :func:`rlm_lab.cost.run_input.run_algorithm`, as our own PPO runs) or as :data:`rlm_lab.stages.MODELS_HELD`
    places it (``"model"``: PPO with a reward model)."""
    if reward not in ("model", "rule"):
        raise RlmLabError(f"reward must be 'model' or 'rule', got {reward!r}")
    return run_algorithm(algorithm, beta) if reward == "rule" else algo(algorithm, beta)


def roles_of(algorithm: str, beta, reward: str = "model") -> tuple:
    return roles_for(import_algorithm(algorithm, beta, reward))


# ---- the import ------------------------------------------------------------------------------------
@dataclass
class Imported:
    framework: str
    source: str
    config: dict                 # a predict config (rlm_lab.cost.cli keys) with a full placement mapping
    mode: str = "sync"
    eta: int | None = 0
    used: dict = field(default_factory=dict)
    ignored: dict = field(default_factory=dict)
    unknown: list = field(default_factory=list)
    assumed: list = field(default_factory=list)
    engine: dict | None = None   # {memory_fraction, max_num_seqs, what}: a vLLM/SGLang engine's batch limit
    prompt_cap: str | None = None  # the key whose cap was priced as every prompt's length (said, with its sensitivity)

    def __post_init__(self):
        if self.mode not in MODES:
            raise RlmLabError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    def with_changes(self, *, placement=None, mode=None, eta="same", workload=None) -> "Imported":
        cfg = copy.deepcopy(self.config)
        if placement is not None:
            cfg["placement"] = placement
        if workload is not None:
            cfg["workload"] = cfg.get("workload", {}) | workload
        return replace(self, config=cfg, mode=mode or self.mode, eta=self.eta if eta == "same" else eta)

    def keys_report(self) -> list[str]:
        lines = [f"{self.framework} {self.source}: {len(self.used)} keys used, {len(self.ignored)} ignored, "
                 f"{len(self.unknown)} unknown"]
        lines += [f"  used    {k} -> {v}" for k, v in self.used.items()]
        by_reason: dict = {}
        for k, v in self.ignored.items():
            by_reason.setdefault(v, []).append(k)
        lines += [f"  ignored ({why}): {', '.join(keys)}" for why, keys in by_reason.items()]
        lines += [f"  unknown {k} (not a {self.framework} option in configs/frameworks/{self.framework}/options.txt)"
                  for k in self.unknown]
        return lines


def finish(framework: str, source: str, keys: Keys, config: dict, mode: str = "sync", eta=0,
           assumed=None, hardware=None, engine=None, prompt_cap: str | None = None) -> Imported:
    """Close an import: hardware (the framework's config names none), the key lists."""
    cfg = dict(config)
    assumed = list(assumed or [])
    if hardware is None:
        cfg["hardware"] = DEFAULT_HARDWARE
        assumed.append(f"hardware {DEFAULT_HARDWARE} ({framework} configs name no GPU model; pass --hardware)")
    else:
        cfg["hardware"] = hardware
    if engine is not None and not 0 < engine["memory_fraction"] <= 1:
        raise RlmLabError(f"{framework} {engine['what']}: its memory fraction (gpu_memory_utilization or "
                          f"mem_fraction_static) must be in (0, 1], got {engine['memory_fraction']:g}")
    ignored, unknown = keys.finish()
    if prompt_cap is not None:
        assumed.append(f"every prompt {cfg['workload']['prompt_len']} tokens long: {prompt_cap} is a cap, priced as "
                       f"every prompt's length (no config states the prompts' real length; pass --prompt-len)")
    return Imported(framework, source, cfg, mode, eta, dict(keys.used), ignored, unknown, assumed, engine, prompt_cap)


def engine_batch(imp: Imported, spec, capacity_bytes: float) -> tuple[int, str] | None:
    """Sequences one vLLM/SGLang replica runs at once: ``max_num_seqs``, or fewer when their KV cache does not
    fit the engine's memory share (PagedAttention admits what its KV blocks hold, arXiv 2309.06180 Sec. 4):
    (fraction x device memory - bf16 weights / tp) x tp / (KV bytes of one full-length sequence)."""
    e = imp.engine
    if not e:
        return None
    wl = imp.config.get("workload") or {}
    placement = imp.config["placement"]
    rset = next(s for s in placement["sets"] if s["name"] == placement["roles"]["rollout"])
    tp = rset.get("gen_tp") or rset.get("tp", 1)
    resp = wl.get("response", 16)
    seq = wl.get("prompt_len", 8) + (resp if isinstance(resp, int) else resp.get("max", resp.get("length", 16)))
    if "in_flight" in e:   # a limit over all replicas (AReaL's max_concurrent_rollouts): each replica's share
        e = e | {"max_num_seqs": max(1, math.ceil(e["in_flight"] / max(1, rset["devices"] // tp)))}
    budget = e["memory_fraction"] * capacity_bytes * tp - 2 * spec.params
    fit = int(budget // (spec.kv_bytes_per_token(2) * seq)) if budget > 0 else 0
    n = max(1, min(e["max_num_seqs"], fit))
    why = (f"{e['what']}: at most {e['max_num_seqs']} sequences per replica (max_num_seqs), "
           f"{fit} fit their KV cache ({e['memory_fraction']:g} of {capacity_bytes / 2 ** 30:.0f} GiB x tp {tp} "
           f"less the bf16 weights, {seq} tokens each): {n} generated at once per replica")
    return n, why


# ---- predicting an import -------------------------------------------------------------------------
@dataclass
class ImportPrediction:
    imported: Imported
    placement: object            # rlm_lab.cost.placement.PlacementPrediction (synchronous step)
    mode_note: str = ""
    derived: list = field(default_factory=list)   # what the prediction derived at predict time (engine batch)

    @property
    def fits(self) -> bool:
        return self.placement.fits

    @property
    def sync_step_s(self) -> float:
        return self.placement.step_s

    def stages(self) -> tuple[float, float, float]:
        """(g, t, s): generation (with reshard), the trainer's work, exposed weight sync, seconds per step."""
        ph = {p: t for p, (t, _) in self.placement.phases.items()}
        g = ph["reshard"] + ph["generation"]
        t = ph["preparation"] + ph["advantage"] + ph["training"]
        return g, t, ph["sync"]

    @property
    def step_s(self) -> float:
        imp = self.imported
        if imp.mode == "sync" or not self.placement.placement.rollout_separate:
            return self.sync_step_s

        g, t, s = self.stages()
        return simulate([g] * 64, [t] * 64, imp.eta, s).step_s

    def bound(self) -> str:
        """Which side sets an asynchronous step: generation or training (+ sync)."""
        g, t, s = self.stages()
        return "generation" if g >= t + s else "training"

    def critical(self) -> str:
        """The longest stage on the critical path: the synchronous step's (placement.py), or, when an asynchronous
        mode overlaps the two sides, the longest stage of the side that bounds the step."""
        pl = self.placement.placement
        if self.imported.mode != "sync" and pl.rollout_separate:
            gen_set = pl.roles["rollout"]
            side = [s for s in self.placement.sets if (s.name == gen_set) == (self.bound() == "generation")]
            stage, set_name, t = max(((str(st), s.name, t) for s in side for st, t in s.stages.items()),
                                     key=lambda x: x[2])
            if self.bound() == "training" and self.stages()[2] > t:
                return "weight_sync"
            return f"{stage} on {set_name}"
        stage, set_name, _ = self.placement.critical()
        return stage if set_name == "-" else f"{stage} on {set_name}"

    def memory_per_device(self) -> float:
        return max(s.memory.total for s in self.placement.sets)

    def capacity(self) -> float:
        return min(s.capacity for s in self.placement.sets)

    def row(self) -> dict:
        imp = self.imported
        d = {"framework": imp.framework, "config": imp.source, "model": Path(str(imp.config["model"])).name,
             "devices": self.placement.placement.devices, "placement": self.placement.placement.describe(),
             "mode": imp.mode, "eta": imp.eta, "fits": self.fits, "memory_per_device_bytes": self.memory_per_device(),
             "capacity_bytes": self.capacity(), "step_s": None, "critical": None,
             "keys_used": len(imp.used), "keys_ignored": len(imp.ignored), "keys_unknown": len(imp.unknown)}
        if self.fits:
            d |= {"step_s": self.step_s, "sync_step_s": self.sync_step_s, "critical": self.critical()}
        return d


MAX_TOKENS = 2 ** 20   # no shipped model reads more than a million positions; beyond is a typo, not a workload


def check_shape(imp: Imported) -> None:
    """Refuse, before pricing, what no run can do: a sequence longer than the model's ``max_position_embeddings``
    (or a million tokens), and more data-parallel ranks on a set than the step has sequences."""
    wl = imp.config.get("workload") or {}
    resp = wl.get("response", 16)
    resp = resp if isinstance(resp, int) else max(resp.get("max", 0), resp.get("length", 0), resp.get("high", 0))
    seq = wl.get("prompt_len", 8) + resp
    limit, where = MAX_TOKENS, "a million tokens"
    model = imp.config.get("model")
    if isinstance(model, str) and model.endswith(".json") and Path(model).is_file():
        try:
            mpe = json.loads(Path(model).read_text()).get("max_position_embeddings")
        except (ValueError, OSError, AttributeError):
            mpe = None
        if isinstance(mpe, int) and mpe > 0:
            limit, where = mpe, f"the model's max_position_embeddings ({Path(model).name})"
    if seq > limit:
        raise RlmLabError(f"{imp.framework}: prompt + response = {seq} tokens exceeds {where} = {limit}")
    n = wl.get("prompts", 8) * wl.get("group_size", 4)
    for s in imp.config["placement"]["sets"]:
        ranks = s["devices"] // max(1, s.get("tp", 1))
        if ranks > n:
            raise RlmLabError(f"{imp.framework}: set {s['name']!r} has {ranks} data-parallel ranks for the step's {n} "
                              f"sequences; every rank needs at least one (fewer GPUs or a larger batch)")


def predict_imported(imp: Imported, _cache: dict | None = None) -> ImportPrediction:
    """The imported run's synchronous placement prediction, and its mode (module docstring)."""
    cfg = {k: v for k, v in imp.config.items() if v is not None}
    check_shape(imp)
    extra = []
    if imp.engine:
        mem = (cfg.get("cluster") or {}).get("memory_per_device_gib")
        capacity = mem * 2 ** 30 if mem else float(load_profile(cfg["hardware"]).memory_bytes)
        n, why = engine_batch(imp, model_spec(cfg["model"]), capacity)
        # the engine's pool is its share of the device (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static:
        # weights, activations and KV cache of the instance), beside what the trainer keeps there while it generates
        cfg["workload"] = dict(cfg.get("workload") or {}, gen_batch=n, engine_memory_fraction=imp.engine["memory_fraction"])
        extra.append(why)
    offload = (cfg.get("workload") or {}).get("offload")
    if offload:
        extra.append(offload_note(check_offload(offload)))
    reward = cfg.get("reward", "model")
    key = (str(cfg["model"]), cfg["algorithm"], repr(sorted((cfg.get("workload") or {}).items())), cfg["hardware"],
           cfg.get("beta"), reward)
    pr = _cache.get(key) if _cache is not None else None
    if pr is None:
        pr = _Predictor(cfg["model"], import_algorithm(cfg["algorithm"], cfg.get("beta"), reward),
                        cfg.get("workload") or {}, cfg["hardware"], cfg.get("critic"), cfg.get("reward_model"),
                        cfg.get("beta"))
        if _cache is not None:
            _cache[key] = pr
    cluster = cluster_from(cfg.get("cluster"), pr.prof, pr.wl.devices)
    placement = placement_from(cfg["placement"], cluster, pr.alg)
    pp = predict_placement(placement, pr.spec, pr.alg, pr.wl, pr.prof, cluster, lora=cfg.get("lora"),
                           _predictor=pr)
    note = ""
    if imp.mode != "sync" and not placement.rollout_separate:
        note = (f"{imp.mode} on one set of devices: generation and training share them, so nothing overlaps and the "
                f"step is the synchronous one")
    return ImportPrediction(imp, pp, note, extra)


def prompt_sensitivity(ip: ImportPrediction) -> str:
    """How much the step moves when the prompts are half the cap the import priced them at (one more prediction)."""
    imp = ip.imported
    p = imp.config["workload"]["prompt_len"]
    half = predict_imported(imp.with_changes(workload={"prompt_len": p // 2}))
    if not half.fits:
        return f"prompt length sensitivity: at half the cap ({p // 2} tokens) the run does not fit"
    return (f"prompt length sensitivity: at half the cap ({p // 2} tokens) the step is {_seconds(half.step_s)}, "
            f"{100 * (1 - half.step_s / ip.step_s):.0f} % less than at the cap ({_seconds(ip.step_s)})")


def format_import_prediction(ip: ImportPrediction) -> str:
    imp = ip.imported
    lines = [format_placement(ip.placement)]
    eta = "unbounded" if imp.eta is None else imp.eta
    if ip.fits:
        g, t, s = ip.stages()
        lines.append(f"mode {imp.mode} (eta {eta}): step {_seconds(ip.step_s)} (synchronous {_seconds(ip.sync_step_s)};"
                     f" generation {_seconds(g)}, trainer {_seconds(t)}, sync {_seconds(s)}; "
                     f"{ip.bound()}-bound); critical stage {ip.critical()}; memory "
                     f"{_bytes(ip.memory_per_device())} of {_bytes(ip.capacity())} per device")
    else:
        lines.append(f"mode {imp.mode} (eta {eta}); memory {_bytes(ip.memory_per_device())} of "
                     f"{_bytes(ip.capacity())} per device: DOES NOT FIT")
    if ip.mode_note:
        lines.append(f"note: {ip.mode_note}")
    lines += [f"assumed: {a}" for a in imp.assumed + ip.derived]
    if imp.prompt_cap and ip.fits and imp.config["workload"]["prompt_len"] >= 2:
        lines.append(f"assumed: {prompt_sensitivity(ip)}")
    return "\n".join(lines)
