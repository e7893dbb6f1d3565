"""``mla-verify list`` for people: a table per backend (its package or the command that installs it, whether
it can run here, what it runs and its limits in words), cases marked with why a backend will not run them,
every line within 100 columns; ``--json`` is the machine form."""

import importlib.util
import textwrap

import pytest
import torch
from helpers import run_cli

from harness.backends import BUILTIN, Feature, builtin_class
from harness.commands.capability_words import DENSE, OTHER, SPARSE, in_words
from harness.planning.cases import load_suite
from harness.running.backend_loader import load_backend
from harness.running.runner import default_device, precheck

SMOKE = load_suite("smoke")
NO_CUDA = not torch.cuda.is_available()


def listed(*argv) -> str:
    code, out, err = run_cli(["list", *argv])
    assert code == 0, err
    return out


def rows(out: str, label: str) -> list[str]:
    """The text of each ``label`` row, its wrapped lines joined."""
    found, current = [], None
    for line in out.splitlines():
        if line.startswith(f"  {label} ") and line[2 + len(label):].startswith("  "):
            current = [line[2 + len(label):].strip()]
            found.append(current)
        elif current is not None and line.startswith(" " * 22):
            current.append(line.strip())
        else:
            current = None
    return [" ".join(parts) for parts in found]


def write_plugin(tmp_path, body: str) -> str:
    path = tmp_path / "plugin.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


# ---- width --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["list"], *[["list", "--backend", name] for name in [*BUILTIN, "auto"]],
    ["list", "--suite", "smoke", "--backend", "flashmla"], ["list", "--suite", "sparse", "--backend", "reference"],
], ids=lambda argv: " ".join(argv[1:]) or "list")
def test_every_line_fits_100_columns(argv):
    code, out, err = run_cli(argv)
    assert code == 0, err
    too_wide = [line for line in out.splitlines() if len(line) > 100]
    assert not too_wide, too_wide[:3]


def test_the_default_form_is_words_not_json():
    out = listed()
    assert '{"' not in out and '"modes"' not in out
    assert "suites:" in out and "backends" in out


# ---- packages: what imports, what to install ------------------------------------------------------------

def test_every_builtin_backend_declares_its_package_and_install_command():
    for name in BUILTIN:
        declared = builtin_class(name)
        assert declared.packages and declared.install, name


@pytest.mark.parametrize("name", list(BUILTIN))
def test_a_backend_whose_package_does_not_import_names_its_install_command(name):
    out = listed("--backend", name)
    (package,) = rows(out, "package")
    installs = rows(out, "install")
    if "does not import here" in package:
        assert installs == [builtin_class(name).install], out
        assert installs[0].startswith(("pip install", "make ")), installs
    else:
        assert "imports" in package and not installs, out


def test_every_builtin_names_its_install_command_when_nothing_imports(monkeypatch):
    """Whatever this machine has installed: with every import failing, each backend names its command."""
    from harness.backends import optional
    monkeypatch.setattr(optional, "try_import", lambda module: (None, f"{module}: ImportError: blocked"))
    for name in BUILTIN:
        out = listed("--backend", name)
        (package,) = rows(out, "package")
        assert "does not import here" in package and "blocked" in package, (name, package)
        assert rows(out, "install") == [builtin_class(name).install], name


@pytest.mark.skipif(importlib.util.find_spec("flash_mla") is not None
                    or importlib.util.find_spec("sgl_kernel") is not None, reason="a FlashMLA package imports here")
def test_flashmla_that_does_not_import_says_so_and_how_to_install_apart_from_the_device():
    out = listed("--backend", "flashmla")
    (package,) = rows(out, "package")
    assert "does not import here" in package and "No module named 'flash_mla'" in package
    assert rows(out, "install")[0].startswith("pip install --no-deps sgl-flash-mla==1.0.0")
    (devices,) = rows(out, "devices")
    assert devices.startswith("cuda only; ")
    assert ("cannot run here: no CUDA device" if NO_CUDA else "runs here on cuda") in devices


@pytest.mark.skipif(importlib.util.find_spec("flash_mla") is not None
                    or importlib.util.find_spec("sgl_kernel") is not None, reason="a FlashMLA package imports here")
def test_with_a_gpu_but_no_package_the_device_row_says_it_could_run(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Pretend GPU")
    out = listed("--backend", "flashmla")
    assert "does not import here" in rows(out, "package")[0]
    assert rows(out, "devices") == ["cuda only; runs here on cuda (CUDA device Pretend GPU)"]


def test_a_kernel_backends_declared_package_names_a_module_it_imports():
    for name in BUILTIN:
        declared = builtin_class(name)
        modules = getattr(declared, "modules", None)    # LazyKernel backends list theirs
        if modules:
            assert any(module in modules for module, _ in declared.packages), name


# ---- capabilities in words -------------------------------------------------------------------------------

def test_limits_are_in_words():
    sparse = listed("--backend", "flashmla-sparse")
    assert "topk a multiple of 64" in " ".join(rows(sparse, "sparse limits"))
    assert "at most 128 heads" in " ".join(rows(sparse, "sparse limits"))
    assert "topk_multiple" not in sparse
    flaggems = " ".join(rows(listed("--backend", "flaggems"), "limits"))
    for words in ("one KV head", "at most 1 query token a request", "causal only", "returns no LSE",
                  "softmax scale fixed at 1/sqrt(d_qk)"):
        assert words in flaggems, words
    assert "page size 64" in rows(listed("--backend", "flashmla"), "limits")[0]


def test_every_key_builtin_backends_declare_has_words():
    for name in BUILTIN:
        backend = load_backend(name)
        assert OTHER not in in_words(backend.capabilities.describe(), DENSE), name
        if backend.supports(Feature.SPARSE):
            assert OTHER not in in_words(backend.capabilities.sparse.describe(), SPARSE), name


def test_an_unknown_key_is_shown_as_key_and_value(tmp_path):
    plugin = write_plugin(tmp_path, """
        from harness.backends.base import Capabilities
        from harness.backends.torch_backend import TorchBackend

        class MoreCapabilities(Capabilities):
            def describe(self):
                return {**super().describe(), "max_pages": 4096, "kv_order": ["nhd"]}

        class Wider(TorchBackend):
            name = "wider"
            capabilities = MoreCapabilities()
    """)
    out = listed("--backend", f"{plugin}:Wider")
    assert rows(out, "other") == ['max_pages: 4096; kv_order: ["nhd"]']


def test_a_value_of_an_unexpected_type_is_shown_not_raised():
    assert in_words({"page_sizes": 64}, DENSE) == {OTHER: ["page_sizes: 64"]}


# ---- cases a backend will not run -------------------------------------------------------------------------

def marked(out: str) -> dict[str, str]:
    """case id -> the reason printed under it (its wrapped lines joined), for each case marked x."""
    lines = out.splitlines()
    found = {}
    for i, line in enumerate(lines):
        if line.startswith("x "):
            reason, j = [lines[i + 1].strip()], i + 2      # below the case: why, then its inputs
            while j < len(lines) and lines[j].startswith(" " * 8):
                reason.append(lines[j].strip())
                j += 1
            found[line.split()[1]] = " ".join(reason)
    return found


def test_the_cases_a_backend_cannot_take_are_marked_with_its_reason(tmp_path):
    plugin = write_plugin(tmp_path, """
        from harness.backends.base import Capabilities
        from harness.backends.torch_backend import TorchBackend

        class OnlyBf16(TorchBackend):
            name = "only-bf16"
            capabilities = Capabilities(dtypes=("bf16",))
    """)
    out = listed("--suite", "smoke", "--backend", f"{plugin}:OnlyBf16")
    fp8 = {c.id for c in SMOKE.cases if c.dtype != "bf16"}
    assert fp8 and len(fp8) < len(SMOKE.cases)
    assert marked(out) == {i: "unsupported: dtype fp8_e4m3 not supported (supports bf16)" for i in fp8}
    assert f"{len(fp8)} of {len(SMOKE.cases)} cases not run" in out
    for case in SMOKE.cases:        # every case listed, marked or not
        assert case.id in out


def test_the_marks_are_the_runners_precheck():
    out = listed("--suite", "smoke", "--backend", "flashmla")
    backend, device = load_backend("flashmla"), default_device()
    expected = {}
    for case in SMOKE.cases:
        refused = precheck(case, backend, device)
        if refused is not None:
            expected[case.id] = f"unsupported: {refused.reason}"
    assert marked(out) == expected
    if NO_CUDA:
        assert len(expected) == len(SMOKE.cases)


def test_a_sparse_case_is_marked_by_its_scenarios_refusal():
    out = listed("--suite", "sparse", "--backend", "reference")
    sparse = load_suite("sparse")
    reasons = marked(out)
    assert set(reasons) == {c.id for c in sparse.cases}
    assert all("reference has no sparse entry point (run_sparse)" in r for r in reasons.values())


def test_a_suite_without_a_backend_marks_nothing():
    out = listed("--suite", "smoke")
    assert not marked(out) and out.splitlines()[1].startswith(f"  {SMOKE.cases[0].id} ")


def test_an_unknown_backend_is_bad_input():
    for argv in (["--backend", "nosuch"], ["--suite", "smoke", "--backend", "nosuch"]):
        code, out, err = run_cli(["list", *argv])
        assert code == 2 and out == "", argv
        assert err.startswith("mla-verify: error: unknown backend 'nosuch'") and err.count("\n") == 1


# ---- the machine form -------------------------------------------------------------------------------------

def test_json_is_the_machine_form():
    out = listed("--json", "--backend", "flashmla-sparse")
    lines = out.splitlines()
    assert lines[0] == "backends:"
    assert lines[1].split(None, 1)[0] == "flashmla-sparse" and lines[1].split(None, 1)[1].startswith('{"package": ')
    assert lines[2].strip().startswith('supports {"modes": ["decode", "verify"]')
    assert lines[3].strip().startswith('sparse {"kv_formats": ["v32", "v4"]') and '"topk_multiple": 64' in lines[3]


def test_json_with_a_suite_lists_its_cases_unmarked():
    out = listed("--json", "--suite", "smoke", "--backend", "flashmla")
    assert out == listed("--suite", "smoke")
