"""The import contract, enforced by ``make lint``: no cycles, ``reference`` independent, layers one way.

Every import of ``reference/`` and ``harness/`` modules is read from the source
(function-level "lazy" imports included) and resolved to a module.  Three rules:

1. ``reference`` imports nothing from ``harness``.
2. No cycle among modules.
3. No import from a lower layer to a higher one.  The layers are stated by folder (``LAYERS``): a module's
   layer is its folder's, so a new file needs no entry; a new folder, or a new module at the top of
   ``harness/``, must be placed, and until it is, it is reported.

Prints one line per violation and exits 1; prints nothing and exits 0 when the contract holds.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reference", "harness")

# Bottom first: a module may import from its own layer or any layer below it.  An entry is a folder
# (``harness.planning``) or a module at the top of ``harness/`` (``harness.errors``).  The stages of a run
# come in their order (planning, building, judging, recording); the fast paths sit under the stages that
# call them; the backends, the mutants (broken backends) and the scenarios run on the stages; running
# drives the scenarios; the subcommands' own packages, the commands and the CLI come last.
LAYERS = [
    ["reference"],                       # the oracles: torch only
    ["harness.errors", "harness.interrupts", "harness.cores", "harness.allocator", "harness.jit_cache",
     "harness.environment", "harness.phases"],
    ["harness.planning"],
    ["harness.fast"],
    ["harness.building"],
    ["harness.judging"],
    ["harness.recording"],
    ["harness.backends"],
    ["harness.mutants"],
    ["harness.scenarios"],
    ["harness.running"],
    ["harness.bench", "harness.report", "harness.selfcheck", "harness.fuzz"],
    ["harness.commands"],
    ["harness.cli"],
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Modules ``path`` imports (resolved, inside our packages), wherever the import statement sits."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)   # "from . import x" imports module x
    return {m for m in found if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    edges = {}
    for name, path in files.items():
        targets = set()
        for m in imports_of(path, name):
            while m and m not in files:          # "from .x import Name": the module is .x
                m = m.rpartition(".")[0]
            if m and m != name and not name.startswith(m + "."):   # a package's own __init__ is not an edge
                targets.add(m)
        edges[name] = targets
    return edges


def layer(name: str) -> int | None:
    """The index in ``LAYERS`` of the entry naming ``name``'s folder (or ``name`` itself); None where none does."""
    best, depth = None, -1
    for i, entries in enumerate(LAYERS):
        for p in entries:
            if (name == p or name.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    return best


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def violations(edges: dict[str, set[str]]) -> list[str]:
    problems = [f"import cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    problems += [f"{m} is in no layer: name its folder in scripts/check_imports.py's LAYERS"
                 for m in sorted(edges) if layer(m) is None]
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            if src.startswith("reference") and dst.startswith("harness"):
                problems.append(f"{src} imports {dst}: reference must not depend on harness")
            elif None not in (layer(src), layer(dst)) and layer(dst) > layer(src):
                problems.append(f"{src} imports {dst}: a lower layer imports a higher one")
    return problems


def main() -> int:
    problems = violations(graph())
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
