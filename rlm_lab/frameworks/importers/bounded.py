"""Reading a framework's YAML file in bounded time and memory, before any work: a size cap on the file, a nesting cap
(checked on PyYAML's event stream, which is iterative, so a 3000-deep mapping is a refusal, not a RecursionError) and
a cap on the values the document expands to (an alias is a reference to a node: counting every node a walk of the
composed graph visits counts each alias expansion, so a "billion laughs" file of nested aliases stops at the cap
instead of growing without bound when its mapping is flattened).

PyYAML does the parsing (``yaml.parse``, ``yaml.compose``, ``SafeLoader``'s constructor); only the counting is ours,
because PyYAML has no limit on alias expansion or depth.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ...errors import RlmLabError

MAX_BYTES = 4 * 2 ** 20       # the largest framework config we know (verl's generated trainer config) is ~40 KB
MAX_DEPTH = 64                # verl's deepest key is 6 levels; NeMo-RL's 7
MAX_NODES = 200_000           # values after alias expansion; verl's generated config has ~1,500


def read_text(path, what: str) -> str:
    """A config file's text: missing, a folder, over :data:`MAX_BYTES` or not UTF-8 is one line naming it."""
    p = Path(path)
    if not p.is_file():
        raise RlmLabError(f"{what} {path} not found" + (" (it is a folder)" if p.is_dir() else ""))
    size = p.stat().st_size
    if size > MAX_BYTES:
        raise RlmLabError(f"{what} {path} is {size} bytes, over the {MAX_BYTES}-byte cap for a config file")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RlmLabError(f"{what} {path} is not a text file (byte {e.start} is not UTF-8)") from None


def check_bounds(text: str, where: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH` or expanding to more than :data:`MAX_NODES` values."""
    depth = 0
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise RlmLabError(f"{where} nests deeper than {MAX_DEPTH} levels (line {ev.start_mark.line + 1}); "
                                      f"no framework config does")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise RlmLabError(f"{where} is not valid YAML ({str(e).splitlines()[0]})") from None
    seen, stack = 0, [node] if node is not None else []
    while stack:
        n = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise RlmLabError(f"{where} expands to more than {MAX_NODES} values (YAML aliases nested in aliases?); "
                              f"refused before reading it further")
        if isinstance(n, yaml.MappingNode):
            stack.extend(v for pair in n.value for v in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def safe_load(text: str, where: str):
    """``yaml.safe_load`` of ``text`` after :func:`check_bounds`; malformed YAML is one line naming ``where``."""
    check_bounds(text, where)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RlmLabError(f"{where} is not valid YAML ({str(e).splitlines()[0]})") from None
