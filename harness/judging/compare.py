"""Compare a backend's out and LSE with the oracle's.

Three checks per tensor, after FlashMLA's kernelkit: NaN and inf positions must
match exactly; every finite element must be within ``atol + rtol * |expected|``;
and the cosine difference of the finite parts must stay under its bound.  The
result carries the worst element (by error over bound), so a failure message
names where it broke and by how much.
"""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..fast import compare_kernel
from . import ratio_hint
from .checks import Kind
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
    weight_rounding: dict | None = None             # the error model's second look (harness/judging/weight_rounding.py)
    constant_error: dict | None = None              # a failure's constant ratio or offset (ratio_hint.py)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        for key in ("weight_rounding", "constant_error"):   # only where found: other rows keep their keys
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
        checks, statistics = _check_values(name, pairs, bound)
        results.append(checks)
        queued += [(group, bound, stats) for group, stats in statistics]
    if queued:
        device = queued[0][2].device
        rows = iter(torch.cat([stats.to(device) for _, _, stats in queued]).tolist())     # the one transfer
        for group, bound, _ in queued:
            for check in group:
                _fill(check, next(rows), bound)
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
    size stacked as the rows of a group, element-wise work on the whole group, reductions along its rows,
    and each check's row of statistics on the device (``_statistics``), not yet read.

    A pair's numbers never depend on the others beside it: a group of pairs of ``n`` elements always
    has ``group_rows(n)`` rows (spare ones zero and thrown away), so a row is reduced the same way
    whoever fills the others, and a case checked in a chunk gets the bits it gets alone.  Maxima give
    the first position of each maximum.
    """
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
    statistics = [([results[i] for i in group], _statistics([pairs[i] for i in group], rows, bound))
                  for rows, group in _groups(todo, kinds, device)]
    return results, statistics


ROW_ALIGN = 64                  # elements
GROUP_ROWS = 32                 # pairs of one size checked together, at most ...
GROUP_ELEMENTS = 2 ** 22        # ... and as many as keep a group within this many elements


def group_rows(n: int, device: torch.device) -> int:
    """The rows of every group of pairs of ``n`` elements on ``device``: fixed by those alone.  On a GPU,
    where a launch costs more than a spare row's arithmetic, many; on the CPU, where it is the reverse, one."""
    return max(1, min(GROUP_ROWS, GROUP_ELEMENTS // n)) if device.type == "cuda" else 1


def _groups(todo: list[int], kinds: list[tuple], device: torch.device) -> list[tuple[int, list[int]]]:
    """``(rows, pair indices)``: the pairs of each kind, ``group_rows`` at a time.  A kind is the size first,
    then the two sides' dtypes: the kernel reads a side in its own dtype, and the order it adds a row in
    follows the dtype's layout, so pairs of one dtype are checked together and a pair's sums never depend
    on what another pair's dtype is."""
    by_kind = {}
    for i, kind in zip(todo, kinds):
        by_kind.setdefault(kind, []).append(i)
    return [(rows, members[k:k + rows]) for kind, members in by_kind.items()
            for rows in [group_rows(kind[0], device)] for k in range(0, len(members), rows)]


def _statistics(pairs: list[Pair], rows: int, bound: Bound) -> torch.Tensor:
    """Each pair's row of statistics (see ``_fill``) ``(len(pairs), columns)`` float64, on the device: the
    pairs, all of one size, are the first rows of a ``rows``-row group.  On CUDA one Triton pass
    (``compare_kernel``, reading each side in its own dtype), elsewhere PyTorch's (``_statistics_torch``,
    in float64)."""
    n = pairs[0].expected.numel()
    # a row's reduction reads its start's alignment (vectorised loads): rows start 512-byte aligned
    width = -(-n // ROW_ALIGN) * ROW_ALIGN
    a, e = (_stacked([getattr(pair, side) for pair in pairs], rows, width) for side in ("actual", "expected"))
    fused = compare_kernel.statistics(a, e, bound.atol, bound.rtol)
    sums, top, where = fused if fused is not None else _statistics_torch(a.double(), e.double(), bound)
    at = torch.stack([where[:, 0], where[:, 3]], dim=1)                    # worst, first mismatch
    stats = torch.cat([sums, top, where.double(), a.gather(1, at).double(), e.gather(1, at).double()], dim=1)
    return stats[:len(pairs)]


def _statistics_torch(a: torch.Tensor, e: torch.Tensor, bound: Bound) -> tuple:
    """``(sums (rows, 6), maxima (rows, 4), first places (rows, 4))`` of each row of ``a`` and ``e``: the
    columns of ``_Statistics`` that are summed, maximised, and where each maximum first occurs."""
    rows, width = a.shape
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    # x - x is 0 exactly when x is finite (NaN and +-inf give NaN): one pass, where isfinite takes several
    finite = ((a - a) == 0) & ((e - e) == 0)
    # outside the finite pairs, NaN and inf positions must match: equal values (inf == inf), or NaN on both
    same_nonfinite = finite | (a == e) | (torch.isnan(a) & torch.isnan(e))
    summed = torch.empty(6, rows, width, dtype=torch.float64, device=a.device)   # summed per pair: _Statistics
    maxed = torch.empty(4, rows, width, dtype=torch.float64, device=a.device)    # maximised per pair
    af, ef, ratio, err = summed[4], summed[5], maxed[0], maxed[1]          # scratch rows, overwritten below
    torch.where(finite, a, zero, out=af)
    torch.where(finite, e, zero, out=ef)
    torch.sub(af, ef, out=err).abs_()
    torch.div(err, torch.abs(ef).mul_(bound.rtol).add_(bound.atol), out=ratio)
    torch.div(err, ef.abs().clamp_(min=1e-30), out=maxed[2])
    torch.mul(af, af, out=summed[0])
    torch.mul(af, ef, out=summed[2])
    torch.mul(ef, ef, out=summed[1])
    torch.mul(err, err, out=summed[3])
    maxed[3].copy_(~same_nonfinite)                                        # a NaN/inf position mismatch
    summed[4].copy_(maxed[3])
    torch.gt(ratio, 1, out=summed[5])
    # (4, rows); ties give the first position, so a zero tail (after the real elements, all >= 0) never wins
    top, where = maxed.max(dim=2)
    return summed.sum(dim=2).T, top.T, where.T


def _stacked(tensors: list[torch.Tensor], rows: int, width: int) -> torch.Tensor:
    """``(rows, width)`` in the tensors' one dtype: each tensor's elements in a row, row tails and spare
    rows zero, in one concatenation.  A group of one tensor with no tail is a view of it (a contiguous
    one), no copy: a large out is compared where it lies."""
    flat = [t.reshape(-1) for t in tensors]
    n, like = flat[0].numel(), flat[0]
    if rows == 1 and n == width and like.is_contiguous():
        return like.view(1, width)
    parts = []
    tail = like.new_zeros(width - n)
    for t in flat:
        parts += [t, tail] if width > n else [t]
    if rows > len(flat):
        parts.append(like.new_zeros((rows - len(flat)) * width))
    return torch.cat(parts).view(rows, width)


class _Statistics(NamedTuple):
    """One pair's row of ``_statistics``, column by column (the order ``_statistics`` stacks them in)."""

    sum_aa: float                   # summed over the finite positions: a.a, e.e, a.e, (a-e).(a-e)
    sum_ee: float
    sum_ae: float
    sum_dd: float
    nonfinite_mismatches: float     # counts: NaN/inf positions that differ, elements over the bound
    violations: float
    worst_ratio: float              # maxima: |err| / bound, |err|, |err| / |e|, the mismatch flag
    max_abs_err: float
    max_rel_err: float
    any_mismatch: float
    worst_at: float                 # where each maximum first occurs (flat index)
    max_abs_at: float
    max_rel_at: float
    first_mismatch_at: float
    worst_actual: float             # a and e at the worst element and at the first NaN/inf mismatch
    mismatch_actual: float
    worst_expected: float
    mismatch_expected: float


def _fill(res: TensorCheck, row: list, bound: Bound):
    """A pair's checks from its row of statistics (see ``_statistics``)."""
    s = _Statistics(*row)
    res.worst_ratio, res.max_abs_err, res.max_rel_err = s.worst_ratio, s.max_abs_err, s.max_rel_err
    res.worst_actual, res.worst_expected = s.worst_actual, s.worst_expected
    res.nonfinite_mismatches, res.violations = int(s.nonfinite_mismatches), int(s.violations)
    res.worst_index = _unravel(int(s.worst_at), res.shape)
    if res.nonfinite_mismatches:
        res.failures.append(Kind.NONFINITE.value)
        res.first_nonfinite_mismatch = _unravel(int(s.first_mismatch_at), res.shape)
        res.first_nonfinite_actual, res.first_nonfinite_expected = s.mismatch_actual, s.mismatch_expected
    if res.violations:
        res.failures.append(Kind.ELEMENT.value)
    res.cos_diff = cos_diff_from_sums(s.sum_aa, s.sum_ee, s.sum_ae)
    res.rel_l2 = math.sqrt(s.sum_dd) / math.sqrt(s.sum_ee) if s.sum_ee else math.sqrt(s.sum_dd)
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
