"""The gate of a sparse call: what must hold before any kernel is launched on a case's inputs, each refusal
one line (``InputError``, exit 2).  Read from the ``IndexStats`` taken when the inputs were built, so the
gate waits for nothing.

- Every index is -1 or a slot of its own pool: the main cache's, or the extra cache's (FlashMLA checks
  neither: it reads whatever a slot names, out of bounds or not).
- A length is int32 ``(n,)`` with each value in ``[0, width]`` (FlashMLA's shape check is ``(b)``).
- Extra indices or an extra length come with an extra cache, and an extra cache with its indices
  (FlashMLA 9241ae3 ``csrc/api/sparse_decode.h``: "extra_indices_in_kvcache must not be provided when
  extra_k_cache is not provided", "extra_topk_length must not be provided ...").
- The (main, extra) format pair is one the backend declares (``SparseSupport.pairs``: for one that reads any,
  every pair whose keys are as wide as each other's, since one softmax runs over both).
"""

import torch

from ..errors import InputError
from .sparse_kernel_inputs import IndexStats, SparseCase, SparseInputs, validate_indices

# what SparseInputs calls them -> what FlashMLA calls them in its refusal
WITHOUT_EXTRA_CACHE = {"extra_indices": "extra_indices_in_kvcache", "extra_topk_length": "extra_topk_length"}


def validate_scopes(scase: SparseCase, support) -> None:
    """Refuse, with one line, inputs no kernel may be launched on (the module doc); ``support``: the
    backend's ``SparseSupport``."""
    inputs = scase.inputs
    validate_indices(inputs.indices, inputs.num_slots, scase.index_stats, "main cache")
    _check_length("topk_length", inputs.topk_length, inputs.indices, scase.index_stats)
    if inputs.extra_kv_pool is None:
        for name, kernel_name in WITHOUT_EXTRA_CACHE.items():
            if getattr(inputs, name) is not None:
                raise InputError(f"{name} given without an extra cache (FlashMLA: \"{kernel_name} must not be "
                                 "provided when extra_k_cache is not provided\")")
        return
    if inputs.extra_indices is None:
        raise InputError("an extra cache given without extra indices (FlashMLA: \"extra_indices_in_kvcache must "
                         "be provided when extra_kcache is provided\")")
    validate_indices(inputs.extra_indices, inputs.extra_num_slots, scase.extra_stats, "extra cache")
    _check_length("extra_topk_length", inputs.extra_topk_length, inputs.extra_indices, scase.extra_stats)
    _check_pair(inputs, support)


def _check_length(name: str, lengths: torch.Tensor | None, indices: torch.Tensor, stats: IndexStats | None):
    if lengths is None:
        return
    n, width = indices.shape[0], indices.shape[-1]
    if lengths.dtype != torch.int32 or tuple(lengths.shape) != (n,):
        raise InputError(f"{name} must be int32 of shape ({n},), one per kernel row, got {lengths.dtype} "
                         f"{tuple(lengths.shape)}")
    if stats is None or not 0 <= stats.shortest <= stats.longest <= width:
        low, high = (stats.shortest, stats.longest) if stats else (int(lengths.min()), int(lengths.max()))
        bad = low if low < 0 else high
        row = int((lengths == bad).nonzero()[0, 0])
        raise InputError(f"{name} of kernel row {row} is {bad}, outside [0, {width}] (its indices' width)")


def _check_pair(inputs: SparseInputs, support) -> None:
    pair = [inputs.kv_format, inputs.extra_kv_format]
    if pair not in support.pairs():
        declared = ", ".join(f"{a}+{b}" for a, b in support.pairs()) or "none"
        raise InputError(f"main and extra cache formats {pair[0]}+{pair[1]} are not a pair this backend declares "
                         f"(it reads {declared})")
