"""The engine's writes into a sparse case's pool of records: which slots it writes (``written_slots``) and,
of those, the ones some index selects (``selected_writes``); ``sparse_inputs.build`` writes the tokens there
and leaves every other record poisoned."""

import torch

from .pool import token_index


def written_slots(req_to_token: torch.Tensor, rows: torch.Tensor, first: torch.Tensor, count: torch.Tensor,
                  total: int) -> torch.Tensor:
    """The slots the engine writes (``kv_store.write_slots``' order): request r's tokens ``first[r]`` on, ``count[r]``
    of them, request by request, read from its row ``rows[r]`` of ``req_to_token``; ``total`` (the sum of
    ``count``, known on the host) fixes the length, so nothing waits."""
    request, offset = token_index(count, req_to_token.device, total)
    return req_to_token[rows.long()[request], first.long()[request] + offset]


def selected_writes(indices: torch.Tensor, slots: torch.Tensor, num_slots: int) -> torch.Tensor:
    """The slots of the engine's writes (``slots``, from ``written_slots``) of the tokens some index selects,
    on the indices' device, without waiting for it: in their order, then padded to a length fixed by the
    shapes alone (no slot is written twice, so at most one write per index entry) with writes to slot
    ``num_slots``, the spare page past the pool (``build`` poisons it again).  The other tokens are not
    written: their records keep the pool's poison, so a kernel that reads a record outside every key set
    (its own request's included) reads NaN."""
    listed = torch.zeros(num_slots + 1, dtype=torch.bool, device=indices.device)
    listed.index_fill_(0, indices.reshape(-1).long().clamp_max(num_slots), True)   # -1 (and past the pool): the last
    chosen = listed[slots.long()]
    n = min(len(slots), indices.numel())
    # each chosen write's place among the chosen; the others all go to cell n, thrown away
    place = torch.where(chosen, torch.cumsum(chosen, 0) - 1, n)
    picked = torch.full((n + 1,), -1, dtype=torch.long, device=indices.device)
    picked.scatter_(0, place, torch.arange(len(slots), device=indices.device))
    picked = picked[:n]
    return torch.where(picked >= 0, slots[picked.clamp_min(0)], num_slots)

