"""One door to other libraries' privates: outside the package ``rlm_lab/compat/`` no module imports a private module
or name of a third-party library (``torch.utils._pytree``, ``from x import _y``), reads or writes a private attribute
through a library module it imported (``c10d._resolve_process_group``), or of an object a library returned, where the
AST can tell: a name bound (in the same function, or at module level) from a call rooted at a library name or at such
an object (``pg = dist.ProcessGroup(...)``, then ``pg._register_backend``; ``ctx = mp.get_context()``,
``queue = ctx.SimpleQueue()``, then ``queue._reader``). ``self``/``cls`` and what rlm_lab's own functions return are
not library objects; a library object reached through an attribute or a parameter (``self.trainer._tokenizer``)
needs types to see and is not caught here: ``tests/test_compat.py`` names the privates compat covers."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names)

# reaches still outside the door; entries must stay true (checked). Empty since issue 41 (deliverable 5).
KNOWN: set[str] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node):
    """The name an attribute / call / subscript chain starts from (``a`` of ``a.b().c[0]``), else None."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _scopes(tree):
    """The module and each function, each with the nodes of its own body (nested functions are their own scope)."""
    out = []

    def visit(scope, body):
        nodes = []
        stack = list(body)
        while stack:
            n = stack.pop()
            nodes.append(n)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                out.append(n)
                continue
            stack.extend(ast.iter_child_nodes(n))
        scope_nodes[id(scope)] = nodes

    scope_nodes = {}
    visit(tree, tree.body)
    i = 0
    while i < len(out):
        f = out[i]
        visit(f, [*ast.iter_child_nodes(f)])
        i += 1
    return [(tree, scope_nodes[id(tree)])] + [(f, scope_nodes[id(f)]) for f in out]


def _bound(node):
    """``(target, value)`` pairs a statement binds: ``x = v``, ``x: T = v``, ``a, b = v1, v2`` (element-wise),
    ``a, b = v`` (both from v), ``with v as x``, ``x := v``."""
    pairs = []
    if isinstance(node, ast.Assign):
        pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        pairs = [(i.optional_vars, i.context_expr) for i in node.items if i.optional_vars is not None]
    out = []
    for t, v in pairs:
        if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
            out += [(e.id, ve) for e, ve in zip(t.elts, v.elts) if isinstance(e, ast.Name)]
        elif isinstance(t, ast.Tuple):
            out += [(e.id, v) for e in t.elts if isinstance(e, ast.Name)]
        elif isinstance(t, ast.Name):
            out.append((t.id, v))
    return out


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
    for _scope, nodes in _scopes(tree):
        objs = set()  # names bound in this scope to what a library call returned
        changed = True
        while changed:  # to a fixed point: ctx = mp.get_context(); q = ctx.SimpleQueue()
            changed = False
            for n in nodes:
                for name, value in _bound(n):
                    if name in ("self", "cls") or name in objs or not isinstance(value, (ast.Call, ast.Attribute)):
                        continue
                    if _root(value) in libs or (_root(value) in objs and _root(value) != name):
                        objs.add(name)
                        changed = True
        for n in nodes:
            if isinstance(n, ast.Attribute) and _private(n.attr):
                base = _root(n.value)
                if base in libs or base in objs:
                    out.add(f"{where}: {ast.unparse(n)}")
    return out


def test_no_private_of_another_library_outside_compat():
    found = set()
    for p in sorted((ROOT / "rlm_lab").rglob("*.py")):
        if "compat" not in p.relative_to(ROOT).parts[1:-1]:
            found |= reaches(p, p.read_text())
    assert not found - KNOWN, f"reach these through rlm_lab.compat: {sorted(found - KNOWN)}"
    assert not KNOWN - found, f"moved (remove from KNOWN): {sorted(KNOWN - found)}"


def test_the_scan_sees_private_modules_names_and_attributes():
    src = ("import torch\nimport torch.distributed as dist\nfrom torch.utils._pytree import tree_flatten\n"
           "from trl.trainer import _helper\nimport json\nx = dist._world\ny = json._default_decoder\n"
           "z = torch.cuda.is_available()\nself._own = 1\n")
    assert reaches(Path("m.py"), src) == {"m.py: from torch.utils._pytree import tree_flatten",
                                          "m.py: from trl.trainer import _helper", "m.py: dist._world"}


def test_the_scan_sees_privates_of_objects_a_library_returned():
    # each reach here is one the package had before issue 41 moved it into compat (weights.py, launch.py, ray_head.py)
    src = ("import torch.distributed as dist\nimport torch.multiprocessing as mp\n"
           "from rlm_lab.parallel.launch import bound_store\n\n"
           "def make_group(store, rank, world, timeout):\n"
           "    pg = dist.ProcessGroup(store, rank, world)\n"
           "    opts = dist.ProcessGroupNCCL.Options()\n"
           "    opts._timeout = timeout\n"
           "    impl, kind = dist.ProcessGroupGloo(store, rank, world), dist.ProcessGroup.BackendType.GLOO\n"
           "    pg._register_backend(kind, impl)\n"
           "    impl._private_too\n"
           "    return pg\n\n"
           "def launch():\n"
           "    ctx = mp.get_context('spawn')\n"
           "    queue = ctx.SimpleQueue()\n"
           "    return queue._reader\n\n"
           "def own(trainer):\n"
           "    store = bound_store('h', 1)\n"  # rlm_lab's own object
           "    pg = make_group(store, 0, 1, 5)\n"  # this module's own function: not a library object
           "    self = dist.group.WORLD\n"
           "    return store._lock, pg._register_backend, trainer._tokenizer, self._x\n")
    assert reaches(Path("m.py"), src) == {"m.py: opts._timeout", "m.py: pg._register_backend",
                                          "m.py: impl._private_too", "m.py: queue._reader"}


def test_a_library_object_from_with_and_unpacking_is_seen():
    src = ("import ray\nimport ray.util as u\n"
           "with ray.init() as ctx:\n    ctx._address_info\n"
           "a, b = u.get_node_ip_address(), 1\na._x\nb._y\n"
           "c, d = ray.get_runtime_context()\nd._z\n")
    assert reaches(Path("m.py"), src) == {"m.py: ctx._address_info", "m.py: a._x", "m.py: d._z"}
