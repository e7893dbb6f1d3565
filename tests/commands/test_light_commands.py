"""Every command is light at import: building its parser (what ``mla-verify NAME ...`` does before ``main``)
imports no torch, so ``report`` and ``list --help`` start at once and ``run`` starts its workers first (cli.py)."""

import subprocess
import sys

import pytest

from harness.cli import _command_names


@pytest.mark.parametrize("name", _command_names())
def test_building_a_commands_parser_imports_no_torch(name):
    code = ("import sys\nfrom harness import cli\ncli.build_parser(sys.argv[1])\n"
            "print(sorted(m for m in ('torch', 'harness.planning.cases', 'harness.mutants') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"], f"building {name}'s parser imported {result.stdout.strip()}"


def test_the_check_sees_a_heavy_import():
    """The same probe, on a module that does import torch, finds it (so the test above can fail)."""
    code = "import sys\nimport harness.planning.cases\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["True"], result.stderr
