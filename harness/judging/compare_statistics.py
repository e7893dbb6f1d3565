"""The numbers a comparison is judged by, computed on the device for a group of pairs at once.

Pairs of one size and dtypes are stacked as the rows of a group (``groups``); each row's statistics are
its sums, maxima and the first place of each maximum (the columns ``compare_kernel.Summed`` and
``Maximised`` name), in one Triton pass on CUDA (``compare_kernel``) or PyTorch's passes elsewhere
(``statistics_torch``), then the values of both sides at two of those places.  A row comes back to the
host in the chunk's one transfer and is read by name (``Statistics.of``); ``compare`` turns it into checks.

A pair's numbers never depend on the others beside it: a group of pairs of ``n`` elements always has
``group_rows(n)`` rows (spare ones zero and thrown away), so a row is reduced the same way whoever fills
the others, and a case checked in a chunk gets the bits it gets alone.
"""

from dataclasses import dataclass

import torch

from ..fast import compare_kernel
from ..fast.compare_kernel import Maximised, Summed
from .tolerances import Bound

ROW_ALIGN = 64                  # elements
GROUP_ROWS = 32                 # pairs of one size checked together, at most ...
GROUP_ELEMENTS = 2 ** 22        # ... and as many as keep a group within this many elements

# the places whose actual and expected values a row carries: the worst element and the first NaN/inf mismatch
GATHERED = (Maximised.RATIO, Maximised.MISMATCH)
# a row's parts, in the order ``statistics`` lays them out, each with the names of its columns
ROW = (("sums", tuple(Summed)), ("maxima", tuple(Maximised)), ("places", tuple(Maximised)),
       ("actual", GATHERED), ("expected", GATHERED))


@dataclass(frozen=True)
class Statistics:
    """One pair's row of ``statistics``, read on the host: each part a dict by column name."""

    sums: dict          # Summed -> sum over the finite positions, or count
    maxima: dict        # Maximised -> the largest value
    places: dict        # Maximised -> where it first occurs (a flat index)
    actual: dict        # GATHERED -> the kernel's value at that place
    expected: dict      # GATHERED -> the oracle's

    @classmethod
    def of(cls, row: list) -> "Statistics":
        parts, start = {}, 0
        for part, columns in ROW:
            parts[part] = dict(zip(columns, row[start:start + len(columns)]))
            start += len(columns)
        return cls(**parts)


def group_rows(n: int, device: torch.device) -> int:
    """The rows of every group of pairs of ``n`` elements on ``device``: fixed by those alone.  On a GPU,
    where a launch costs more than a spare row's arithmetic, many; on the CPU, where it is the reverse, one."""
    return max(1, min(GROUP_ROWS, GROUP_ELEMENTS // n)) if device.type == "cuda" else 1


def groups(todo: list[int], kinds: list[tuple], device: torch.device) -> list[tuple[int, list[int]]]:
    """``(rows, pair indices)``: the pairs of each kind, ``group_rows`` at a time.  A kind is the size first,
    then the two sides' dtypes: the kernel reads a side in its own dtype, and the order it adds a row in
    follows the dtype's layout, so pairs of one dtype are checked together and a pair's sums never depend
    on what another pair's dtype is."""
    by_kind = {}
    for i, kind in zip(todo, kinds):
        by_kind.setdefault(kind, []).append(i)
    return [(rows, members[k:k + rows]) for kind, members in by_kind.items()
            for rows in [group_rows(kind[0], device)] for k in range(0, len(members), rows)]


def statistics(actual: list[torch.Tensor], expected: list[torch.Tensor], rows: int, bound: Bound) -> torch.Tensor:
    """Each pair's row of statistics (its parts: ``ROW``) ``(len(actual), columns)`` float64, on the device:
    the pairs, all of one size, are the first rows of a ``rows``-row group.  On CUDA one Triton pass
    (``compare_kernel``, reading each side in its own dtype), elsewhere PyTorch's (``statistics_torch``, in
    float64)."""
    n = expected[0].numel()
    # a row's reduction reads its start's alignment (vectorised loads): rows start 512-byte aligned
    width = -(-n // ROW_ALIGN) * ROW_ALIGN
    a, e = _stacked(actual, rows, width), _stacked(expected, rows, width)
    fused = compare_kernel.statistics(a, e, bound.atol, bound.rtol)
    sums, top, where = fused if fused is not None else statistics_torch(a.double(), e.double(), bound)
    at = where[:, list(GATHERED)]
    parts = {"sums": sums, "maxima": top, "places": where.double(), "actual": a.gather(1, at).double(),
             "expected": e.gather(1, at).double()}
    return torch.cat([parts[part] for part, _ in ROW], dim=1)[:len(actual)]


def statistics_torch(a: torch.Tensor, e: torch.Tensor, bound: Bound) -> tuple:
    """``(sums, maxima, first places)`` of each row of ``a`` and ``e`` ``(rows, width)``, columns as
    ``compare_kernel.statistics`` gives them: ``(rows, len(Summed))``, ``(rows, len(Maximised))`` twice."""
    rows, width = a.shape
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    # x - x is 0 exactly when x is finite (NaN and +-inf give NaN): one pass, where isfinite takes several
    finite = ((a - a) == 0) & ((e - e) == 0)
    # outside the finite pairs, NaN and inf positions must match: equal values (inf == inf), or NaN on both
    same_nonfinite = finite | (a == e) | (torch.isnan(a) & torch.isnan(e))
    summed = torch.empty(len(Summed), rows, width, dtype=torch.float64, device=a.device)     # summed per pair
    maxed = torch.empty(len(Maximised), rows, width, dtype=torch.float64, device=a.device)  # maximised per pair
    # scratch: the finite parts sit where the counts are written last, after their last use
    af, ef = summed[Summed.MISMATCHES], summed[Summed.VIOLATIONS]
    ratio, err = maxed[Maximised.RATIO], maxed[Maximised.ABS_ERR]
    torch.where(finite, a, zero, out=af)
    torch.where(finite, e, zero, out=ef)
    torch.sub(af, ef, out=err).abs_()
    torch.div(err, torch.abs(ef).mul_(bound.rtol).add_(bound.atol), out=ratio)
    torch.div(err, ef.abs().clamp_(min=1e-30), out=maxed[Maximised.REL_ERR])
    torch.mul(af, af, out=summed[Summed.AA])
    torch.mul(af, ef, out=summed[Summed.AE])
    torch.mul(ef, ef, out=summed[Summed.EE])
    torch.mul(err, err, out=summed[Summed.DD])
    maxed[Maximised.MISMATCH].copy_(~same_nonfinite)                  # a NaN/inf position mismatch
    summed[Summed.MISMATCHES].copy_(maxed[Maximised.MISMATCH])
    torch.gt(ratio, 1, out=summed[Summed.VIOLATIONS])
    # ties give the first position, so a zero tail (after the real elements, all >= 0) never wins
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
