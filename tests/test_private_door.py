"""One door to other libraries' privates: outside ``rlm_lab/compat.py`` no module imports a private module or name
of a third-party library (``torch.utils._pytree``, ``from x import _y``) nor reads a private attribute through a
library module it imported (``c10d._resolve_process_group``). Privates of library *objects* (``trainer._tokenizer``)
need types to see and are not caught here; ``tests/test_compat.py`` names the ones compat covers."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names)

# reaches still outside the door, to move into compat (issue 41, deliverable 5); entries must stay true (checked)
KNOWN = {
    "rlm_lab/parallel/comm_counter.py: from torch.utils._python_dispatch import TorchDispatchMode",
    "rlm_lab/parallel/comm_counter.py: from torch.utils._pytree import tree_flatten",
    "rlm_lab/parallel/comm_counter.py: c10d._resolve_process_group",
    "rlm_lab/placement/ray_head.py: import ray._raylet",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reaches(path: Path, src: str) -> set[str]:
    tree, out, libs = ast.parse(src), set(), {}
    where = path.relative_to(ROOT).as_posix() if path.is_absolute() else str(path)
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                top = a.name.split(".")[0]
                if top != "rlm_lab" and top not in STDLIB:
                    libs[a.asname or top] = a.name
                    if any(_private(p) for p in a.name.split(".")):
                        out.add(f"{where}: import {a.name}")
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            if n.module.split(".")[0] in ("rlm_lab", *STDLIB):
                continue
            for a in n.names:
                libs[a.asname or a.name] = f"{n.module}.{a.name}"
                if _private(a.name) or any(_private(p) for p in n.module.split(".")):
                    out.add(f"{where}: from {n.module} import {a.name}")
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr):
            base = n.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in libs:
                out.add(f"{where}: {ast.unparse(n)}")
    return out


def test_no_private_of_another_library_outside_compat():
    found = set()
    for p in sorted((ROOT / "rlm_lab").rglob("*.py")):
        if p.name != "compat.py" and "compat" not in p.relative_to(ROOT).parts[1:-1]:
            found |= reaches(p, p.read_text())
    assert not found - KNOWN, f"reach these through rlm_lab.compat: {sorted(found - KNOWN)}"
    assert not KNOWN - found, f"moved (remove from KNOWN): {sorted(KNOWN - found)}"


def test_the_scan_sees_private_modules_names_and_attributes():
    src = ("import torch\nimport torch.distributed as dist\nfrom torch.utils._pytree import tree_flatten\n"
           "from trl.trainer import _helper\nimport json\nx = dist._world\ny = json._default_decoder\n"
           "z = torch.cuda.is_available()\nself._own = 1\n")
    assert reaches(Path("m.py"), src) == {"m.py: from torch.utils._pytree import tree_flatten",
                                          "m.py: from trl.trainer import _helper", "m.py: dist._world"}
