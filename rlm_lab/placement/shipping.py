"""The SFT warm start as Ray carries it to every actor, so that no actor reads a path of the driver's machine.

The driver builds (or finds) the warm start in its own cache (:func:`rlm_lab.placement.runtime._sft_checkpoint`),
:func:`pack` reads that folder's files into one dict and the driver ``ray.put``-s it once; each actor gets the
object reference (Ray resolves a reference passed as an actor argument; one nested in a job is fetched with
``ray.get``), writes the files into a temporary folder of its own node (:func:`local_copy`) and loads the model
from there, as it would from the driver's folder on one machine. On a real cluster the workers' machines then
need no filesystem shared with the driver: a Ray job's driver runs in Ray's node-local copy of the repository
(``ray job submit --working-dir``), and before this the workers were handed that path and failed with
transformers' "unknown model" (issue 40). Ray's object store moves the bytes between nodes
(https://docs.ray.io/en/latest/ray-core/objects.html); the bytes are the saved files themselves, so a model loaded
from the copy is the model loaded from the folder, bit for bit.

The folder is the driver's own (a saved model, a few files); :func:`unpack` still writes only plain relative
names under its target (no ``..``, no absolute path, no link), so a payload cannot escape the folder it is given.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path, PurePosixPath

from ..errors import RlmLabError

MAX_FILES = 256  # a saved model is config, tokenizer files and a few weight shards


def pack(folder: str | Path) -> dict:
    """``{"name": folder name, "files": {relative posix name: bytes}}`` of every regular file under ``folder``."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise RlmLabError(f"{folder} is not a saved model folder (no config.json)")
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        files[path.relative_to(folder).as_posix()] = path.read_bytes()
        if len(files) > MAX_FILES:
            raise RlmLabError(f"{folder} holds more than {MAX_FILES} files; not a saved model folder")
    return {"name": folder.name, "files": files}


def _safe_name(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or not rel.parts or any(p in ("", ".", "..") for p in rel.parts) or "\\" in name:
        raise RlmLabError(f"warm start payload: file name {name!r} is not a plain relative name")
    return rel


def unpack(shipped: dict, into: str | Path) -> Path:
    """Write ``shipped`` (from :func:`pack`) under ``into``; returns the model folder ``into/<name>``."""
    name = _safe_name(str(shipped.get("name", "model")))
    if len(name.parts) != 1:
        raise RlmLabError(f"warm start payload: folder name {shipped.get('name')!r} is not one plain name")
    folder = Path(into) / name.as_posix()
    for rel, data in shipped["files"].items():
        target = folder / _safe_name(rel).as_posix()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


@contextlib.contextmanager
def local_copy(model):
    """A folder this process can load ``model`` from: a path as it is (one process, no Ray), else the shipped
    files (a dict, or a Ray object reference to one) written to a temporary folder of this node, removed after."""
    if isinstance(model, (str, Path)):
        yield Path(model)
        return
    if not isinstance(model, dict):  # a Ray ObjectRef nested in a job (Ray resolves only top-level arguments)
        import ray

        model = ray.get(model)
    with tempfile.TemporaryDirectory(prefix="rlm_warm_") as d:
        yield unpack(model, d)
