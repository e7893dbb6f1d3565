"""Each Triton kernel's definition and first launch are a probe (``harness/fast/triton_probe.usable``): where
this Triton cannot define or build the kernel, one warning line, and the PyTorch form runs, so no verdict is
lost.  The fast paths live in one folder, each beside the test that proves it equal to its PyTorch form."""

import importlib

import pytest
from helpers import REPO

KERNELS = [("harness.fast.compare_kernel", "the comparison's Triton kernel"),
           ("harness.fast.widen_kernel", "the oracle's key-widening Triton kernel"),
           ("harness.fast.sparse_keys_kernel", "the sparse oracle's Triton kernel"),
           ("harness.fast.sparse_write_kernel", "the sparse records' Triton writer"),
           ("harness.fast.sparse_softmax_kernel", "the sparse oracle's softmax kernel")]


class Unbuildable:
    """A kernel whose every launch fails as a compiler error does."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise RuntimeError("PassManager::run failed\nmore lines")
        return launch


def undefinable():
    raise TypeError("jit() got an unexpected keyword argument 'do_not_specialize_on_alignment'")


@pytest.mark.parametrize("module_name, what", KERNELS)
@pytest.mark.parametrize("failure", ["launch", "definition"])
def test_a_kernel_this_triton_cannot_build_falls_back_to_pytorchs_form(module_name, what, failure, monkeypatch,
                                                                      capsys):
    module = importlib.import_module(module_name)
    monkeypatch.setattr(module, "_triton_kernel", Unbuildable if failure == "launch" else undefinable)
    module.usable_kernel.cache_clear()
    try:
        assert module.usable_kernel("cpu") is None
        assert module.usable_kernel("cpu") is None            # decided once: no second warning
    finally:
        module.usable_kernel.cache_clear()
    err = capsys.readouterr().err
    error = "RuntimeError: PassManager::run failed" if failure == "launch" else "TypeError: jit() got"
    assert err.count("\n") == 1 and f"{what} does not build on cpu ({error}" in err, err


def test_a_float64_passes_to_a_kernel_as_its_bits_unrounded():
    import struct

    from harness.fast.triton_probe import float64_bits
    for x in (0.1, 1e-300, -3.0, 2.0 ** 60 + 1.0, float("inf")):
        assert struct.unpack("<d", struct.pack("<q", float64_bits(x)))[0] == x
    as_float32 = struct.unpack("<f", struct.pack("<f", 0.1))[0]        # what Triton would have passed
    assert struct.unpack("<d", struct.pack("<q", float64_bits(0.1)))[0] != as_float32


def test_every_fast_path_has_its_test_by_name_and_its_probe_here():
    fast = sorted(p.stem for p in (REPO / "harness" / "fast").glob("*.py") if p.stem != "__init__")
    assert fast, "harness/fast/ holds no module"
    assert [m for m in fast if not (REPO / "tests" / "fast" / f"test_{m}.py").exists()] == []
    assert sorted(name.rpartition(".")[2] for name, _ in KERNELS) == [m for m in fast if m != "triton_probe"]
