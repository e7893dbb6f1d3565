"""Small summaries of where a failing case's error lives, stored in its result row.

Whole tensors never go into a row; these do, so the report can draw a heatmap
over heads x query tokens, the error per request against its length and pages,
the worst elements and a histogram of error over bound, without rerunning.
Each is small: at most (heads or batch) x query tokens numbers, ten elements, two histograms.
"""

import torch

from ..building.pool import pages_for
from .tolerances import Bound

TOP_K = 10
HIST_EDGES = [-6, -4, -3, -2, -1, -0.5, 0, 0.5, 1, 2, 3, 6]   # log10(error / bound)


def error_ratio(actual, expected, bound: Bound) -> torch.Tensor:
    """Per-element error over its bound; a NaN/inf position mismatch counts as +inf."""
    a, e = actual.double().to(expected.device), expected.double()
    finite = torch.isfinite(a) & torch.isfinite(e)
    same = (torch.isnan(a) & torch.isnan(e)) | (a == e)
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(e))
    ratio = err / (bound.atol + bound.rtol * torch.where(finite, e.abs(), torch.zeros_like(e)))
    return torch.where(finite | same, ratio, torch.full_like(ratio, float("inf")))


def _histogram(ratio: torch.Tensor) -> dict:
    logs = torch.log10(ratio.flatten().clamp(min=1e-30)).clamp(HIST_EDGES[0], HIST_EDGES[-1])
    counts = torch.histogram(logs.cpu().float(), bins=torch.tensor(HIST_EDGES, dtype=torch.float32)).hist
    return {"edges_log10": HIST_EDGES, "counts": [int(c) for c in counts]}


def summarize(inputs, out, lse, expected_out, expected_lse, tol) -> dict:
    """Summaries of a failing comparison (out ``(b, s_q, h, d_v)``, LSE ``(b, h, s_q)``)."""
    if tuple(out.shape) != tuple(expected_out.shape) or tuple(lse.shape) != tuple(expected_lse.shape):
        return {}
    r_out = error_ratio(out, expected_out, tol.out)           # (b, s_q, h, d_v)
    r_lse = error_ratio(lse, expected_lse, tol.lse)           # (b, h, s_q)
    P = inputs.page_size
    seq = inputs.cache_seqlens.cpu().tolist()
    per_request = r_out.amax(dim=(1, 2, 3)).cpu().tolist()
    flat = r_out.flatten()
    k = min(TOP_K, flat.numel())
    top = torch.topk(torch.nan_to_num(flat, posinf=1e300), k).indices.tolist() if k else []
    shape = tuple(r_out.shape)
    worst = []
    for f in top:
        idx, rem = [], f
        for size in reversed(shape):
            idx.append(rem % size)
            rem //= size
        idx = tuple(reversed(idx))
        worst.append({"index": list(idx), "actual": float(out[idx]), "expected": float(expected_out[idx]),
                      "ratio": float(r_out[idx])})
    return {
        "head_query_ratio": r_out.amax(dim=(0, 3)).transpose(0, 1).cpu().tolist(),   # (h, s_q)
        "lse_head_query_ratio": r_lse.amax(dim=0).cpu().tolist(),                     # (h, s_q)
        # (b, s_q): query token i of request r sees keys up to seqlen - s_q + i, so this places
        # the error along KV position (the report draws it on each request's page strip)
        "request_query_ratio": r_out.amax(dim=(2, 3)).cpu().tolist(),
        "lse_request_query_ratio": r_lse.amax(dim=1).cpu().tolist(),
        "request_ratio": per_request,
        "request_seqlen": seq,
        "request_pages": [pages_for(n, P) for n in seq],
        "request_last_page_fill": [n % P or (P if n else 0) for n in seq],
        "worst_elements": worst,
        "histogram": _histogram(r_out),
        "lse_histogram": _histogram(r_lse),
    }
