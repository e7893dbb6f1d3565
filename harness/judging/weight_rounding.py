"""The bf16 error model's worst case, looked at where the flat element bound is exceeded.

A bf16 kernel rounds each softmax weight to bf16 before the P.V product: weight j moves by up to 2^-8 of
itself (half an ulp at the bottom of a binade: bf16's unit roundoff), so an output element moves by up to
``2^-8 * sum_j p_j |v_j|`` (harness/judging/tolerances.py).  The flat
``atol`` covers that for values of unit size; a row of a few large values that cancel (say weights 0.36
and 0.64 on values near 4.7 and -4.1, an output near 0) can exceed it by rounding alone: on the H200,
FlashMLA's sparse decode gave exactly the float64 sum with bf16-rounded weights on two such elements
(docs/kernel-findings.md, 9).

So an element passes when ``|err| <= rtol * |expected| + max(atol, WEIGHT_ROUNDING * sum_j p_j |v_j|)``,
with ``WEIGHT_ROUNDING`` that worst case, 2^-8 (``rtol`` already covers the output's own rounding).  The
magnitude costs a second P.V product, so it is computed only for the elements over the flat bound (which
passes only what this bound passes too); past ``RECHECK_MAX_ELEMENTS`` of them the tensor is judged by the
flat bound alone.  Where the second look was taken the check records it (``weight_rounding``), passing or
not.
"""

import torch

from .checks import Kind
from .compare import TensorCheck
from .tolerances import Bound

WEIGHT_ROUNDING = 2.0 ** -8        # bf16: the worst case of a weight's rounding, 2^-8 of itself
RECHECK_MAX_ELEMENTS = 4096


def recheck(check: TensorCheck, actual: torch.Tensor, expected: torch.Tensor, bound: Bound, magnitudes_of_rows):
    """Take the second look at ``check`` (an ``(n, s_q, heads, d_v)`` out that failed the element bound), in
    place.  ``magnitudes_of_rows(rows)`` gives ``sum_j p_j |v_j|`` ``(len(rows), heads, d_v)`` of the
    flattened query rows ``n * s_q``, or None where it has no model (the flat bound then stands)."""
    if Kind.ELEMENT.value not in check.failures or actual.shape != expected.shape:
        return
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    over = torch.isfinite(a) & torch.isfinite(e) & (err > bound.atol + bound.rtol * e.abs())
    at = over.nonzero()                                              # (k, 4): few, by construction
    if not 0 < len(at) <= RECHECK_MAX_ELEMENTS:
        return
    s_q = expected.shape[1]
    rows, row_of = torch.unique(at[:, 0] * s_q + at[:, 1], return_inverse=True)
    magnitudes = magnitudes_of_rows(rows)
    if magnitudes is None:          # no model for these inputs (``oracle.value_magnitudes``): the flat bound
        return
    magnitude = magnitudes.to(err.device)[row_of, at[:, 2], at[:, 3]]
    errors, expect = err[over], e.abs()[over]
    model = bound.rtol * expect + torch.clamp(WEIGHT_ROUNDING * magnitude, min=bound.atol)
    ratio = errors / model
    worst = int(ratio.argmax())
    within = int((ratio <= 1).sum())
    check.weight_rounding = {
        "over_flat_bound": len(at), "within_model": within, "coefficient": WEIGHT_ROUNDING,
        "worst_index": at[worst].tolist(), "worst_ratio": float(ratio[worst]),
        "worst_sum_p_abs_v": float(magnitude[worst]), "worst_error": float(errors[worst])}
    if within == len(at):
        check.failures.remove(Kind.ELEMENT.value)
        check.passed = not check.failures


def describe(case_id: str, check: TensorCheck) -> str:
    """A warning line for a check the second look passed: what was over the flat bound, and why it passes."""
    w = check.weight_rounding
    return (f"{case_id}: {check.name}: {w['over_flat_bound']} element(s) over atol + rtol·|expected| are within "
            f"the bf16 weight-rounding bound rtol·|expected| + max(atol, 2^-8·sum p|v|); worst at "
            f"{w['worst_index']}: |err| {w['worst_error']:.3g}, sum p|v| {w['worst_sum_p_abs_v']:.3g}, "
            f"{w['worst_ratio']:.2f}x that bound")
