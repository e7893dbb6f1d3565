"""A hint for a failed check whose error is one constant: got/expected, or got - expected, the same everywhere.

A kernel that returns its LSE in base 2 (log2 of the sum: the exp2 domain most kernels compute in) gives
1/ln 2 = 1.4427 times the reference at every element; a softmax scale of the wrong width, applied once
more or used where another belongs, gives a power of the scale or the ratio of two scales; a term added
or left out gives a constant offset.  The element bound names the worst element only, where the
constant gives the cause away, so a failed check looks for it and its failure line names it.

Constant means the same to about 3 significant digits (max - min within ``SPREAD`` of the middle) over at
least ``MIN_ELEMENTS`` elements where both sides are finite and, for the ratio, the expected value is not
~0 (over the bound's atol): one element never makes a constant.  A ratio of 1 or an offset within atol is
no hint.  It costs a few passes over the two tensors and one read-back, for failed checks only.
"""

import math
from typing import NamedTuple

import torch

SPREAD = 5e-3           # (max - min) / |middle|: agrees to about 3 significant digits
MATCH = SPREAD / 2      # a ratio this close (relative) to a known one is taken for it; as close to 1 is no error
MIN_ELEMENTS = 8

# The softmax scales MLA kernels compute with, 1/sqrt(width): the full cached width 576 (512 latent + 64
# rope), d_v 512, DeepSeek's qk head 192 (128 nope + 64 rope: the cases' default, harness/planning/case.py)
# and its nope part 128.
SCALE_WIDTHS = (576, 512, 192, 128)


class Known(NamedTuple):
    """A ratio with a name, and what it means on an LSE (None: nothing more than its name)."""

    value: float
    name: str
    lse_cause: str | None


def _scale_power(width: int, power: int) -> Known:
    name = {1: f"1/sqrt({width})", -1: f"sqrt({width})", 2: f"1/{width}", -2: f"{width}"}[power]
    return Known(width ** (-power / 2), name, f"softmax scale looks wrong (got/expected is the scale 1/sqrt({width})"
                                             f"{'' if power == 1 else f' to the power {power}'})")


def _known_ratios() -> tuple[Known, ...]:
    known = [Known(1 / math.log(2), "1/ln 2", "LSE looks base-2 (log2 of the sum), not natural log"),
             Known(math.log(2), "ln 2", "LSE looks natural log where base 2 is declared (lse_base \"2\")")]
    known += [_scale_power(w, p) for w in SCALE_WIDTHS for p in (1, -1, 2, -2)]
    # got at 1/sqrt(a), expected at 1/sqrt(b): the LSE of a peaked softmax is about scale * the largest logit
    known += [Known(math.sqrt(b / a), f"sqrt({b}/{a})",
                    f"softmax scale looks wrong (as if computed at 1/sqrt({a}) where 1/sqrt({b}) belongs)")
              for a in SCALE_WIDTHS for b in SCALE_WIDTHS if a != b]
    return tuple(known)


KNOWN_RATIOS = _known_ratios()


def known_ratio(ratio: float) -> Known | None:
    """The known ratio ``ratio`` is, to ``MATCH``; None where it is none of them."""
    return next((k for k in KNOWN_RATIOS if abs(ratio / k.value - 1) <= MATCH), None)


def _constant(count: float, low: float, high: float) -> float | None:
    """The middle of ``[low, high]`` where it is one constant over enough elements, else None."""
    middle = (low + high) / 2
    if count < MIN_ELEMENTS or not math.isfinite(middle) or middle == 0:
        return None
    return middle if high - low <= SPREAD * abs(middle) else None


def find(name: str, actual: torch.Tensor, expected: torch.Tensor, bound) -> dict | None:
    """A constant error of tensor ``name`` (``actual`` against ``expected``, same shape), as the row records it:
    ``{"ratio" or "offset": value, "elements": n, ...}`` with a known ratio's name and, on an LSE, its likely
    cause; None where the error is no constant."""
    a, e = actual.double().to(expected.device), expected.double()
    finite = torch.isfinite(a) & torch.isfinite(e)
    usable = finite & (e.abs() > bound.atol)
    ratio, offset = a / e, a - e
    inf = torch.tensor(math.inf, dtype=torch.float64, device=e.device)
    n_ratio, r_low, r_high, n_offset, o_low, o_high = torch.stack([
        usable.sum().double(), torch.where(usable, ratio, inf).amin(), torch.where(usable, ratio, -inf).amax(),
        finite.sum().double(), torch.where(finite, offset, inf).amin(), torch.where(finite, offset, -inf).amax(),
    ]).tolist()                                                         # the one read-back
    r, o = _constant(n_ratio, r_low, r_high), _constant(n_offset, o_low, o_high)
    r = r if r is not None and abs(r - 1) > MATCH else None
    known = known_ratio(r) if r is not None else None
    if known is not None or (r is not None and o is None):
        hint = {"ratio": r, "elements": int(n_ratio)}
        if known is not None:
            hint.update(known=known.name, known_value=known.value)
            if name.startswith("lse") and known.lse_cause:
                hint["cause"] = known.lse_cause
        return hint
    if o is not None and abs(o) > bound.atol:
        return {"offset": o, "elements": int(n_offset)}
    return None


def describe(hint: dict) -> str:
    """The hint as the end of a failure line."""
    if "offset" in hint:
        return f"hint: got - expected is a constant offset of {hint['offset']:.4g} over {hint['elements']} elements"
    text = f"got/expected is a constant {hint['ratio']:.4g} over {hint['elements']} elements"
    if "known" in hint:
        text += f" ({hint['known']} = {hint['known_value']:.5g})"
    return f"hint: {hint['cause']}: {text}" if "cause" in hint else f"hint: {text}"
