"""The noise floor: how far an honest low-precision implementation of the same computation lands from the
float64 oracle, under the same bound, and how many times further the kernel lands.

The emulation is the oracle's own arithmetic in float32 on the kernel's inputs (bf16 or fp8
values as given), its out rounded to the dtype the engine needs and its LSE kept in float32: what a correct
kernel of that precision computes, give or take its order of summation.  Its error against the float64
oracle, measured as the kernel's worst element is (``|err| / (atol + rtol |expected|)``, ``compare``), is
the floor; every compared row records the floor and the kernel's error over it (``over_floor``) for out and
LSE, a passing one too: how close a kernel runs to what its precision allows is the scoreboard's to show
before it fails.  The emulation is a second oracle, at a cost docs/speed.md measures.  A finding
that says "38x the noise floor" tells a kernel author how far the kernel is from what its precision allows,
which "1.7x the bound" does not.

The gate stays on the written error model (``tolerances``): the ratio explains a verdict, it never makes one.
FlexAttention's tests compare the same way (a kernel's error against a low-precision eager reference's, both
against a float64 golden).
"""

import math

import torch

from .checks import FLOOR_TENSORS

FLOOR_DTYPE = torch.float32
EMULATION = "float32"          # what a row's ``noise_floor.emulation`` says: the module doc's emulation


def worst_ratios(floor: tuple, expected: tuple, out_dtype: torch.dtype, tol) -> torch.Tensor:
    """The emulation's worst ``|err| / (atol + rtol |expected|)`` for out (rounded to ``out_dtype`` first, as a
    kernel stores it) and LSE, against the oracle's under the kernel's bounds ``tol``: a 2-element float64
    tensor on the device, read back with the chunk's others (no wait here).  Positions where either side is
    not finite are left out: the emulation shares the oracle's empty rows."""
    (out, lse), (exp_out, exp_lse) = floor, expected
    return torch.stack([_worst(out.to(out_dtype), exp_out, tol.out), _worst(lse.float(), exp_lse, tol.lse)])


def _worst(actual: torch.Tensor, expected: torch.Tensor, bound) -> torch.Tensor:
    a, e = actual.double(), expected.double()
    ratio = (a - e).abs_().div_(e.abs().mul_(bound.rtol).add_(bound.atol))
    ratio = torch.where(torch.isfinite(a) & torch.isfinite(e), ratio, 0.0)
    return ratio.amax() if ratio.numel() else ratio.new_zeros(())


def summary(kernel_checks: dict, floors: list[float] | None) -> dict | None:
    """``{"emulation": ..., "out": {"floor": f, "over_floor": k / f}, "lse": ...}``: the floor (``worst_ratios``
    read back) as a multiple of the bound and the kernel's worst error over it, per tensor the kernel was
    checked on (None where the floor is 0: the emulation exact, nothing to be a multiple of)."""
    if floors is None:
        return None
    found = {}
    for name, f in zip(FLOOR_TENSORS, floors):
        kernel = kernel_checks.get(name)
        if kernel is None:
            continue
        k = math.inf if kernel.nonfinite_mismatches else kernel.worst_ratio
        found[name] = {"floor": f, "over_floor": k / f if f > 0 else None}
    return {"emulation": EMULATION, **found} if found else None


def read_back(floors: list) -> list:
    """Every answer's ``worst_ratios`` (None where it has none) as host floats, in one transfer."""
    present = [f for f in floors if f is not None]
    values = iter(torch.stack(present).tolist()) if present else iter(())
    return [next(values) if f is not None else None for f in floors]
