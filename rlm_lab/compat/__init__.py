"""Library internals through one door: every reach into a private of torch, transformers, TRL, accelerate, Ray or
the standard library, guarded, one module per library (its adapters and the patches they serve together).

rlm-lab uses a few non-public parts of its libraries where no public API does the job. Each adapter names the
private it relies on and the library version it was read from (:data:`VERIFIED`).

**The version policy** (written here once; every adapter follows it): an adapter checks, the first time it is
used in a process (or each time, where the check is one ``hasattr``), that the private is still there in the form
relied on: an attribute that exists, or source lines that are present (:func:`source_has`). It does *not* compare
version numbers: a different version whose private still matches passes (Colab keeps its own torch). A private
that is gone or changed fails with one clear line, an :class:`rlm_lab.errors.RlmLabError` built by :func:`fail`
that names the private, the library, the version the adapter was read from and the installed one, before any
work: never a traceback from inside the library, never a silently wrong number.

The adapters, per module; a caller imports an adapter from its library's module (``from rlm_lab.compat.torch
import tree_flatten``): the modules import this policy, so the package imports none of them back (no import loop,
``tests/test_structure.py``), and each imports its library inside the adapter, so ``import rlm_lab.compat`` and
``import rlm_lab.compat.torch`` load no heavy library:

* :mod:`.torch` -- ``LRScheduler``'s step marks (:func:`track_step_override`, ``rlm_lab.train.critic``); the
  elastic rendezvous' store sites (:func:`torchrun_store_sites`, ``rlm_lab.parallel.nodes``); the dispatcher
  mode, pytree flattening, group-name resolution and op schemas the collective counter reads
  (:func:`torch_dispatch_mode`, :func:`tree_flatten`, :func:`resolve_process_group`, :func:`op_schema`,
  ``rlm_lab.parallel.comm_counter``); a process group built by hand (:func:`nccl_options`,
  :func:`register_backend`, ``rlm_lab.placement.weights``);
* :mod:`.transformers` -- ``PretrainedConfig._attn_implementation`` (:func:`set_attn_implementation`,
  ``rlm_lab.parallel.context_parallel``); ``Trainer._get_train_sampler()`` / ``_train_batch_size``
  (:func:`train_sampler`, :func:`train_batch_size`, ``rlm_lab.asynchrony.trl_rollout``);
  ``CompileConfig._compile_all_devices`` (:func:`compile_on_every_device`, ``rlm_lab.placement.rollout``);
* :mod:`.trl` -- ``ProfilingContext`` (:func:`profiling_context`, ``rlm_lab.train.tracer``); the private methods
  PPO overrides (:func:`check_overrides`); the ``use_vllm`` gates and ``_last_loaded_step`` the off-policy
  correction relies on (:func:`check_use_vllm_gates`, :func:`mark_weights_loaded`,
  ``rlm_lab.asynchrony.correction``); ``GRPOTrainer._tokenizer`` (:func:`trainer_tokenizer`,
  ``rlm_lab.placement.trl_rollout``); and, public but kept with them, the configs' own defaults
  (:func:`config_defaults`, ``rlm_lab.frameworks.importers.trl``);
* :mod:`.accelerate` -- ``Accelerator._models`` (:func:`prepared_models`, ``rlm_lab.placement.critic_role``);
* :mod:`.ray` -- the local head's start-up privates (:func:`ray_start_privates`, :func:`persist_agent_ports`),
  the CLI's worker-node gate and socket names (:func:`ray_worker_node_privates`), the cluster switch a driver
  sets after importing Ray (:func:`close_cluster_gate`), all for ``rlm_lab.placement.ray_head`` / ``.session``;
  an actor handle's id (:func:`actor_id`, ``rlm_lab.placement.trl_rollout``);
* :mod:`.stdlib` -- a ``SimpleQueue``'s read end, to wait on it beside process sentinels
  (:func:`simple_queue_reader`, ``rlm_lab.parallel.launch``).

``tests/test_private_door.py`` checks that no module outside this package reaches another library's private.
"""

from __future__ import annotations

import inspect
import platform
from importlib.metadata import PackageNotFoundError, version

from ..errors import RlmLabError

# The versions each adapter was read from (requirements.txt pins the same).
VERIFIED = {"trl": "1.16.0", "transformers": "5.24.0", "torch": "2.13.0", "ray": "2.60.0", "accelerate": "1.15.0",
            "python": "3.11"}


def installed(lib: str) -> str:
    if lib == "python":
        return platform.python_version()
    try:
        return version(lib)
    except PackageNotFoundError:
        return "not installed"


def fail(lib: str, what: str) -> RlmLabError:
    """The one-line error of the version policy: ``what`` (the private, and how it is gone), the version the adapter
    was read from, the installed one."""
    fix = f"install {lib}=={VERIFIED[lib]} (requirements.txt)" if lib != "python" else f"run Python {VERIFIED[lib]}"
    return RlmLabError(f"{what}: rlm-lab relies on it as in {lib} {VERIFIED[lib]}, but this is {lib} "
                       f"{installed(lib)}; {fix}")



def source_has(obj, lines) -> bool:
    """Does the source of ``obj`` hold every one of ``lines`` (whitespace-stripped, as substrings of a line)?"""
    try:
        src = [ln.strip() for ln in inspect.getsource(obj).splitlines()]
    except (OSError, TypeError):
        return False
    return all(any(want in ln for ln in src) for want in lines)

