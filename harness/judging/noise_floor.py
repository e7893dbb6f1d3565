"""The noise floor: how far an honest low-precision implementation of the same computation lands from the
float64 oracle, under the same bound, and how many times further the kernel lands.

The emulation is the oracle's own arithmetic in float32 on the kernel's inputs (bf16 or fp8
values as given), its out rounded to the dtype the engine needs and its LSE kept in float32: what a correct
kernel of that precision computes, give or take its order of summation.  Its error against the float64
oracle, measured as the kernel's is (the worst ``|err| / (atol + rtol |expected|)``, ``compare``), is the
floor; a row records the floor and the kernel's error over it (``over_floor``) for out and LSE.  A finding
that says "38x the noise floor" tells a kernel author how far the kernel is from what its precision allows,
which "1.7x the bound" does not.

The gate stays on the written error model (``tolerances``): the ratio explains a verdict, it never makes one.
FlexAttention's tests compare the same way (a kernel's error against a low-precision eager reference's, both
against a float64 golden).
"""

import math

import torch

from .checks import FLOOR_TENSORS
from .compare import Pair

FLOOR_DTYPE = torch.float32
EMULATION = "float32"          # what a row's ``noise_floor.emulation`` says: the module doc's emulation


def floor_pairs(floor: tuple, expected: tuple, out_dtype: torch.dtype) -> dict:
    """The emulation's ``(out, lse)`` against the oracle's, as the kernel's are compared (``Pair``), by name
    (``out.floor``, ``lse.floor``): out rounded to ``out_dtype`` first, as a kernel stores it."""
    out, lse = floor
    exp_out, exp_lse = expected
    return {"out.floor": Pair(out.to(out_dtype), exp_out, out_dtype),
            "lse.floor": Pair(lse.to(torch.float32), exp_lse, torch.float32)}


def summary(kernel_checks: dict, floor_checks: dict) -> dict | None:
    """``{"emulation": ..., "out": {"floor": f, "over_floor": k / f}, "lse": ...}``: the floor as a multiple of
    the bound and the kernel's worst error over it, per tensor with both checks (None where the floor is 0:
    the emulation exact, nothing to be a multiple of)."""
    found = {}
    for name in FLOOR_TENSORS:
        kernel, floor = kernel_checks.get(name), floor_checks.get(f"{name}.floor")
        if kernel is None or floor is None:
            continue
        f = floor.worst_ratio
        k = math.inf if kernel.nonfinite_mismatches else kernel.worst_ratio
        found[name] = {"floor": f, "over_floor": k / f if f > 0 else None}
    return {"emulation": EMULATION, **found} if found else None
