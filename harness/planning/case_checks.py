"""Refuse impossible cases with one line naming the place and the field (``validate_case``)."""

import math

from ..errors import InputError
from . import seqlens
from .case import (
    CASE_DEFAULTS,
    DTYPES,
    EXTRA_FIELDS,
    INDEX_PATTERNS,
    LAYOUTS,
    LENGTHS,
    MODES,
    PADDINGS,
    SINKS,
    SPARSE_FIELDS,
    VALUES,
    VERIFY_ROWS,
    Case,
    scenario_names,
)
from .pages import pages_for
from .record_formats import FORMATS

# Upper bounds that keep a typo from allocating the machine away (real models sit far below).
LIMITS = {"batch_size": 4096, "heads": 1024, "kv_heads": 1024, "draft_tokens": 1 << 10, "page_size": 1024,
          "d_qk": 4096, "d_v": 4096, "extra_pages": 1 << 16, "seqlen": 1 << 20,
          "pool_pages": 1 << 22, "topk": 1 << 16}


def validate_case(case: Case, where: str) -> Case:
    """Refuse impossible cases with one line naming the place and the field."""
    def bad(key, msg):
        raise InputError(f"{where}: {key}: {msg}")

    _one_of(case, bad, "mode", MODES, "mode")
    _one_of(case, bad, "dtype", DTYPES, "dtype")
    _one_of(case, bad, "padding", PADDINGS, "padding policy")
    _one_of(case, bad, "scenario", scenario_names(), "scenario")
    for key in ("batch_size", "heads", "kv_heads", "draft_tokens", "page_size", "d_qk", "d_v"):
        if getattr(case, key) < 1:
            bad(key, f"must be at least 1, got {getattr(case, key)}")
        if getattr(case, key) > LIMITS[key]:
            bad(key, f"{getattr(case, key)} is beyond the largest supported value {LIMITS[key]}")
    if case.extra_pages < 0:
        bad("extra_pages", f"must be at least 0, got {case.extra_pages}")
    if case.heads % case.kv_heads:
        bad("heads", f"{case.heads} query heads are not divisible by {case.kv_heads} kv heads")
    if case.d_v > case.d_qk:
        bad("d_v", f"d_v {case.d_v} is larger than d_qk {case.d_qk}")
    if case.mode == "verify" and not 1 <= case.draft_tokens <= 8:
        bad("draft_tokens", f"verify takes 1 to 8 draft tokens, got {case.draft_tokens}")
    if case.mode == "decode" and case.draft_tokens != 1:
        bad("draft_tokens", "decode has exactly one query token; use mode = \"verify\"")
    if not (math.isfinite(case.softmax_scale) and case.softmax_scale > 0):
        bad("softmax_scale", f"must be positive and finite, got {case.softmax_scale}")
    if case.k_scale is not None and not (math.isfinite(case.k_scale) and case.k_scale > 0):
        bad("k_scale", f"must be positive and finite, got {case.k_scale}")
    if case.extra_pages > LIMITS["extra_pages"]:
        bad("extra_pages", f"{case.extra_pages} is beyond the largest supported value {LIMITS['extra_pages']}")
    try:
        longest = seqlens.max_length(case.seqlen, case.page_size)
    except InputError as e:
        bad("seqlen", str(e))
    if longest > LIMITS["seqlen"]:
        bad("seqlen", f"lengths up to {longest} are beyond the largest supported {LIMITS['seqlen']}")
    _validate_scale_fields(case, bad)
    _validate_sparse_fields(case, bad)
    _validate_input_fields(case, bad)
    return case


def _one_of(case: Case, bad, key: str, known, what: str):
    """``bad`` unless the case's ``key`` is one of ``known`` (``what`` names it in the line)."""
    if getattr(case, key) not in known:
        bad(key, f"unknown {what} '{getattr(case, key)}' (known: {', '.join(known)})")


def _validate_sparse_fields(case: Case, bad):
    """The sparse fields: set only for the sparse scenario, which needs a topk."""
    sparse = case.scenario == "sparse"
    if not sparse:
        for key in SPARSE_FIELDS + EXTRA_FIELDS:
            if getattr(case, key) != CASE_DEFAULTS[key]:
                bad(key, f"applies to the sparse scenario only (this case's scenario is '{case.scenario}')")
        return
    if not 1 <= case.topk <= LIMITS["topk"]:
        bad("topk", f"the sparse scenario needs 1 to {LIMITS['topk']} index entries, got {case.topk}")
    _one_of(case, bad, "kv_format", FORMATS, "record format")
    fmt = FORMATS[case.kv_format]
    if case.kv_scales not in fmt.policies:
        bad("kv_scales", f"format {fmt.name} takes {', '.join(fmt.policies)}, not '{case.kv_scales}'")
    _one_of(case, bad, "sink", SINKS, "sink")
    _one_of(case, bad, "index_pattern", INDEX_PATTERNS, "index pattern")
    _one_of(case, bad, "verify_rows", VERIFY_ROWS, "verify rows")
    if case.d_qk != fmt.d_qk or case.d_v != 512 or case.kv_heads != 1:
        bad("d_qk", f"format {fmt.name} holds d_qk {fmt.d_qk} with d_v 512 and one kv head, got d_qk "
                    f"{case.d_qk}, d_v {case.d_v}, kv_heads {case.kv_heads}")
    if case.dtype != "bf16":
        bad("dtype", f"sparse MLA takes bf16 q (the cache format sets the KV), got {case.dtype}")
    _one_of(case, bad, "topk_length", LENGTHS, "length")
    _validate_extra_cache(case, bad)


def _validate_extra_cache(case: Case, bad):
    """DeepSeek V4's extra cache: its fields only with one (``extra_topk`` > 0), a format whose keys are as
    wide as the main cache's (one softmax over both), a page size and an entries spec."""
    if not case.extra_topk:
        for key in EXTRA_FIELDS[1:]:
            if getattr(case, key) != CASE_DEFAULTS[key]:
                bad(key, "applies to an extra cache only, and this case has none (extra_topk is 0)")
        return
    if not 0 < case.extra_topk <= LIMITS["topk"]:
        bad("extra_topk", f"must be 0 (no extra cache) to {LIMITS['topk']}, got {case.extra_topk}")
    if not 1 <= case.extra_page_size <= LIMITS["page_size"]:
        bad("extra_page_size", f"must be 1 to {LIMITS['page_size']}, got {case.extra_page_size}")
    extra = case.extra_kv_format or case.kv_format
    if extra not in FORMATS:
        bad("extra_kv_format", f"unknown record format '{extra}' (known: {', '.join(FORMATS)})")
    if FORMATS[extra].d_qk != FORMATS[case.kv_format].d_qk:
        bad("extra_kv_format", f"{extra} holds d_qk {FORMATS[extra].d_qk}, the main cache's {case.kv_format} "
                               f"{FORMATS[case.kv_format].d_qk}: one softmax needs keys of one width")
    if case.kv_scales not in FORMATS[extra].policies:
        bad("kv_scales", f"the extra cache's format {extra} takes {', '.join(FORMATS[extra].policies)}, "
                         f"not '{case.kv_scales}'")
    _one_of(case, bad, "extra_index_pattern", INDEX_PATTERNS, "index pattern")
    _one_of(case, bad, "extra_topk_length", LENGTHS, "length")
    _validate_extra_seqlen(case, bad)


def _validate_extra_seqlen(case: Case, bad):
    """``ratio:N`` (N >= 1) or a seqlen spec, within the length limit."""
    name, _, value = case.extra_seqlen.partition(":")
    if name == "ratio":
        if not value.isdigit() or int(value) < 1:
            bad("extra_seqlen", f"'ratio:N' takes a whole N >= 1, got '{case.extra_seqlen}'")
        return
    try:
        longest = seqlens.max_length(case.extra_seqlen, case.extra_page_size)
    except InputError as e:
        bad("extra_seqlen", f"{e} (or 'ratio:N': the tokens seen, N to one)")
    if longest > LIMITS["seqlen"]:
        bad("extra_seqlen", f"lengths up to {longest} are beyond the largest supported {LIMITS['seqlen']}")


# The scenarios that build their inputs with ``inputs.generate`` or ``sparse_inputs.build``, where the values
# are drawn; and those that hand the kernel those very tensors (padding rewrites the pool through a flat view,
# graph builds its own buffers)
VALUES_SCENARIOS = ("call", "determinism", "batch_invariance", "padding", "sparse")
LAYOUT_SCENARIOS = ("call", "determinism", "batch_invariance", "sparse")
SPLIT_Q_SCENARIOS = ("call", "determinism", "batch_invariance")      # the sparse inputs take q whole


def layout_scenarios(layout: str) -> tuple:
    """The scenarios that hand the kernel ``layout``'s tensors."""
    return SPLIT_Q_SCENARIOS if layout == "split_q" else LAYOUT_SCENARIOS


def _validate_input_fields(case: Case, bad):
    """``q_values``, ``kv_values`` and ``layout``: known names, in scenarios that build the inputs they shape."""
    for key, known, scenarios in (("q_values", VALUES, VALUES_SCENARIOS), ("kv_values", VALUES, VALUES_SCENARIOS),
                                  ("layout", LAYOUTS, layout_scenarios(case.layout))):
        _one_of(case, bad, key, known, key.replace("_", " "))
        if getattr(case, key) != CASE_DEFAULTS[key] and case.scenario not in scenarios:
            bad(key, f"'{getattr(case, key)}' applies to the scenarios {', '.join(scenarios)} "
                     f"(this case's is '{case.scenario}')")


def _validate_scale_fields(case: Case, bad):
    """``pool_pages`` and ``shared_prefix``: the serving-scale pool layout."""
    if case.shared_prefix < 0 or case.shared_prefix % case.page_size:
        # a radix cache with paged KV matches whole pages only
        bad("shared_prefix", f"must be a non-negative multiple of page_size {case.page_size}, "
                             f"got {case.shared_prefix}")
    if case.shared_prefix > LIMITS["seqlen"]:
        bad("shared_prefix", f"{case.shared_prefix} is beyond the largest supported {LIMITS['seqlen']}")
    if case.pool_pages < 0 or case.pool_pages > LIMITS["pool_pages"]:
        bad("pool_pages", f"must be 0 (sized to fit) or up to {LIMITS['pool_pages']}, got {case.pool_pages}")
    if case.pool_pages:
        worst = 1 + case.shared_prefix // case.page_size + case.batch_size * pages_needed(case)
        if case.pool_pages < worst:
            bad("pool_pages", f"{case.pool_pages} pages cannot hold the worst draw: page 0, the shared prefix "
                              f"and {case.batch_size} requests of up to {case.max_cache_seqlen()} tokens "
                              f"need {worst}")
    if case.scenario == "graph" and (case.pool_pages or case.shared_prefix):
        bad("scenario", "the graph scenario builds its own pool: pool_pages and shared_prefix do not apply")


def pages_needed(case: Case) -> int:
    """Pages of the longest request the case can draw."""
    return pages_for(case.max_cache_seqlen(), case.page_size)
