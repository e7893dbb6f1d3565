"""``run``'s backend-dependent choices: ``--resume`` keeps the rows of a kernel that fixes a parameter (they
hash the case as it ran), and ``--require-kernel`` counts an engine profile of a real kernel as that kernel."""

import textwrap

import pytest

from harness.cli import main
from harness.commands.run_cmd import is_real_kernel
from harness.recording.results import read_rows

PLUGIN = """
import dataclasses
from harness.backends.base import Capabilities
from harness.backends.torch_backend import TorchBackend

class Fixed(TorchBackend):          # FlagGems-like: no scale argument, computes at 1/sqrt(d_qk)
    name = "fixed-scale"
    capabilities = Capabilities(fixed_softmax_scale="1/sqrt(d_qk)")

    def info(self):
        return {"package": "fixed-kernel", "version": "1"}

    def run(self, inputs):
        return super().run(dataclasses.replace(inputs, softmax_scale=inputs.q.shape[-1] ** -0.5))

class Sixteenth(Fixed):             # the same kernel, name and version, declaring another scale
    capabilities = Capabilities(fixed_softmax_scale=1 / 16)

    def run(self, inputs):
        return TorchBackend.run(self, dataclasses.replace(inputs, softmax_scale=1 / 16))
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv] + ["--device", "cpu", "--workers", "0", "--no-progress"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, err


def test_resume_keeps_a_fixed_scale_kernels_rows_and_reruns_them_when_its_declaration_changes(tmp_path, capsys):
    module = tmp_path / "fixed_plugin.py"
    module.write_text(textwrap.dedent(PLUGIN))
    path = tmp_path / "r.jsonl"
    code, _ = run(capsys, "run", "--suite", "smoke", "--backend", f"{module}:Fixed", "--out", path)
    assert code == 0
    recorded = len(read_rows(path))
    code, err = run(capsys, "run", "--suite", "smoke", "--backend", f"{module}:Fixed", "--resume", path)
    assert code == 0 and "0 case(s) from smoke" in err and f"{recorded} kept" in err
    assert len(read_rows(path)) == recorded
    code, err = run(capsys, "run", "--suite", "smoke", "--backend", f"{module}:Sixteenth", "--resume", path)
    assert code == 0 and f"{recorded} case(s) from smoke" in err and "case definition changed" in err
    assert len(read_rows(path)) == 2 * recorded


@pytest.mark.parametrize("spec, real", [("flashmla", True), ("flashmla@sglang-0.5.23", True), ("flaggems", True),
                                        ("torch", False), ("reference", False), ("torch@x", False),
                                        ("mutant:drop-scale", False), ("my_module:Kernel", False)])
def test_require_kernel_counts_an_engine_profile_of_a_real_kernel(spec, real):
    assert is_real_kernel(spec) is real


def test_require_kernel_accepts_a_profile_spec_alone(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    code, err = run(capsys, "run", "--suite", "smoke", "--backend", "flashmla@sglang-0.5.23", "--require-kernel",
                    "--out", path)
    assert "--require-kernel" not in err and path.exists()      # it ran (unsupported on a CPU-only host)
    code, err = run(capsys, "run", "--suite", "smoke", "--backend", "torch", "--require-kernel", "--out", path)
    assert code == 2 and "--require-kernel: no real kernel" in err
