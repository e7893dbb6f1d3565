"""Notes for the row where the engine's writer, not the kernel, made a case's inputs unusual
(``Inputs.notes``, ``SparseCase.notes``; the row's ``input_notes``): a writer that stored NaN, or saturated
values.  Each note names the writer and what it did, so a NaN the oracle shares is not read as the kernel's.

Asked only for cases whose values are not ``normal`` (N(0, 1) draws never meet these corners), so the
inputs of every other case are built as they always were.
"""

import torch

from reference import FP8_MAX

from ..planning.case import Case
from ..planning.record_formats import RecordFormat
from .sparse_cache import read_records

WHY_NAN = {"amax": "SGLang's writer (scale = amax / 448, no epsilon) gives a tile whose amax is 0 the scale 0, "
                   "and its values 0 / 0"}


def shaped_values(case: Case) -> bool:
    return case.q_values != "normal" or case.kv_values != "normal"


def record_notes(case: Case, records: torch.Tensor, slots: torch.Tensor, num_slots: int,
                 fmt: RecordFormat) -> tuple[str, ...]:
    """A sparse case's: how many of the records written to ``slots`` (the spare page's ``num_slots`` aside)
    hold NaN values, where some do."""
    if not shaped_values(case):
        return ()
    written = slots[slots < num_slots]
    nan = torch.isnan(read_records(records, written, fmt, case.page_size).nope.float()).any(dim=1)
    count = int(nan.sum())
    if not count:
        return ()
    why = WHY_NAN.get(case.kv_scales, "its scales turn them into NaN")
    return (f"input: the {fmt.name} record writer with the '{case.kv_scales}' scale policy stored NaN values in "
            f"{count} of the {len(written)} records written: {why}; rows that list them are NaN in the oracle "
            "too (the writer's doing, not the kernel's)",)


def fp8_notes(case: Case, q_model: torch.Tensor, tokens: torch.Tensor, k_scale: float | None,
              fp8_dtype: torch.dtype) -> tuple[str, ...]:
    """A dense fp8 case's: the values of q and of the KV that SGLang's quantisation (``x / k_scale``, clamped
    to the format's largest finite value) saturated, where there are any."""
    if not shaped_values(case) or k_scale is None:
        return ()
    limit = FP8_MAX[fp8_dtype] * k_scale
    notes = []
    for name, t in (("q", q_model), ("KV", tokens)):
        count = int((t.float().abs() > limit).sum())
        if count:
            notes.append(f"input: the fp8 writer (x / k_scale {k_scale:.3g}, clamped to +-{FP8_MAX[fp8_dtype]:g}) "
                         f"saturated {count} of the {t.numel()} values of {name}")
    return tuple(notes)
