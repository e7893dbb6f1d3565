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
- DeepSeek V4's compressed layers read a second cache in the same call (``Case.extra_topk``): its own
  records, page size, entries per request and indices, and each scope its own per-row length
  (``Case.topk_length``, ``Case.extra_topk_length``).  Both scopes are built by the same steps
  (``sparse_scope``); a case without the extra cache builds exactly what it always built.

The case's value distributions reshape q and the tokens before they are written (``values``), and its layout
relays the tensors the kernel reads (``layouts``); at their defaults both leave the inputs as they were.

Here: ``build``, the scopes' specs, and the size estimate.  ``SparseInputs`` and what is read from it (the
index stats, the index gate, the output buffer) are ``sparse_kernel_inputs``; the engine's writes into the
records ``sparse_kv_store``.  Their names are re-exported here, where scenarios, backends and tests import
them.
"""

from functools import cache

import torch

from reference.sparse import ROW_BLOCK_ELEMENTS

from ..planning.case_lengths import extra_entries, extra_ratio
from ..planning.cases import Case
from . import input_notes, key_rows, layouts, values
from .guards import HASH_ROW_BYTES
from .inputs import cache_seqlens_for, draw_normal, draw_seq_lens, shared_pages_for
from .kv_store import first_writes
from .sparse_cache import FORMATS, record_format  # noqa: F401  (FORMATS: re-exported, see the module doc)
from .sparse_kernel_inputs import (  # noqa: F401  (re-exported: see the module doc)
    IndexStats,
    SparseCase,
    SparseInputs,
    index_stats,
    output_buffer,
    validate_indices,
)
from .sparse_kv_store import written_slots  # noqa: F401  (re-exported: see the module doc)
from .sparse_scope import Scope, ScopeSpec, place, plan, write
from .transfer import to_device_named

SINK_SCALE, SINK_SHIFT = 2.0, 4.0          # "random" sinks: N(4, 2^2), near a typical LSE so they matter
EXTRA_SEED = 10                            # the extra scope's draws: case.seed + 10 on (its tokens' + 15)


def sink_for(case: Case, gen: torch.Generator) -> torch.Tensor | None:
    if case.sink == "none":
        return None
    sink = torch.randn(case.heads, generator=gen) * SINK_SCALE + SINK_SHIFT
    if case.sink == "inf":           # FlashMLA's test draws +-inf sinks: +inf zeroes a head, -inf is no sink
        sink[0::3] = torch.inf
        sink[1::3] = -torch.inf
    return sink


def query_rows(case: Case, seq_lens: list[int]) -> list[tuple[int, int]]:
    """``(request, tokens seen)`` per query row: decode's one row per request, verify's flattened drafts."""
    if case.mode == "decode":
        return [(r, n) for r, n in enumerate(seq_lens)]
    return [(r, n + i + 1) for r, n in enumerate(seq_lens) for i in range(case.draft_tokens)]


def engine_shape(case: Case) -> int:
    """Query tokens per kernel row: SGLang flattens verify (1); vLLM keeps a request's drafts together."""
    return case.draft_tokens if case.mode == "verify" and case.verify_rows == "per_request" else 1


def first_padding_request(case: Case) -> int:
    """The ``padded`` pattern's first padding request: the last third of the batch's are (CUDA-graph and DP
    padding), in both caches."""
    return case.batch_size - case.batch_size // 3


def main_spec(case: Case, seq_lens: list[int]) -> ScopeSpec:
    """The main cache's scope: the case's pages, its requests' tokens, its index pattern and length."""
    total = cache_seqlens_for(case, seq_lens)           # verify: the drafts' KV is written before the call
    shared = shared_pages_for(case, total)
    return ScopeSpec(record_format(case.kv_format), case.page_size, total, first_writes(shared, case.page_size),
                     shared, case.extra_pages, case.pool_pages, query_rows(case, seq_lens), engine_shape(case),
                     case.topk, case.index_pattern, first_padding_request(case), case.topk_length, case.seed)


def extra_spec(case: Case, seq_lens: list[int]) -> ScopeSpec | None:
    """The extra cache's scope (None without one): its own format, page size, entries per request
    (``case_lengths.extra_entries``), pattern and length.  A query row sees all its request's entries, or
    with ``ratio:N`` the compressed entries of the tokens it sees."""
    if not case.extra_topk:
        return None
    entries = extra_entries(case, cache_seqlens_for(case, seq_lens))
    ratio = extra_ratio(case)
    rows = [(r, seen // ratio if ratio else entries[r]) for r, seen in query_rows(case, seq_lens)]
    return ScopeSpec(record_format(case.extra_kv_format or case.kv_format), case.extra_page_size, entries,
                     [0] * len(entries), None, case.extra_pages, 0, rows, engine_shape(case), case.extra_topk,
                     case.extra_index_pattern, first_padding_request(case), case.extra_topk_length,
                     case.seed + EXTRA_SEED)


def _named(prefix: str, pack: dict) -> dict:
    return {f"{prefix}{k}": v for k, v in pack.items()}


def _unnamed(prefix: str, sent: dict) -> dict:
    return {k[len(prefix):]: v for k, v in sent.items() if k.startswith(prefix)}


def build(case: Case, device) -> SparseCase:
    """The case's inputs, from its seed: lengths, pages and listed positions drawn on the host (``plan``),
    sent in one transfer, everything as wide as the context (``req_to_token``, the slots, the tokens) built
    on ``device`` (``place``).  It waits for the device once per cache, for its indices' ``IndexStats`` (the
    gate reads them on the host)."""
    device = torch.device(device)
    seq_lens = draw_seq_lens(case)
    specs = {"main.": main_spec(case, seq_lens), "extra.": extra_spec(case, seq_lens)}
    planned = {name: plan(spec) for name, spec in specs.items() if spec is not None}
    main = specs["main."]
    rows = main.rows
    # SGLang's dsa_cache_seqlens; with a request's drafts in one kernel row, its longest row's
    cache = torch.tensor([min(seen, case.topk) for _, seen in rows], dtype=torch.int32)
    pack = {"cache_seqlens": cache.view(-1, main.s_q).amax(dim=1).to(torch.int32)}
    for name, (_, part, _) in planned.items():
        pack.update(_named(name, part))
    sink = sink_for(case, planned["main."][2])
    if sink is not None:
        pack["sink"] = sink.float().view(torch.int32)          # as its bits: one int32 transfer carries all
    sent = to_device_named(pack, device)
    scopes = {name: place(specs[name], pages, _unnamed(name, sent)) for name, (pages, _, _) in planned.items()}
    scope = scopes["main."]
    gen = torch.Generator(device=device).manual_seed(case.seed)
    n = len(rows) // main.s_q
    q = draw_normal((n, main.s_q, case.heads, case.d_qk), gen, torch.bfloat16)
    tokens = draw_normal((len(scope.slots), case.d_qk), gen, torch.bfloat16)      # the written ones: no others are read
    q, tokens = values.shaped(case, q, tokens[:, None], gen=gen, rows_of=lambda: key_rows.sparse_rows(
        scope.indices, scope.slots, scope.num_slots, [r for r, _ in rows]))
    write(scope, tokens[:, 0], case.kv_scales)
    extra = scopes.get("extra.")
    if extra is not None:        # the compressed cache's tokens: N(0, 1), its own generator
        extra_gen = torch.Generator(device=device).manual_seed(case.seed + EXTRA_SEED + 5)
        write(extra, draw_normal((len(extra.slots), case.d_qk), extra_gen, torch.bfloat16), case.kv_scales)
    notes = input_notes.record_notes(case, scope.records, scope.slots, scope.num_slots, main.fmt)
    inputs = SparseInputs(
        q=q, kv_pool=scope.pool, indices=scope.indices, cache_seqlens=sent["cache_seqlens"],
        attn_sink=sent["sink"].view(torch.float32) if sink is not None else None,
        req_to_token=scope.req_to_token, softmax_scale=case.softmax_scale, d_v=case.d_v, kv_format=case.kv_format,
        topk_length=scope.lengths, **(extra_fields(extra) if extra is not None else {}))
    scase = SparseCase(inputs, index_stats(scope.indices, scope.lengths), [seen for _, seen in rows],
                       list(seq_lens), notes, index_stats(extra.indices, extra.lengths) if extra else None)
    return layouts.relaid_sparse(case, scase)


def extra_fields(extra: Scope) -> dict:
    """``SparseInputs``' extra-cache fields, from its scope."""
    return {"extra_kv_pool": extra.pool, "extra_indices": extra.indices, "extra_topk_length": extra.lengths,
            "extra_kv_format": extra.spec.fmt.name, "extra_req_to_token": extra.req_to_token}


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
    width = case.topk + case.extra_topk            # a row's entries over both scopes: the oracle's block
    parts = {"records": layout_pages * fmt.page_bytes(case.page_size) + _extra_record_bytes(case, total),
             "draws": min(sum(total), rows * case.topk) * case.d_qk * 20,
             "bf16_pool": layout_pages * case.page_size * case.d_qk * 2,
             "oracle": min(ROW_BLOCK_ELEMENTS, rows * width * case.d_qk) * 8 * 3
             + rows * case.heads * (case.d_qk + case.d_v) * 8 * 4}
    # a layout other than contiguous copies the records (a page the larger); values other than normal work
    # on float32 copies of q and the tokens, and the keys each row lists
    parts["records"] += layouts.relaid_bytes(case, (layout_pages, fmt.page_bytes(case.page_size)), 1)
    parts["draws"] += values.working_bytes(case, rows, case.topk, rows * case.heads * case.d_qk,
                                           min(sum(total), rows * case.topk) * case.d_qk)
    parts["total"] = sum(parts.values())
    return parts


def _extra_record_bytes(case: Case, total: list[int]) -> int:
    """The extra cache's records (0 without one): page 0, its requests' pages and the spare ones."""
    if not case.extra_topk:
        return 0
    pages = 1 + sum(-(-n // case.extra_page_size) for n in extra_entries(case, total)) + case.extra_pages
    return pages * record_format(case.extra_kv_format or case.kv_format).page_bytes(case.extra_page_size)


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
    """Index entries of the case: query rows times their entries over both scopes."""
    return len(query_rows(case, list(draw_seq_lens(case)))) * (case.topk + case.extra_topk)
