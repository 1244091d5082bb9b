"""Ray's privates (read from ray 2.60.0; the version policy is :mod:`rlm_lab.compat`'s): the local head's start-up
(``ray._private.services.get_node``, polled by ``Node.__init__`` for a fixed 30 s until the raylet registers;
``Node.start_raylet``; ``ray._raylet.persist_port`` and a node's ``_ray_params``), the CLI's worker-node gate and
a node's socket names (``rlm_lab.placement.ray_head``), the cluster switch read at import
(``rlm_lab.placement.session``) and an actor handle's id."""

from __future__ import annotations

import sys

from . import fail, source_has


def ray_start_privates():
    """``(services, Node, raylet)``: Ray's modules whose privates the local head wraps, checked: ``Node.__init__``
    still polls ``services.get_node`` with a fixed ``raylet_start_wait_time_s``, and ``Node.start_raylet`` and
    ``raylet.persist_port`` exist."""
    try:
        import ray._private.services as services  # noqa: PLC0415 - ray stays lazy
        import ray._raylet as raylet  # noqa: PLC0415 - ray stays lazy
        from ray._private.node import Node  # noqa: PLC0415 - ray stays lazy
    except ImportError:
        raise fail("ray", "ray._private.services / ray._private.node / ray._raylet are missing") from None
    if not (callable(getattr(services, "get_node", None)) and callable(getattr(Node, "start_raylet", None))
            and callable(getattr(raylet, "persist_port", None))
            and source_has(Node.__init__, ["raylet_start_wait_time_s = 30", "ray._private.services.get_node("])):
        raise fail("ray", "Ray's node start-up no longer polls services.get_node for a fixed 30 s")
    return services, Node, raylet


def persist_agent_ports(node, ports) -> None:
    """Write each fixed agent port of ``node`` (``node._ray_params.<param>``, for ``(name, param)`` in ``ports``, the
    port's key being ``ray._raylet.<name>``) where the raylet waits for it, with Ray's own
    ``ray._raylet.persist_port`` (each agent writes the same value again once it binds)."""
    _, _, raylet = ray_start_privates()
    params = getattr(node, "_ray_params", None)
    if params is None:
        raise fail("ray", f"{type(node).__name__}._ray_params (the node's start parameters) is missing")
    for name, param in ports:
        if not hasattr(raylet, name):
            raise fail("ray", f"ray._raylet.{name} (an agent port's key) is missing")
        port = getattr(params, param, None)
        if port:
            raylet.persist_port(node.get_session_dir_path(), node.node_id, getattr(raylet, name), int(port))


def ray_worker_node_privates():
    """``(scripts, Node)``: ``ray.scripts.scripts``, checked that its ``start`` still gates a worker node on
    ``ray_constants.ENABLE_RAY_CLUSTER`` (read through the module's name ``ray_constants``), and
    ``ray._private.node.Node``, checked that ``_prepare_socket_file`` names an unnamed socket
    ``<sockets dir>/<default_prefix>[.<n>]``: the local cluster's worker nodes lift that gate for the CLI alone and
    put their node name in those socket names."""
    try:
        import ray.scripts.scripts as scripts  # noqa: PLC0415 - ray stays lazy
        from ray._private.node import Node  # noqa: PLC0415 - ray stays lazy
    except ImportError:
        raise fail("ray", "ray.scripts.scripts / ray._private.node are missing") from None
    start = getattr(getattr(scripts, "start", None), "callback", None)
    if not (hasattr(scripts, "ray_constants") and start is not None
            and source_has(start, ["if not ray_constants.ENABLE_RAY_CLUSTER:", "Multi-node Ray clusters are not supported"])):
        raise fail("ray", "`ray start` no longer gates a worker node on ray_constants.ENABLE_RAY_CLUSTER")
    prepare = getattr(Node, "_prepare_socket_file", None)
    if prepare is None or not source_has(prepare, ["def _prepare_socket_file(self, socket_path: str, default_prefix: str):",
                                                   "prefix=default_prefix, directory_name=self._sockets_dir"]):
        raise fail("ray", "Node._prepare_socket_file no longer names a socket by its default_prefix")
    return scripts, Node


def close_cluster_gate() -> None:
    """``ray._private.ray_constants.ENABLE_RAY_CLUSTER = False`` where Ray is already imported (it reads
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, at import); nothing where it is not (the environment then does it)."""
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is None:
        return
    if not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        raise fail("ray", "ray._private.ray_constants.ENABLE_RAY_CLUSTER is missing")
    constants.ENABLE_RAY_CLUSTER = False


def actor_id(handle):
    """``handle._actor_id`` of a Ray ``ActorHandle`` (an ``ActorID``; ``.hex()`` is what ``RayActorError.actor_id``
    holds), None for anything that is no actor handle; Ray exposes an actor's id only inside the actor."""
    if type(handle).__name__ != "ActorHandle":
        return None
    if not hasattr(handle, "_actor_id"):
        raise fail("ray", "ActorHandle._actor_id is missing")
    return handle._actor_id
