"""Small modules with one job: no module of ``harness/`` or ``reference/`` is over 300 lines, and no function
in them (a method, a nested function, a Triton kernel defined inside its maker) over 60, counted from its
``def`` line to its last line."""

import ast
from pathlib import Path

from helpers import REPO

MODULE_LINES = 300
FUNCTION_LINES = 60


def oversized(root: Path, packages=("harness", "reference")) -> list[str]:
    """``path: N lines`` for each module over the limit and ``path:line name: N lines`` for each function."""
    found = []
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(root)
        if len(source.splitlines()) > MODULE_LINES:
            found.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_is_over_its_limit():
    assert oversized(REPO) == []


def test_an_oversized_module_and_a_long_nested_function_are_found(tmp_path):
    (tmp_path / "harness" / "stage").mkdir(parents=True)
    (tmp_path / "reference").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES - 1))         # def + 59 lines: at the limit
    (tmp_path / "harness" / "stage" / "fits.py").write_text(f"def at_the_limit():\n{body}")
    inner = "".join(f"        y{i} = {i}\n" for i in range(FUNCTION_LINES))
    (tmp_path / "harness" / "stage" / "kernel.py").write_text(f"def maker():\n    def kernel():\n{inner}\n"
                                                               "    return kernel\n")
    (tmp_path / "reference" / "big.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    assert oversized(tmp_path) == [f"harness/stage/kernel.py:1 maker: {FUNCTION_LINES + 4} lines",
                                   f"harness/stage/kernel.py:2 kernel: {FUNCTION_LINES + 1} lines",
                                   f"reference/big.py: {MODULE_LINES + 1} lines"]
