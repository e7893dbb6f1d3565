"""A sparse case's inputs, as SGLang 0.5.23's DSA backend builds them (``dsa_backend.py``), and the gate.

- The pool: pages of ``page_size`` fp8 token records (``sparse_cache``), all poisoned (0xFF: NaN in every
  part of a record) and then written through ``req_to_token`` (``pool.assign_pages``, as ``pool.allocate``
  draws them: shuffled pages, page 0 reserved, spare pages and an optional radix-shared prefix; the table
  built on the device, ``pool.req_to_token_of``) with the tokens some index selects.  A record
  no index selects keeps its poison, scale and rope bytes included, so a read outside every key set shows
  (an engine's cache holds every token; only the selected ones are read).
- The query rows: decode has one per request, which sees its ``seq_len`` tokens.  Target verify is
  flattened as SGLang does it: draft i of request r is a row of its own (``s_q = 1``) that sees
  ``seq_len + i + 1`` tokens; causality lives only in the indices.
- Each row's key set: ``topk`` positions of the tokens it sees (``Case.index_pattern``), mapped to KV
  slots as ``transform_index_page_table_decode`` does (``req_to_token[req, pos]``; -1 stays -1), with a
  -1 tail where the row sees fewer tokens than ``topk``.  FlashMLA reads slot ``page * page_size + offset``.
- ``cache_seqlens = min(tokens seen, topk)``, SGLang's ``dsa_cache_seqlens`` (the scheduler's input).
- vLLM keeps a request's drafts in one kernel row (``Case.verify_rows = "per_request"``: indices
  ``(n, 1 + k, topk)``); the same seed gives the same query tokens and key sets in both shapes.

The case's value distributions reshape q and the tokens before they are written (``values``), and its layout
relays the tensors the kernel reads (``layouts``); at their defaults both leave the inputs as they were.

Here: ``build`` and its draws, and the size estimate.  ``SparseInputs`` and what is read from it (the
index stats, the index gate, the output buffer) are ``sparse_kernel_inputs``; the engine's writes into the
records ``sparse_kv_store``.  Their names are re-exported here, where scenarios, backends and tests import
them.
"""

from functools import cache

import numpy as np
import torch

from reference.sparse import ROW_BLOCK_ELEMENTS

from ..fast import sparse_write_kernel
from ..planning.cases import Case
from . import input_notes, key_rows, layouts, values
from .guards import HASH_ROW_BYTES, guarded
from .inputs import cache_seqlens_for, draw_normal, draw_seq_lens, shared_pages_for
from .kv_store import first_writes
from .pool import assign_pages, req_to_token_of
from .sparse_cache import (  # noqa: F401  (FORMATS: re-exported, see the module doc)
    FORMATS,
    POISON_BYTE,
    quantize,
    record_format,
    write_records,
)
from .sparse_kernel_inputs import (  # noqa: F401  (re-exported: see the module doc)
    IndexStats,
    SparseCase,
    SparseInputs,
    index_stats,
    output_buffer,
    validate_indices,
)
from .sparse_kv_store import selected_writes, written_slots
from .transfer import to_device_named

SINK_SCALE, SINK_SHIFT = 2.0, 4.0          # "random" sinks: N(4, 2^2), near a typical LSE so they matter


def sink_for(case: Case, gen: torch.Generator) -> torch.Tensor | None:
    if case.sink == "none":
        return None
    sink = torch.randn(case.heads, generator=gen) * SINK_SCALE + SINK_SHIFT
    if case.sink == "inf":           # FlashMLA's test draws +-inf sinks: +inf zeroes a head, -inf is no sink
        sink[0::3] = torch.inf
        sink[1::3] = -torch.inf
    return sink


def positions_for(pattern: str, seen: int, topk: int, gen: torch.Generator) -> np.ndarray:
    """The top-k positions (of ``seen`` tokens) one query row lists, -1 padded to ``topk``."""
    row = np.full(topk, -1, dtype=np.int64)
    if pattern == "invalid" or seen == 0:
        return row
    if pattern == "window":
        picked = np.arange(max(0, seen - topk), seen)
    else:
        picked = torch.randperm(seen, generator=gen)[:topk].numpy()
    row[:len(picked)] = picked
    if pattern == "holes":           # -1 entries inside the valid prefix (sglang #30645's shape)
        row[torch.rand(topk, generator=gen).numpy() < 0.25] = -1
    elif pattern == "repeat" and len(picked) > 1:     # a quarter of the entries repeat others
        dup = torch.randperm(len(picked), generator=gen)[:max(1, len(picked) // 4)].numpy()
        row[dup] = picked[torch.randint(0, len(picked), (len(dup),), generator=gen).numpy()]
    return row


def query_rows(case: Case, seq_lens: list[int]) -> list[tuple[int, int]]:
    """``(request, tokens seen)`` per query row: decode's one row per request, verify's flattened drafts."""
    if case.mode == "decode":
        return [(r, n) for r, n in enumerate(seq_lens)]
    return [(r, n + i + 1) for r, n in enumerate(seq_lens) for i in range(case.draft_tokens)]


def row_patterns(case: Case, rows: list[tuple[int, int]]) -> list[str]:
    """Each query row's pattern: ``padded`` is ``random`` with the last third of the requests' rows all -1,
    as CUDA-graph and DP padding rows are."""
    if case.index_pattern != "padded":
        return [case.index_pattern] * len(rows)
    first_padding = case.batch_size - case.batch_size // 3
    return ["invalid" if r >= first_padding else "random" for r, _ in rows]


def host_drawn_positions(case: Case, rows: list, host_gen: torch.Generator) -> torch.Tensor:
    """Each row's listed positions (of the tokens it sees), drawn row by row on the host
    (``positions_for``), -1 padded: ``(rows, topk)`` int32."""
    positions = np.full((len(rows), case.topk), -1, dtype=np.int32)
    for i, ((_, seen), pattern) in enumerate(zip(rows, row_patterns(case, rows))):
        if pattern != "invalid" and seen > 0:       # else all -1, and no draw (as positions_for)
            positions[i] = positions_for(pattern, seen, case.topk, host_gen)
    return torch.from_numpy(positions)


def batched_positions(case: Case, width: int, seen: torch.Tensor) -> torch.Tensor:
    """The ``batched`` pattern: every row's listed positions in one draw on the device, as FlashMLA's tests
    draw theirs (``lib._randperm_batch``: a uniform key per seen position, the ``topk`` largest, -1 past the
    row's positions).  ``seen``: each row's tokens seen, on the device; ``width``: the most tokens a row
    sees, or topk if more.  ``(rows, topk)``.  No per-row host work (FlashMLA's matrix has 1.3 million query
    rows), and no wait."""
    device = seen.device
    gen = torch.Generator(device=device).manual_seed(case.seed + 3)
    keys = torch.rand(len(seen), width, generator=gen, device=device)
    keys.masked_fill_(torch.arange(width, device=device)[None, :] >= seen[:, None], -torch.inf)
    pos = keys.topk(case.topk, dim=-1).indices
    return torch.where(pos < seen[:, None], pos, -1)


def slots_of(positions: torch.Tensor, owner: torch.Tensor, req_to_token: torch.Tensor) -> torch.Tensor:
    """``transform_index_page_table_decode``: each listed position's KV slot, ``req_to_token[owner[row],
    position]``; -1 stays -1.  ``(rows, topk)`` int32, on the tensors' device."""
    listed = positions.long()
    valid = listed >= 0
    slots = req_to_token[owner.long()[:, None], listed.clamp(0, req_to_token.shape[1] - 1)]
    return torch.where(valid, slots, -1).to(torch.int32)


def engine_shape(case: Case) -> int:
    """Query tokens per kernel row: SGLang flattens verify (1); vLLM keeps a request's drafts together."""
    return case.draft_tokens if case.mode == "verify" and case.verify_rows == "per_request" else 1


def build(case: Case, device) -> SparseCase:
    """The case's inputs, from its seed: lengths, pages and listed positions drawn on the host, everything
    as wide as the context (``req_to_token``, the slots, the tokens) built on ``device``.  It waits for the
    device once, for the indices' ``IndexStats`` (the gate reads them on the host)."""
    device = torch.device(device)
    fmt = record_format(case.kv_format)
    seq_lens = draw_seq_lens(case)
    total = cache_seqlens_for(case, seq_lens)           # verify: the drafts' KV is written before the call
    host_gen = torch.Generator().manual_seed(case.seed + 2)
    shared = shared_pages_for(case, total)
    pages = assign_pages(total, case.page_size, case.extra_pages, torch.Generator().manual_seed(case.seed + 1),
                         pool_pages=case.pool_pages, shared_pages=shared)
    rows = query_rows(case, seq_lens)
    s_q = engine_shape(case)
    first = first_writes(shared, case.page_size)
    count = [max(n - f, 0) for f, n in zip(first, total)]
    # SGLang's dsa_cache_seqlens; with a request's drafts in one kernel row, its longest row's
    cache = torch.tensor([min(seen, case.topk) for _, seen in rows], dtype=torch.int32)
    pack = {"cache_seqlens": cache.view(-1, s_q).amax(dim=1).to(torch.int32),
            "pages": torch.from_numpy(pages.pages), "rows": torch.from_numpy(pages.rows),
            "lengths": torch.from_numpy(pages.lengths), "first": torch.tensor(first, dtype=torch.int32),
            "count": torch.tensor(count, dtype=torch.int32),
            "owner": torch.from_numpy(pages.rows[[r for r, _ in rows]])}
    if case.index_pattern == "batched":
        pack["seen"] = torch.tensor([n for _, n in rows], dtype=torch.int32)
    else:
        pack["positions"] = host_drawn_positions(case, rows, host_gen)
    sink = sink_for(case, host_gen)
    if sink is not None:
        pack["sink"] = sink.float().view(torch.int32)          # as its bits: one int32 transfer carries all
    sent = to_device_named(pack, device)
    req_to_token = req_to_token_of(sent["pages"], sent["lengths"], sent["rows"], pages.max_reqs, case.page_size)
    if case.index_pattern == "batched":
        width = max(max((n for _, n in rows), default=0), case.topk)
        sent["positions"] = batched_positions(case, width, sent["seen"])
    indices = slots_of(sent["positions"], sent["owner"], req_to_token).view(len(rows) // s_q, s_q, case.topk)
    num_slots = pages.num_pages * case.page_size
    slots = selected_writes(indices, written_slots(req_to_token, sent["rows"], sent["first"], sent["count"],
                                                   sum(count)), num_slots)
    gen = torch.Generator(device=device).manual_seed(case.seed)
    q = draw_normal((len(rows) // s_q, s_q, case.heads, case.d_qk), gen, torch.bfloat16)
    tokens = draw_normal((len(slots), case.d_qk), gen, torch.bfloat16)      # the written ones: no others are read
    q, tokens = values.shaped(case, q, tokens[:, None], gen=gen, rows_of=lambda: key_rows.sparse_rows(
        indices, slots, num_slots, [r for r, _ in rows]))
    tokens = tokens[:, 0]
    # one spare page past the pool takes the padding writes, and is poisoned again after them
    records = guarded((pages.num_pages + 1, fmt.page_bytes(case.page_size)), torch.uint8, device, POISON_BYTE)
    if not sparse_write_kernel.write_tokens(records, slots, tokens, fmt, case.page_size, case.kv_scales):
        write_records(records, slots, quantize(tokens, fmt, case.kv_scales), fmt, case.page_size)
    records[pages.num_pages].fill_(POISON_BYTE)
    notes = input_notes.record_notes(case, records, slots, num_slots, fmt)
    inputs = SparseInputs(
        q=q, kv_pool=records[:pages.num_pages, :case.page_size * fmt.bytes_per_token].view(
            pages.num_pages, case.page_size, 1, fmt.bytes_per_token),        # stride(0): the page's stride
        indices=indices, cache_seqlens=sent["cache_seqlens"],
        attn_sink=sent["sink"].view(torch.float32) if sink is not None else None,
        req_to_token=req_to_token, softmax_scale=case.softmax_scale, d_v=case.d_v, kv_format=case.kv_format)
    scase = SparseCase(inputs, index_stats(indices), [seen for _, seen in rows], list(seq_lens), notes)
    return layouts.relaid_sparse(case, scase)


def estimated_bytes(case: Case) -> dict[str, int]:
    """A sparse case's peak device bytes by part, and their ``total``: the records, the tokens drawn and
    quantized (those written, at most one per index entry; PyTorch's form: bf16 draws, then float32 tiles,
    their abs, the scaled values and their clamp, about 20 bytes an element), the bf16 copy of the whole
    pool the prefill-kernel adapters dequantize, and the oracle's float64 block of listed keys
    (``reference.sparse.ROW_BLOCK_ELEMENTS``) three times over (the keys, their records and a view's
    temporaries, the scores: about 2.2 times on the largest heads) with its output."""
    return dict(_estimate(case))


@cache      # asked for every case by the size check and, chunk after chunk, by the plan
def _estimate(case: Case) -> dict[str, int]:
    fmt = record_format(case.kv_format)
    total = cache_seqlens_for(case, draw_seq_lens(case))
    layout_pages = case.pool_pages or 1 + sum(-(-n // case.page_size) for n in total) + case.extra_pages
    rows = len(query_rows(case, list(draw_seq_lens(case))))
    parts = {"records": layout_pages * fmt.page_bytes(case.page_size),
             "draws": min(sum(total), rows * case.topk) * case.d_qk * 20,
             "bf16_pool": layout_pages * case.page_size * case.d_qk * 2,
             "oracle": min(ROW_BLOCK_ELEMENTS, rows * case.topk * case.d_qk) * 8 * 3
             + rows * case.heads * (case.d_qk + case.d_v) * 8 * 4}
    # a layout other than contiguous copies the records (a page the larger); values other than normal work
    # on float32 copies of q and the tokens, and the keys each row lists
    parts["records"] += layouts.relaid_bytes(case, (layout_pages, fmt.page_bytes(case.page_size)), 1)
    parts["draws"] += values.working_bytes(case, rows, case.topk, rows * case.heads * case.d_qk,
                                           min(sum(total), rows * case.topk) * case.d_qk)
    parts["total"] = sum(parts.values())
    return parts


@cache
def chunk_parts(case: Case) -> dict[str, int]:
    """The case's share of a chunk's memory (``resources.chunk_bytes``), from ``estimated_bytes``:
    ``held`` until the chunk's comparison (the records, the witness's fingerprints of them, the kernel's
    and the oracle's outputs) and ``passing`` (the largest of the draws, the prefill adapters' bf16 pool
    and the oracle's block of keys, which come and go one case at a time)."""
    need = _estimate(case)
    outputs = need["oracle"] - min(ROW_BLOCK_ELEMENTS, _entries(case) * case.d_qk) * 8 * 3
    return {"held": need["records"] + 2 * 8 * (need["records"] // HASH_ROW_BYTES) + outputs,
            "passing": max(need["draws"], need["bf16_pool"], need["oracle"] - outputs)}


def _entries(case: Case) -> int:
    """Index entries of the case: query rows times ``topk``."""
    return len(query_rows(case, list(draw_seq_lens(case)))) * case.topk
