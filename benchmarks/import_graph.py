"""Print the import graph's cycles and each module's function-level imports, for ``pardnn`` and its frontends.

Every module of the installed packages (``pardnn`` and whatever
``pyproject.toml`` maps into it, such as ``frontends/`` as
``pardnn.frontends``) is parsed with `ast`, never imported, so the script
needs none of the optional extras. An edge A -> B means that A's code
imports B:

* ``module``: an ``import``/``from ... import`` that runs when A is imported
  (module level, class bodies, module-level ``try``/``if``);
* ``function``: one inside a function, run when the function is called;
* ``by name``: a string constant equal to a dotted module name (an
  ``importlib.import_module`` table such as the input registry's); logger
  names (``getLogger("...")``) and bare package names (``"pardnn"`` is also
  a method's and a format's name) are not counted.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
else to ``pkg``. The implicit import of a module's parent package (importing
``a.b.c`` first runs ``a/__init__.py`` and ``a/b/__init__.py``) is not an
edge, as in other import linters: otherwise every package ``__init__`` that
re-exports a submodule would close a cycle with it. Imports under ``if
TYPE_CHECKING:`` are not edges.

It prints the strongly connected components with more than one module (an
import cycle, counting all three kinds of edge, with the edges inside each),
the imports from the core into ``pardnn.frontends`` (the core is ``pardnn``
less its frontends, backend and command line), and the number of
function-level import statements per module (of package modules and of
everything else). Exit status 1 when there is a cycle.

Run: python benchmarks/import_graph.py [--root DIR] [--all]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("module", "function", "by name")
NOT_CORE = ("pardnn.frontends", "pardnn.backend", "pardnn.cli", "pardnn.inputs")   # pardnn.inputs: the registry
# before issue 13 (the script also reads older checkouts: --root)


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))   # target -> kinds
    function_imports: int = 0            # function-level import statements of package modules
    function_imports_other: int = 0      # ... of anything else (stdlib, numpy, TensorFlow, ...)


def package_roots(root: Path) -> dict[str, Path]:
    """Import name -> directory of each top-level package and of each package ``package-dir`` maps elsewhere."""
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {name: root / rel for name, rel in tool.get("package-dir", {}).items() if name}
    packages = tool.get("packages", [])
    names = packages if isinstance(packages, list) else \
        [p.rstrip("*").rstrip(".") for p in packages.get("find", {}).get("include", [])]
    for name in names:
        top = name.split(".")[0]
        if not any(name == r or name.startswith(r + ".") for r in roots) and (root / top / "__init__.py").exists():
            roots.setdefault(top, root / top)
    return roots


def discover(roots: dict[str, Path]) -> dict[str, Module]:
    """Every ``.py`` file under each root, named as it is imported."""
    mods: dict[str, Module] = {}
    for pkg, base in roots.items():
        others = [b for b in roots.values() if b != base and base in b.parents]
        for path in sorted(base.rglob("*.py")):
            if any(o in path.parents for o in others):   # a nested directory mapped to another package
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join([pkg, *(parts[:-1] if is_package else parts)])
            mods[name] = Module(name, path, is_package)
    return mods


def _resolve(name: str, known: dict[str, Module]) -> str | None:
    """The longest known module that ``name`` is or lies in."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _absolute(mod: Module, level: int, target: str | None) -> str:
    if not level:
        return target or ""
    base = mod.name.split(".")
    if not mod.is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
           (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def scan(mod: Module, known: dict[str, Module]) -> None:
    """Fill ``mod.edges`` and its function-level import counts."""
    tree = ast.parse(mod.path.read_text(), str(mod.path))
    loggers: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getLogger":
            loggers.update(id(a) for a in node.args)

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        kind = "function" if in_function else "module"
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(mod, node.level, node.module)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in known and id(node) not in loggers:
            targets, kind = [node.value], "by name"
        if isinstance(node, (ast.Import, ast.ImportFrom)) and in_function:
            inside = [t for t in targets if _resolve(t, known)]
            mod.function_imports += 1 if inside else 0
            mod.function_imports_other += 0 if inside else 1
        for t in targets:
            hit = _resolve(t, known)
            if hit and hit != mod.name:
                mod.edges[hit].add(kind)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(tree, False)


def strongly_connected(mods: dict[str, Module]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively; the components in discovery order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in mods:
        if start in index:
            continue
        work = [(start, iter(sorted(mods[start].edges)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(mods[w].edges))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="The repository (default: this script's).")
    ap.add_argument("--all", action="store_true", help="List every module's function-level imports, zeros too.")
    args = ap.parse_args()
    roots = package_roots(args.root)
    mods = discover(roots)
    for m in mods.values():
        scan(m, mods)
    print(f"{len(mods)} modules in {', '.join(f'{k} ({v.relative_to(args.root)}/)' for k, v in sorted(roots.items()))}")

    cycles = [c for c in strongly_connected(mods) if len(c) > 1]
    print(f"\nimport cycles (strongly connected components of more than one module): {len(cycles)}")
    for comp in cycles:
        print(f"  {len(comp)} modules: {', '.join(comp)}")
        for a in comp:
            for b in sorted(mods[a].edges):
                if b in comp:
                    print(f"    {a} -> {b}  ({', '.join(k for k in KINDS if k in mods[a].edges[b])})")

    core = [m for m in mods.values() if m.name.startswith("pardnn") and not m.name.startswith(NOT_CORE)]
    upward = [(m.name, b, mods[m.name].edges[b]) for m in core for b in sorted(m.edges)
              if b.startswith(("pardnn.frontends", "frontends"))]
    print(f"\ncore -> frontends imports: {len(upward)}")
    for a, b, kinds in upward:
        print(f"  {a} -> {b}  ({', '.join(k for k in KINDS if k in kinds)})")

    rows = sorted(mods.values(), key=lambda m: (-(m.function_imports + m.function_imports_other), m.name))
    total = sum(m.function_imports for m in mods.values()), sum(m.function_imports_other for m in mods.values())
    print(f"\nfunction-level imports: {total[0]} of package modules, {total[1]} of others")
    print(f"  {'package':>7}  {'other':>5}  module")
    for m in rows:
        if args.all or m.function_imports or m.function_imports_other:
            print(f"  {m.function_imports:>7}  {m.function_imports_other:>5}  {m.name}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
