"""The code the docs name still exists: every backquoted dotted name whose first part is one of our modules
(``harness.recording.results.load``, ``worker_pool.WorkerPool.start_spares``, ``isolation.hand_out``) resolves.

What is checked, and what is not (so the check stays exact):
- a name is checked when its first part is ``harness``, ``reference`` or the last part of one of their
  modules (``isolation``, ``keysets``); other names (``torch.cuda``, ``flag_gems.fused``) are left alone;
- it resolves when some module of that name has the rest as attributes or submodules;
- a name that reads like a module but is a result row's key (``conventions.engine``, ``bench.kernel_us``,
  ``placement.name``), a check's name (``inputs.unchanged``) or a field of ``Inputs`` (``inputs.out``) is
  taken as that, unresolved as code: ``ROW_SECTIONS`` lists the row's sections by hand (a stale code name
  under one of them is not caught);
- docs/archive/ is history: it names the code as it was at each run's commit, so it is not checked.
"""

import dataclasses
import importlib
import re

from helpers import REPO

from harness.building.inputs import Inputs
from harness.judging import checks

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NAME = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
FILE_ENDINGS = {"py", "md", "toml", "sh", "jsonl", "json", "html", "txt", "png", "yml", "whl", "so", "cu", "h",
                "cuh", "log", "csv", "xml"}
ROW_SECTIONS = {"case", "bench", "conventions", "placement", "backend_info", "metrics", "fixed_by_kernel", "env"}


def modules_by_last_part() -> dict[str, list[str]]:
    """``{"isolation": ["harness.running.isolation"], ...}`` for every module of harness and reference."""
    found = {}
    for package in ("harness", "reference"):
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found.setdefault(parts[-1], []).append(".".join(parts))
    return found


def resolves(module: str, rest: list[str]) -> bool:
    obj, path = importlib.import_module(module), module
    for part in rest:
        if hasattr(obj, part):
            obj, path = getattr(obj, part), f"{path}.{part}"     # a submodule imported already: go on from it
            continue
        try:
            obj = importlib.import_module(f"{path}.{part}")
        except ImportError:
            return False
        path = f"{path}.{part}"
    return True


def not_code(name: str) -> bool:
    """A row key, a check's name or an ``Inputs`` field, written like a module's attribute."""
    first, _, rest = name.partition(".")
    fields = {f.name for f in dataclasses.fields(Inputs)} | set(dir(Inputs))
    check_names = {v for v in vars(checks).values() if isinstance(v, str)}
    return first in ROW_SECTIONS or name in check_names or (first == "inputs" and rest.split(".")[0] in fields)


def stale_names(text: str, modules: dict[str, list[str]]) -> list[str]:
    stale = []
    for m in NAME.finditer(text):
        parts = m.group(1).split(".")
        if parts[-1] in FILE_ENDINGS:
            continue
        candidates = [parts[0]] if parts[0] in ("harness", "reference") else modules.get(parts[0], [])
        if candidates and not any(resolves(c, parts[1:]) for c in candidates) and not not_code(m.group(1)):
            stale.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}")
    return stale


def test_every_module_name_the_docs_quote_exists():
    modules = modules_by_last_part()
    stale = [f"{path.relative_to(REPO)} {s}" for path in DOCS for s in stale_names(path.read_text(), modules)]
    assert not stale, "\n".join(stale)


def test_a_stale_name_is_caught():
    modules = modules_by_last_part()
    text = ("`isolation.start_spares`, `harness.recording.results.no_such`, `worker_pool.WorkerPool.start_spares`, "
            "`harness.recording.results.load`, `inputs.out`, `inputs.unchanged`, `conventions.engine`, `torch.cuda.x`, "
            "`chunk.py`")
    assert stale_names(text, modules) == ["line 1: isolation.start_spares", "line 1: harness.recording.results.no_such"]
