"""The LSE merge of partial attentions, as split-KV (flash-decoding) kernels do it.

Two partial results over disjoint key sets A and B, each normalised over its own
keys, combine into the result over A ∪ B:

    lse = log(exp(lse_a) + exp(lse_b))
    out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b

An empty part follows FlashMLA's convention (out 0, lse +inf) and contributes
nothing; merging two empty parts gives an empty result.
"""

import torch


def _as_log_weight(lse: torch.Tensor) -> torch.Tensor:
    # +inf marks "no keys" (FlashMLA's convention); in log-sum-exp terms that is -inf.
    return torch.where(torch.isposinf(lse), torch.full_like(lse, float("-inf")), lse)


def merge_attention(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two partial attentions.

    ``out_*`` has shape ``(..., d_v)`` and ``lse_*`` the matching ``(...)``.
    Returns ``(out, lse)`` with the same shapes.
    """
    la, lb = _as_log_weight(lse_a), _as_log_weight(lse_b)
    lse = torch.logaddexp(la, lb)
    empty = torch.isneginf(lse)
    safe = torch.where(empty, torch.zeros_like(lse), lse)
    wa = torch.exp(la - safe).unsqueeze(-1)
    wb = torch.exp(lb - safe).unsqueeze(-1)
    out = wa * out_a + wb * out_b
    out = torch.where(empty.unsqueeze(-1), torch.zeros_like(out), out)
    lse = torch.where(empty, torch.full_like(lse, float("inf")), lse)
    return out, lse
