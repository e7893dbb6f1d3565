"""Each Triton kernel's definition and first launch are a probe (``reference/triton_probe.usable``): where
this Triton cannot define or build the kernel, one warning line, and the PyTorch form runs, so no verdict is
lost."""

import importlib

import pytest

KERNELS = [("harness.judging.compare_kernel", "the comparison's Triton kernel"),
           ("reference.widen_kernel", "the oracle's key-widening Triton kernel"),
           ("harness.building.sparse_keys_kernel", "the sparse oracle's Triton kernel")]


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
