"""Compare a backend's out and LSE with the oracle's.

Three checks per tensor, after FlashMLA's kernelkit: NaN and inf positions must
match exactly; every finite element must be within ``atol + rtol * |expected|``;
and the cosine difference of the finite parts must stay under its bound.  The
result carries the worst element (by error over bound), so a failure message
names where it broke and by how much.  The numbers come from ``compare_statistics``,
a group of pairs at a time, read here by name.
"""

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from ..fast.compare_kernel import Maximised, Summed
from . import ratio_hint
from .checks import Kind
from .compare_statistics import Statistics, groups, statistics
from .tolerances import Bound


@dataclass
class TensorCheck:
    name: str
    shape: tuple
    passed: bool
    failures: list = field(default_factory=list)   # the Kind of each failed check
    nonfinite_mismatches: int = 0
    first_nonfinite_mismatch: tuple | None = None
    first_nonfinite_actual: float | None = None     # the values there: a failure line names both
    first_nonfinite_expected: float | None = None
    violations: int = 0                             # elements over the element bound
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst_ratio: float = 0.0                        # max over elements of err / (atol + rtol|e|)
    worst_index: tuple | None = None
    worst_actual: float | None = None
    worst_expected: float | None = None
    cos_diff: float = 0.0
    rel_l2: float = 0.0
    bound: dict = field(default_factory=dict)
    dtype: str | None = None                        # the kernel's dtype, and the one the engine needs
    expected_dtype: str | None = None
    weight_rounding: dict | None = None             # the error model's second looks at out and LSE
    score_rounding: dict | None = None              # (harness/judging/weight_rounding.py)
    constant_error: dict | None = None              # a failure's constant ratio or offset (ratio_hint.py)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        for key in ("weight_rounding", "score_rounding", "constant_error"):   # only where found: rows keep their keys
            if d[key] is None:
                del d[key]
        return d


def cos_diff_from_sums(aa: float, ee: float, ae: float) -> float:
    """``1 - 2<a,e> / (|a|^2 + |e|^2)`` from the three sums; two zero tensors differ by 0."""
    return 1 - 2 * ae / (aa + ee) if aa + ee else 0.0


def cos_diff(a: torch.Tensor, e: torch.Tensor) -> float:
    a, e = a.double(), e.double()
    aa, ee, ae = torch.stack([(a * a).sum(), (e * e).sum(), (a * e).sum()]).tolist()
    return cos_diff_from_sums(aa, ee, ae)


def _unravel(flat_index: int, shape) -> tuple:
    idx = []
    for size in reversed(shape):
        idx.append(flat_index % size)
        flat_index //= size
    return tuple(reversed(idx))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class Pair:
    """One comparison to make: a kernel's tensor against the oracle's, and the dtype the engine needs."""

    actual: torch.Tensor
    expected: torch.Tensor
    expected_dtype: torch.dtype | None = None
    actual_dtype: torch.dtype | None = None     # the kernel's dtype when ``actual`` was converted (a base-2 LSE)


def check_tensor(name: str, actual: torch.Tensor, expected: torch.Tensor, bound: Bound,
                 expected_dtype: torch.dtype | None = None, actual_dtype: torch.dtype | None = None) -> TensorCheck:
    """Check one tensor against the oracle's; both are read as float64 on the expected's device.

    With ``expected_dtype``, a kernel output of another dtype fails the ``dtype``
    check even when its values are right: the engine that consumes it would break.
    """
    return check_tensors(name, [Pair(actual, expected, expected_dtype, actual_dtype)], bound)[0]


def check_tensors(name: str, pairs: list[Pair], bound: Bound) -> list[TensorCheck]:
    """``check_tensor`` for many pairs at once (one per case of a chunk): one device-to-host transfer."""
    return check_batches([(name, pairs, bound)])[0]


def check_batches(batches: list[tuple[str, list[Pair], Bound]]) -> list[list[TensorCheck]]:
    """``check_tensors`` for each ``(name, pairs, bound)``, with one device-to-host transfer for them all:
    a chunk's comparisons wait for the device once, not once per group (each wait stalls a worker while
    the other workers hold the GPU)."""
    results, queued = [], []                    # queued: (checks to fill, their bound, device statistics)
    for name, pairs, bound in batches:
        checks, grouped = _check_values(name, pairs, bound)
        results.append(checks)
        queued += [(group, bound, stats) for group, stats in grouped]
    if queued:
        device = queued[0][2].device
        rows = iter(torch.cat([stats.to(device) for _, _, stats in queued]).tolist())     # the one transfer
        for group, bound, _ in queued:
            for check in group:
                _fill(check, Statistics.of(next(rows)), bound)
    for checks, (_, pairs, bound) in zip(results, batches):
        for res, p in zip(checks, pairs):
            if p.expected_dtype is not None:
                actual_dtype = p.actual.dtype if p.actual_dtype is None else p.actual_dtype
                res.dtype, res.expected_dtype = dtype_name(actual_dtype), dtype_name(p.expected_dtype)
                if actual_dtype != p.expected_dtype:
                    res.failures.insert(0, Kind.DTYPE.value)
                    res.passed = False
            if Kind.ELEMENT in res.failures or Kind.COSINE in res.failures:     # failed values: a second read
                res.constant_error = ratio_hint.find(res.name, p.actual, p.expected, bound)
    return results


def _check_values(name: str, pairs: list[Pair], bound: Bound) -> tuple[list[TensorCheck], list[tuple]]:
    """Every pair's check, its values still to fill, and ``(checks, statistics)`` per group: pairs of one
    size stacked as the rows of a group (``compare_statistics.groups``), and each check's row of statistics
    on the device (``compare_statistics.statistics``), not yet read."""
    results = [None] * len(pairs)
    todo = []
    for i, pair in enumerate(pairs):
        shape = tuple(pair.expected.shape)
        if tuple(pair.actual.shape) != shape:
            results[i] = TensorCheck(name, shape, False, [Kind.SHAPE.value],
                                     bound={"expected_shape": list(shape), "actual_shape": list(pair.actual.shape)})
        else:
            results[i] = TensorCheck(name, shape, True,
                                     bound={"atol": bound.atol, "rtol": bound.rtol, "cos_diff": bound.cos_diff})
            if pair.expected.numel():
                todo.append(i)
    devices = {pairs[i].expected.device for i in todo}
    if len(devices) > 1:
        raise ValueError(f"pairs compared together must have their expected values on one device, got {devices}")
    device = next(iter(devices), torch.device("cpu"))
    kinds = [(pairs[i].expected.numel(), pairs[i].actual.dtype, pairs[i].expected.dtype) for i in todo]
    found = [([results[i] for i in group],
              statistics([pairs[i].actual for i in group], [pairs[i].expected for i in group], rows, bound))
             for rows, group in groups(todo, kinds, device)]
    return results, found


def _fill(res: TensorCheck, s: Statistics, bound: Bound):
    """A pair's checks from its row of statistics."""
    worst, mismatch = Maximised.RATIO, Maximised.MISMATCH
    res.worst_ratio, res.max_abs_err = s.maxima[worst], s.maxima[Maximised.ABS_ERR]
    res.max_rel_err = s.maxima[Maximised.REL_ERR]
    res.worst_actual, res.worst_expected = s.actual[worst], s.expected[worst]
    res.nonfinite_mismatches, res.violations = int(s.sums[Summed.MISMATCHES]), int(s.sums[Summed.VIOLATIONS])
    res.worst_index = _unravel(int(s.places[worst]), res.shape)
    if res.nonfinite_mismatches:
        res.failures.append(Kind.NONFINITE.value)
        res.first_nonfinite_mismatch = _unravel(int(s.places[mismatch]), res.shape)
        res.first_nonfinite_actual, res.first_nonfinite_expected = s.actual[mismatch], s.expected[mismatch]
    if res.violations:
        res.failures.append(Kind.ELEMENT.value)
    aa, ee, ae, dd = (s.sums[column] for column in (Summed.AA, Summed.EE, Summed.AE, Summed.DD))
    res.cos_diff = cos_diff_from_sums(aa, ee, ae)
    res.rel_l2 = math.sqrt(dd) / math.sqrt(ee) if ee else math.sqrt(dd)
    if res.cos_diff > bound.cos_diff:
        res.failures.append(Kind.COSINE.value)
    res.passed = not res.failures


def missing(name: str, expected: torch.Tensor) -> TensorCheck:
    """A tensor the kernel should have returned and did not: a failed shape check."""
    return TensorCheck(name, tuple(expected.shape), False, [Kind.SHAPE.value],
                       bound={"expected_shape": list(expected.shape), "actual_shape": []})


def expected_lse_for(expected_lse: torch.Tensor, empty_row_lse: float) -> torch.Tensor:
    """The oracle's LSE with empty rows (+inf) set to what the backend declares for them."""
    if empty_row_lse == math.inf:          # the oracle's own convention: nothing to set
        return expected_lse
    return torch.where(torch.isposinf(expected_lse), torch.full_like(expected_lse, empty_row_lse), expected_lse)


def describe(check: TensorCheck) -> str:
    """One line naming the check, the worst element, its value and the bound (no case id), ending with the
    hint of a constant error where one was found (``ratio_hint``)."""
    line = _line(check)
    return f"{line}; {ratio_hint.describe(check.constant_error)}" if check.constant_error else line


def _line(check: TensorCheck) -> str:
    if check.failures == [Kind.DTYPE]:
        return f"{check.name} has dtype {check.dtype}, expected {check.expected_dtype}"
    if Kind.DTYPE in check.failures:
        rest = dataclasses.replace(check, failures=[f for f in check.failures if f != Kind.DTYPE])
        return f"{check.name} has dtype {check.dtype}, expected {check.expected_dtype}; {_line(rest)}"
    if Kind.SHAPE in check.failures:
        return (f"{check.name} has shape {tuple(check.bound['actual_shape'])}, "
                f"expected {tuple(check.bound['expected_shape'])}")
    if Kind.NONFINITE in check.failures:
        return (f"{check.name}: {check.nonfinite_mismatches} NaN/inf position(s) differ from the "
                f"reference, first at index {list(check.first_nonfinite_mismatch)}: "
                f"got {check.first_nonfinite_actual:.6g}, expected {check.first_nonfinite_expected:.6g}")
    b = check.bound
    worst = (f"worst at index {list(check.worst_index)}: got {check.worst_actual:.6g}, "
             f"expected {check.worst_expected:.6g} (|err| {abs(check.worst_actual - check.worst_expected):.3g} "
             f"> atol {b['atol']:g} + rtol {b['rtol']:g}·|expected|, {check.worst_ratio:.3g}x the bound)")
    if Kind.ELEMENT in check.failures:
        return f"{check.name}: {check.violations} element(s) out of bounds; {worst}"
    return (f"{check.name}: cos diff {check.cos_diff:.3g} > bound {b['cos_diff']:g}; "
            f"worst at index {list(check.worst_index)}: got {check.worst_actual:.6g}, "
            f"expected {check.worst_expected:.6g}")


def describe_failure(case_id: str, check: TensorCheck) -> str:
    """``describe`` with the case id in front: the line a user reads."""
    return f"{case_id}: {describe(check)}"
