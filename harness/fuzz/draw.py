"""Drawing cases: each from its own generator, seeded by the campaign's seed and the case's index, so one
seed gives one sequence of cases, and case ``i`` is the same whatever came before it.

A drawn case is a ``Case`` as a suite file would give it, checked by ``case_checks``.  Where ``refused``
says the backend (or the machine) would not run it, the case is drawn again from its own generator, up to
``REDRAWS`` times; the last draw is kept then, and its row says why it did not run.
"""

import dataclasses
import math

import numpy as np

from ..planning.case import Case
from ..planning.case_checks import layout_scenarios, pages_needed, validate_case
from . import space
from .space import Bounds

DEFAULT_BOUNDS = Bounds()


def pick(rng: np.random.Generator, choices):
    """One value of ``choices`` ((value, weight) pairs), drawn by weight."""
    weights = np.array([w for _, w in choices], dtype=float)
    return choices[int(rng.choice(len(choices), p=weights / weights.sum()))][0]


def draw_case(seed: int, index: int, bounds: Bounds = DEFAULT_BOUNDS, dense: bool = True, sparse: bool = True,
              refused=None) -> Case:
    """Case ``index`` of the campaign seeded ``seed``: dense and/or sparse as the backend runs them;
    ``refused(case)`` is why it would not run, or None."""
    rng = np.random.default_rng([seed, index])
    for _ in range(space.REDRAWS):
        case = draw_one(rng, index, bounds, dense, sparse)
        if refused is None or refused(case) is None:
            break
    return case


def draw_one(rng: np.random.Generator, index: int, bounds: Bounds, dense: bool, sparse: bool) -> Case:
    is_sparse = sparse and (not dense or rng.random() < space.SPARSE_SHARE)
    fields = sparse_fields(rng, bounds) if is_sparse else dense_fields(rng)
    fields.update(mode_fields(rng, fields["scenario"]))
    fields["batch_size"] = int(rng.integers(1, bounds.max_batch + 1))
    fields["seqlen"] = draw_seqlen(rng, fields["batch_size"], fields["page_size"], bounds.max_context)
    group = f"{fields['scenario']}-{fields['mode']}-{fields['dtype']}"
    case = with_pages(rng, Case(id=f"fuzz/{group}/{index}", seed=int(rng.integers(0, 2 ** 31)), **fields))
    if case.kv_format == "v4":
        # drawn after the rest, so every other field is drawn as it was before V4's fields were
        case = dataclasses.replace(case, **v4_fields(rng, case, bounds))
    case = dataclasses.replace(case, **input_fields(rng, case.scenario))        # last, for the same reason
    return validate_case(case, f"fuzz case {index}")


def input_fields(rng: np.random.Generator, scenario: str) -> dict:
    """q's and the KV's values and the tensors' layout, each where the scenario builds what it shapes."""
    choices = {"q_values": space.VALUE_CHOICES, "kv_values": space.VALUE_CHOICES, "layout": space.LAYOUT_CHOICES}
    drawn = {key: pick(rng, options) for key, options in choices.items()}
    if scenario not in layout_scenarios(drawn["layout"]):      # split_q, drawn for a sparse case
        drawn["layout"] = "contiguous"
    return {key: value for key, value in drawn.items() if scenario in space.INPUT_SCENARIOS[key]}


def mode_fields(rng: np.random.Generator, scenario: str) -> dict:
    """Decode, or verify with 1-8 drafts (causal or not, lengths as the prefix or as the cache)."""
    if rng.random() >= space.VERIFY_SHARE:
        return {"mode": "decode", "draft_tokens": 1}
    fields = {"mode": "verify", "draft_tokens": pick(rng, space.DRAFTS)}
    if scenario != "sparse" and rng.random() < space.NON_CAUSAL_SHARE:
        fields["causal"] = False
    if rng.random() < space.CACHE_LENGTHS_SHARE:
        fields["seqlen_is_cache"] = True
    return fields


def dense_fields(rng: np.random.Generator) -> dict:
    dtype = pick(rng, space.DENSE_DTYPES)
    heads = pick(rng, space.DENSE_HEADS)
    kv_heads = pick(rng, space.KV_HEADS)
    d_qk, d_v = pick(rng, space.DENSE_DIMS)
    fields = {"scenario": pick(rng, space.DENSE_SCENARIOS), "dtype": dtype, "heads": heads,
              "kv_heads": kv_heads if heads % kv_heads == 0 else 1, "d_qk": d_qk, "d_v": d_v,
              "softmax_scale": pick(rng, space.DENSE_SCALES), "padding": pick(rng, space.PADDING_POLICIES),
              "extra_pages": pick(rng, space.EXTRA_PAGES), "page_size": 64}
    if dtype.startswith("fp8"):
        fields["k_scale"] = pick(rng, space.K_SCALES)
    return fields


def sparse_fields(rng: np.random.Generator, bounds: Bounds) -> dict:
    kv_format, d_qk, policies, scale = pick(rng, space.SPARSE_FORMATS)
    topks = [(k, w) for k, w in space.TOPKS if k <= max(bounds.max_context, space.TOPKS[0][0])]
    return {"scenario": "sparse", "dtype": "bf16", "heads": pick(rng, space.SPARSE_HEADS), "kv_heads": 1,
            "d_qk": d_qk, "d_v": 512, "softmax_scale": scale, "kv_format": kv_format,
            "kv_scales": policies[int(rng.integers(0, len(policies)))], "topk": pick(rng, topks),
            "sink": pick(rng, space.SINK_CHOICES), "index_pattern": pick(rng, space.INDEX_CHOICES),
            "verify_rows": pick(rng, space.VERIFY_ROW_CHOICES), "page_size": pick(rng, space.SPARSE_PAGE_SIZES),
            "extra_pages": pick(rng, space.EXTRA_PAGES)}


def v4_fields(rng: np.random.Generator, case: Case, bounds: Bounds) -> dict:
    """DeepSeek V4's per-row lengths and, on some cases, its extra cache: a width of at most the longest
    context (or 64), its own page size, entries per request by ratio or drawn within the bounds, its own index
    pattern and lengths."""
    fields = {"topk_length": pick(rng, space.LENGTH_CHOICES)}
    if rng.random() >= space.EXTRA_CACHE_SHARE:
        return fields
    widest = max(bounds.max_context, space.EXTRA_TOPK_MULTIPLE)
    if rng.random() < space.EXTRA_TOPK_ANY_SHARE:
        most = min(widest, space.EXTRA_TOPKS[-1][0]) // space.EXTRA_TOPK_MULTIPLE
        extra_topk = space.EXTRA_TOPK_MULTIPLE * int(rng.integers(1, most + 1))
    else:
        extra_topk = pick(rng, [(k, w) for k, w in space.EXTRA_TOPKS if k <= widest])
    page_size = pick(rng, space.EXTRA_PAGE_SIZES)
    extra_seqlen = pick(rng, space.EXTRA_SEQLENS)
    if extra_seqlen == "spec":
        extra_seqlen = draw_seqlen(rng, case.batch_size, page_size, bounds.max_context)
    return fields | {"extra_topk": extra_topk, "extra_page_size": page_size, "extra_seqlen": extra_seqlen,
                     "extra_index_pattern": pick(rng, space.INDEX_CHOICES),
                     "extra_topk_length": pick(rng, space.LENGTH_CHOICES)}


def longest_length(rng: np.random.Generator, max_context: int) -> int:
    """The longest request's length: log-uniform in [1, max_context], so most cases are short and quick."""
    drawn = math.exp(rng.uniform(0.0, math.log(max_context + 1)))
    return min(max(int(drawn), 1), max_context)


def draw_seqlen(rng: np.random.Generator, batch: int, page_size: int, max_context: int) -> str:
    """A length distribution (``seqlens``) whose longest length is at most ``max_context``."""
    top = longest_length(rng, max_context)
    kind = pick(rng, space.SEQLEN_KINDS)
    if kind == "boundary" and 2 * page_size + 1 > max_context:
        kind = "equal"
    if kind == "uniform":
        return f"uniform:{int(rng.integers(0, top + 1)) if rng.random() < 0.5 else 1}:{top}"
    if kind == "longtail":
        return f"longtail:{int(rng.integers(1, top + 1)) if rng.random() < 0.5 else 1}:{top}"
    if kind == "normal":
        std = int(rng.integers(0, top // 8 + 1))
        return f"normal:{top - 4 * std}:{std}"
    if kind == "list":
        lengths = [0 if rng.random() < space.EMPTY_ROW_SHARE else int(rng.integers(1, top + 1))
                   for _ in range(batch)]
        return "list:" + ",".join(map(str, lengths))
    return "boundary" if kind == "boundary" else f"equal:{top}"


def with_pages(rng: np.random.Generator, case: Case) -> Case:
    """A shared radix prefix and a spread pool, sometimes (the graph scenario builds its own pool)."""
    if case.scenario == "graph":
        return case
    fields = {}
    if rng.random() < space.SHARED_PREFIX_SHARE:
        fields["shared_prefix"] = pick(rng, space.SHARED_PREFIX_PAGES) * case.page_size
    if rng.random() < space.SPREAD_POOL_SHARE:
        prefix = fields.get("shared_prefix", 0) // case.page_size
        worst = 1 + prefix + case.batch_size * pages_needed(case)
        wraps = case.d_qk <= 16 and case.kv_heads == 1 and rng.random() < 0.5
        extra = int(rng.integers(0, space.SPREAD_EXTRA_PAGES // case.kv_heads + 1))
        fields["pool_pages"] = max(space.WRAPPING_POOL, worst) if wraps else worst + extra
    return dataclasses.replace(case, **fields) if fields else case
