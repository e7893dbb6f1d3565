"""One scope of a sparse case: a pool of token records, its pages and table, and each query row's index
entries into it, with the row's length.  Sparse V3.2 reads one scope (the main cache); DeepSeek V4's
compressed layers read a second, the extra cache, in the same call and the same softmax (docs/sparse.md).
Both are built by these steps: ``plan`` on the host (the pages, the listed positions, the lengths drawn),
one transfer for the whole case (``sparse_inputs.build``), then ``place`` on the device and ``write``.

- The pool: pages of ``page_size`` records (``sparse_cache``), all poisoned (0xFF: NaN in every part) and
  then written through ``req_to_token`` (``pool.assign_pages``: shuffled pages, page 0 reserved, spare pages,
  an optional radix-shared prefix) with only the tokens some counted entry selects.
- A row's entries: ``topk`` positions of the tokens it sees (``positions_for``), mapped to slots as SGLang's
  ``transform_index_page_table_decode`` does (``req_to_token[req, pos]``; -1 stays -1), -1 padded.
- Its length (``Case.topk_length``, ``LENGTHS``), one per kernel row: a position at or past it is invalid
  whatever its index says (``reference.sparse.counted``).  The entries past it keep their slots, and those
  slots are written only where a counted entry selects them too, so a kernel that reads past the length
  reads NaN, as in FlashMLA's tests (``lib.generate_testcase_for_decode`` poisons every unused token).
"""

from dataclasses import dataclass

import numpy as np
import torch

from reference.sparse import counted

from ..fast import sparse_write_kernel
from ..planning.record_formats import RecordFormat
from .guards import guarded
from .pool import PageAssignment, assign_pages, req_to_token_of
from .sparse_cache import POISON_BYTE, quantize, write_records
from .sparse_kv_store import selected_writes, written_slots


@dataclass(frozen=True)
class ScopeSpec:
    """What one scope is drawn from: its records and pages, each request's tokens, each query row's
    ``(request, tokens seen)``, and how its entries and lengths are drawn."""

    fmt: RecordFormat
    page_size: int
    totals: list                # tokens each request holds
    first: list                 # each request's first token the engine writes (a shared prefix's once)
    shared: list | None         # pages of a shared prefix per request, or None
    extra_pages: int
    pool_pages: int
    rows: list                  # (request, tokens seen) per query row
    s_q: int                    # query rows per kernel row
    topk: int
    pattern: str                # Case.index_pattern's vocabulary
    padding_from: int           # requests from here on are padding rows ("padded"): all -1
    length: str                 # Case.topk_length's vocabulary (planning.case.LENGTHS)
    seed: int                   # pages seed + 1, positions seed + 2, the device's draw seed + 3

    @property
    def writes(self) -> list[int]:
        """Tokens the engine writes per request: its tokens from its first written one on."""
        return [max(n - f, 0) for f, n in zip(self.first, self.totals)]


@dataclass(frozen=True)
class Scope:
    """A scope on the device: the records (one spare page past the pool, poisoned), the indices
    ``(n, s_q, topk)`` int32, the lengths ``(n,)`` int32 or None, the slots written."""

    spec: ScopeSpec
    records: torch.Tensor
    num_pages: int
    indices: torch.Tensor
    lengths: torch.Tensor | None
    slots: torch.Tensor
    req_to_token: torch.Tensor

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.spec.page_size

    @property
    def pool(self) -> torch.Tensor:
        """The records as the kernel reads them ``(pages, page_size, 1, bytes_per_token)``; stride(0) is the
        page's stride."""
        fmt, P = self.spec.fmt, self.spec.page_size
        return self.records[:self.num_pages, :P * fmt.bytes_per_token].view(self.num_pages, P, 1,
                                                                              fmt.bytes_per_token)


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


def row_patterns(spec: ScopeSpec) -> list[str]:
    """Each query row's pattern: ``padded`` is ``random`` with the padding requests' rows all -1, as
    CUDA-graph and DP padding rows are."""
    if spec.pattern != "padded":
        return [spec.pattern] * len(spec.rows)
    return ["invalid" if r >= spec.padding_from else "random" for r, _ in spec.rows]


def host_drawn_positions(spec: ScopeSpec, host_gen: torch.Generator) -> torch.Tensor:
    """Each row's listed positions, drawn row by row on the host (``positions_for``), -1 padded:
    ``(rows, topk)`` int32."""
    positions = np.full((len(spec.rows), spec.topk), -1, dtype=np.int32)
    for i, ((_, seen), pattern) in enumerate(zip(spec.rows, row_patterns(spec))):
        if pattern != "invalid" and seen > 0:       # else all -1, and no draw (as positions_for)
            positions[i] = positions_for(pattern, seen, spec.topk, host_gen)
    return torch.from_numpy(positions)


def batched_positions(spec: ScopeSpec, width: int, seen: torch.Tensor) -> torch.Tensor:
    """The ``batched`` pattern: every row's listed positions in one draw on the device, as FlashMLA's tests
    draw theirs (``lib._randperm_batch``: a uniform key per seen position, the ``topk`` largest, -1 past the
    row's positions).  ``seen``: each row's tokens seen, on the device; ``width``: the most tokens a row
    sees, or topk if more.  ``(rows, topk)``.  No per-row host work, and no wait."""
    device = seen.device
    gen = torch.Generator(device=device).manual_seed(spec.seed + 3)
    keys = torch.rand(len(seen), width, generator=gen, device=device)
    keys.masked_fill_(torch.arange(width, device=device)[None, :] >= seen[:, None], -torch.inf)
    pos = keys.topk(spec.topk, dim=-1).indices
    return torch.where(pos < seen[:, None], pos, -1)


def slots_of(positions: torch.Tensor, owner: torch.Tensor, req_to_token: torch.Tensor) -> torch.Tensor:
    """``transform_index_page_table_decode``: each listed position's KV slot, ``req_to_token[owner[row],
    position]``; -1 stays -1.  ``(rows, topk)`` int32, on the tensors' device."""
    listed = positions.long()
    valid = listed >= 0
    slots = req_to_token[owner.long()[:, None], listed.clamp(0, req_to_token.shape[1] - 1)]
    return torch.where(valid, slots, -1).to(torch.int32)


def plan(spec: ScopeSpec) -> tuple[PageAssignment, dict, torch.Generator]:
    """The host's part: the pages, and what goes to the device (the pages, the rows' owners and either
    their listed positions or, for ``batched``, their tokens seen), and the host generator (the case draws
    its sink from it after the positions, as it always has)."""
    pages = assign_pages(spec.totals, spec.page_size, spec.extra_pages,
                         torch.Generator().manual_seed(spec.seed + 1), pool_pages=spec.pool_pages,
                         shared_pages=spec.shared)
    host_gen = torch.Generator().manual_seed(spec.seed + 2)
    pack = {"pages": torch.from_numpy(pages.pages), "rows": torch.from_numpy(pages.rows),
            "lengths": torch.from_numpy(pages.lengths), "first": torch.tensor(spec.first, dtype=torch.int32),
            "count": torch.tensor(spec.writes, dtype=torch.int32),
            "owner": torch.from_numpy(pages.rows[[r for r, _ in spec.rows]])}
    if spec.pattern == "batched":
        pack["seen"] = torch.tensor([n for _, n in spec.rows], dtype=torch.int32)
    else:
        pack["positions"] = host_drawn_positions(spec, host_gen)
    if spec.length == "random":     # FlashMLA's tests: randint(0, topk + 1) per kernel row
        pack["topk_length"] = torch.randint(0, spec.topk + 1, (len(spec.rows) // spec.s_q,), dtype=torch.int32,
                                            generator=torch.Generator().manual_seed(spec.seed + 4))
    return pages, pack, host_gen


def place(spec: ScopeSpec, pages: PageAssignment, sent: dict) -> Scope:
    """The device's part, from ``plan``'s pack on the device: the table, the indices and lengths, the
    slots to write, and the poisoned records."""
    req_to_token = req_to_token_of(sent["pages"], sent["lengths"], sent["rows"], pages.max_reqs, spec.page_size)
    if spec.pattern == "batched":
        width = max(max((n for _, n in spec.rows), default=0), spec.topk)
        sent["positions"] = batched_positions(spec, width, sent["seen"])
    rows = len(spec.rows)
    indices = slots_of(sent["positions"], sent["owner"], req_to_token).view(rows // spec.s_q, spec.s_q, spec.topk)
    lengths = sent.get("topk_length")
    if spec.length in ("listed", "listed_min1"):
        lengths = listed_lengths(indices, 1 if spec.length == "listed_min1" else 0)
    num_slots = pages.num_pages * spec.page_size
    slots = selected_writes(counted(indices, lengths), written_slots(
        req_to_token, sent["rows"], sent["first"], sent["count"], sum(spec.writes)), num_slots)
    # one spare page past the pool takes the padding writes, and is poisoned again after them
    records = guarded((pages.num_pages + 1, spec.fmt.page_bytes(spec.page_size)), torch.uint8, indices.device,
                      POISON_BYTE)
    return Scope(spec, records, pages.num_pages, indices, lengths, slots, req_to_token)


def listed_lengths(indices: torch.Tensor, least: int) -> torch.Tensor:
    """Per kernel row, the end of its listed entries (one past the last that is not -1) over its query
    tokens, at least ``least``: the length an engine passes (vLLM's ``min(pos + 1, window)``).  ``(n,)``
    int32."""
    n, s_q, topk = indices.shape
    at = torch.arange(1, topk + 1, device=indices.device, dtype=torch.int32)
    ends = torch.where(indices >= 0, at, 0).amax(dim=-1) if topk else indices.new_zeros(n, s_q)
    return ends.amax(dim=-1).clamp_min(least).to(torch.int32)


def write(scope: Scope, tokens: torch.Tensor, policy: str):
    """The tokens ``(len(scope.slots), d_qk)`` bf16 written as records at their slots (the spare page's
    writes poisoned again after)."""
    fmt, P = scope.spec.fmt, scope.spec.page_size
    if not sparse_write_kernel.write_tokens(scope.records, scope.slots, tokens, fmt, P, policy):
        write_records(scope.records, scope.slots, quantize(tokens, fmt, policy), fmt, P)
    scope.records[scope.num_pages].fill_(POISON_BYTE)
