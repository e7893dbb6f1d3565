"""Materialise a case: q, the poisoned KV page pool, block table, seq lens, scales.

Everything is drawn from generators seeded by the case's seed, so a case id and
seed rebuild the same inputs (on the same kind of device: CPU and CUDA
generators draw different streams).  Lengths and the page layout are always
drawn on the CPU, so they are the same on every device.

The pool starts as all-poison (NaN), then the engine's writes fill it: first the
cached prefix, then, for target-verify, the draft tokens (SGLang writes their KV
with ``set_kv_buffer`` before calling the kernel).  Unused pages, the reserved
page 0 and the tail of each last page stay NaN, so any read outside a request's
tokens poisons its output.

The case's value distributions reshape the draws (``values``) and its layout relays the tensors the
kernel reads (``layouts``); at their defaults both leave the inputs as they were.

Here: ``generate`` and its draws.  ``Inputs`` and what is read from it are ``kernel_inputs``; the pool
and the engine's writes ``kv_store``; a case's lengths ``case_lengths``.  Their names are re-exported
here, where backends, scenarios, plug-ins and tests import them (``Inputs``, ``HostCopy``, ``KVStore``,
``TORCH_DTYPES``, ``host_copy``, ``key_sets``, ``output_buffer``, ``draw_seq_lens``, ...).
"""

import dataclasses
import math

import torch

from ..planning.case import Case
from ..planning.case_lengths import cache_seqlens_for, draw_seq_lens, pinned_pages_for, shared_pages_for  # noqa: F401
from . import input_notes, key_rows, layouts, values
from .kernel_inputs import (  # noqa: F401  (re-exported: see the module doc)
    TORCH_DTYPES,
    HostCopy,
    Inputs,
    host_copy,
    key_counts,
    key_sets,
    output_buffer,
    poisoned,
    torch_dtype,
)
from .kv_store import KVStore, k_scale_for, model_dtype_of, write_kv, write_slots  # noqa: F401
from .pool import layout_bytes, pages_for, pages_used, pool_size

# Past 2^31 bytes torch draws a tensor in pieces, and where the pieces start depends on the element size
FLOAT32_DRAW_IN_ONE = (2 ** 31 - 1) // 4


def draw_normal(shape: tuple, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Standard normal draws on ``gen``'s device, rounded to ``dtype`` from float32.

    On a GPU, a draw whose float32 form would be drawn in one piece is drawn in ``dtype`` directly:
    the kernel draws in float32 and rounds as it stores, so the bits are the same without a float32
    tensor and its copy (checked bit for bit on the H200: docs/archive/gpu-runs-history.md).  A larger one is
    drawn in float32, as it always was: its pieces would fall elsewhere in ``dtype``, and so its draws.
    """
    if gen.device.type == "cuda" and math.prod(shape) <= FLOAT32_DRAW_IN_ONE:
        return torch.randn(shape, generator=gen, device=gen.device, dtype=dtype)
    return torch.randn(shape, generator=gen, device=gen.device).to(dtype)


def generate(case: Case, device: str | torch.device = "cpu", seq_lens: list[int] | None = None) -> Inputs:
    """Build the inputs of one case: every request's prefix, then (verify) its drafts, written before the call."""
    device = torch.device(device)
    seq_lens = draw_seq_lens(case) if seq_lens is None else seq_lens
    cache = cache_seqlens_for(case, seq_lens)
    gen = torch.Generator(device=device).manual_seed(case.seed)
    b, s_q, h_q, d = case.batch_size, case.s_q, case.heads, case.d_qk
    model_dtype = model_dtype_of(case)
    q = draw_normal((b, s_q, h_q, d), gen, model_dtype)
    tokens = draw_normal((sum(cache), case.kv_heads, d), gen, model_dtype)
    q, tokens = values.shaped(case, q, tokens, lambda: key_rows.dense_rows(case, cache, device), gen)
    # The engine writes the cached prefix, then (verify) the drafts, before the call; no slot is written
    # twice, so one write of every token leaves the same pool.
    store = KVStore(case, cache, tokens, device, filled=True)
    inputs = store.inputs(q, cache, table=store.layout.block_table)
    if store.fp8:
        notes = input_notes.fp8_notes(case, q, tokens, store.k_scale, store.pool.dtype)
        inputs = dataclasses.replace(inputs, notes=notes) if notes else inputs
    return layouts.relaid(case, inputs)


def used_pages(case: Case) -> int:
    """The pages ``generate``'s layout puts tokens on (``pool.allocate``), from the drawn lengths alone."""
    cache = cache_seqlens_for(case, draw_seq_lens(case))
    return pages_used([pages_for(n, case.page_size) for n in cache], shared_pages_for(case, cache))


def footprint(case: Case) -> dict[str, int]:
    """The bytes ``generate`` allocates for ``case``, by part, from its drawn lengths alone (the size
    estimate, ``resources``): ``pools`` (the poisoned pool in model precision, and for fp8 the fp8 one),
    ``inputs`` (the float32 draws and their model-dtype copy; for fp8 the scaled float32 and the fp8
    copy), ``layout`` (``pool.layout_bytes``), ``q`` (model precision), and ``outputs``: the output
    buffer and the comparison's copy of the kernel's out, counted at 8 bytes an entry."""
    cache = cache_seqlens_for(case, draw_seq_lens(case))
    token = case.kv_heads * case.d_qk                   # elements per cached token
    model = model_dtype_of(case).itemsize
    fp8 = TORCH_DTYPES[case.dtype].itemsize if case.dtype.startswith("fp8") else 0
    num_pages = pool_size(used_pages(case), case.extra_pages, case.pool_pages)
    pool_shape = (num_pages, case.page_size, case.kv_heads, case.d_qk)
    q_shape = (case.batch_size, case.s_q, case.heads, case.d_qk)
    q_elements = math.prod(q_shape)
    return {
        # a layout other than contiguous copies the pool the kernel reads, and q (fp8: both of its forms)
        "pools": num_pages * case.page_size * token * (model + fp8)
        + layouts.relaid_bytes(case, pool_shape, fp8 or model),
        "inputs": sum(cache) * token * (4 + model + (4 + fp8 if fp8 else 0))
        + values.working_bytes(case, case.batch_size * case.s_q, max(cache, default=0), q_elements, sum(cache) * token),
        "layout": layout_bytes(cache, case.page_size),
        "q": q_elements * model + layouts.relaid_bytes(case, q_shape, model) * (2 if fp8 else 1)
        + layouts.split_q_bytes(case, q_shape, model),
        "outputs": case.batch_size * case.s_q * case.heads * case.d_v * 8 * 2,
    }
