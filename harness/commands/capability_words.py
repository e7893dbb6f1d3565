"""A backend's declared capabilities in words, for ``mla-verify list``.

Each key of ``Capabilities.describe()`` (or of its sparse section's, ``SparseSupport.describe()``) becomes a
phrase under a heading: what the backend runs, its devices, its limits, the kernel's own words for a limit,
and its conventions.  A value that is no limit (``None``, a default) gives no phrase; a key with no words here is
shown as ``key: value`` under "other", so nothing a backend declares is dropped.
"""

import json
import math

RUNS, DEVICES, LIMITS, QUOTED, CONVENTIONS, ENGINE, OTHER = (
    "runs", "devices", "limits", "kernel says", "conventions", "engine", "other")
HEADINGS = (RUNS, DEVICES, LIMITS, QUOTED, CONVENTIONS, ENGINE, OTHER)


def one_of(values) -> str:
    """``[576]`` -> "576"; ``[64, 128]`` -> "64 or 128"; three or more -> "a, b or c"."""
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _lse(value) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return str(value)


def _listed(label):
    """A limit: the values a case may take."""
    return lambda v: None if v is None else f"{label} {one_of(v)}"


def _all(label):
    """What it runs: every value listed."""
    return lambda v: f"{label} {', '.join(map(str, v))}"


def _at_most(noun):
    return lambda n: f"at most {n} {noun}{'' if n == 1 else 's'} a request"


INDEXES = {"page_table": "a page table", "token_slots": "token slots",
           "csr_pages": "CSR page lists"}
FP8_Q = {"quantized_k_scale": "fp8: q quantised with K's scale", "model_dtype": "fp8: q given in the model dtype",
         "cast_in_kernel": "fp8: q cast to fp8 inside the kernel"}
DEQUANT = {"exact": "KV records dequantised exactly", "bf16_product": "KV dequantised as a bf16 product",
           "e4m3": "q and the dequantised KV cast to e4m3"}


def _layouts(v) -> str | None:
    """The dense layouts it takes, where they are more than a kernel taking q whole takes."""
    from ..planning.case import WHOLE_Q_LAYOUTS  # here, not at the top: ``planning`` imports torch
    return None if tuple(v) == WHOLE_Q_LAYOUTS else f"layouts: {one_of(v)}"


# key -> (heading, value -> phrase or None).  Keys both forms share come first.
SHARED = {
    "devices": (DEVICES, lambda v: f"{one_of(v)}" + (" only" if len(v) == 1 else "")),
    "page_sizes": (LIMITS, _listed("page size")),
    "lse_base": (CONVENTIONS, lambda v: f"LSE base {v}" + (" (converted before comparing)" if v != "e" else "")),
    "empty_row_lse": (CONVENTIONS, lambda v: f"LSE {_lse(v)} for a row with no visible key"),
    "index_format": (CONVENTIONS, lambda v: f"indexes KV by {INDEXES.get(v, v)}"),
    "engine": (ENGINE, lambda v: str(v)),
}
DENSE = {
    **SHARED,
    "modes": (RUNS, _all("modes")),
    "dtypes": (RUNS, _all("dtypes")),
    "heads": (LIMITS, _listed("q heads")),
    "kv_heads": (LIMITS, lambda v: None if v is None else "one KV head" if list(v) == [1] else f"KV heads {one_of(v)}"),
    "d_qk": (LIMITS, _listed("d_qk")),
    "d_v": (LIMITS, _listed("d_v")),
    "max_draft_tokens": (LIMITS, _at_most("query token")),
    "non_causal": (LIMITS, lambda v: None if v else "causal only"),
    "layouts": (LIMITS, _layouts),
    "has_lse": (LIMITS, lambda v: None if v else "returns no LSE: out alone is checked"),
    "fixed_softmax_scale": (LIMITS, lambda v: None if v is None else
                            f"softmax scale fixed at {v} (every case runs at it)"),
    "quoted_limits": (QUOTED, lambda v: [f"{what}: {quote}" for what, quote in v] or None),
    "out_dtype": (CONVENTIONS, lambda v: f"out in {'the model dtype' if v is None else v}"),
    "lse_dtype": (CONVENTIONS, lambda v: f"LSE in {v}"),
    "fp8_q": (CONVENTIONS, lambda v: FP8_Q.get(v, f"fp8: q {v}")),
}
SPARSE = {
    **SHARED,
    "kv_formats": (RUNS, _all("KV formats")),
    "sink": (LIMITS, lambda v: None if v else "takes no attn_sink"),
    "topk_multiple": (LIMITS, lambda v: None if v == 1 else f"topk a multiple of {v}"),
    "head_padding": (LIMITS, lambda v: None if not v else
                     f"q heads padded to {one_of(v)}, so at most {max(v)} heads"),
    "max_draft_tokens": (LIMITS, _at_most("draft token")),
    "layouts": (LIMITS, lambda v: None if v is None else f"layouts: {one_of(v)}"),
    "kv_dequant": (CONVENTIONS, lambda v: DEQUANT.get(v, f"KV dequantised as {v}")),
    "extra_pairs": (RUNS, lambda v: "no extra cache" if not v else
                    "extra cache (main+extra) " + ", ".join(f"{main}+{extra}" for main, extra in v)),
    "extra_topk_multiple": (LIMITS, lambda v: None if v == 1 else f"extra_topk a multiple of {v}"),
    "length_formats": (RUNS, lambda v: "no per-row topk lengths" if not v else f"per-row topk lengths: {one_of(v)}"),
    "refusals": (QUOTED, lambda v: [f"{what}: {quote}" for what, quote in v] or None),
    "lse_includes_sink": (CONVENTIONS, lambda v: "LSE includes attn_sink (logaddexp)" if v else None),
    "has_lse": (LIMITS, lambda v: None if v else "returns no LSE: out alone is checked"),
    "tolerance": (CONVENTIONS, lambda v: None if v == "bf16" else f"judged under the {v} error model"),
}


def in_words(described: dict, words: dict) -> dict[str, list[str]]:
    """``{heading: [phrase, ...]}``, headings in ``HEADINGS`` order, for a ``describe()`` dict."""
    found = {h: [] for h in HEADINGS}
    for key, value in described.items():
        heading, phrase = words.get(key, (OTHER, None))
        try:
            said = phrase(value) if phrase else f"{key}: {json.dumps(value)}"
        except (TypeError, ValueError):   # a plug-in's value of an unexpected type: shown as it is
            heading, said = OTHER, f"{key}: {json.dumps(value, default=str)}"
        if said:
            found[heading].extend(said if isinstance(said, list) else [said])
    return {h: phrases for h, phrases in found.items() if phrases}
