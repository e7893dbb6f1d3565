"""A case: one test as data (a shape, a dtype, a length distribution and a seed), and the vocabulary
its fields take.  ``case_checks`` refuses impossible ones; ``cases`` loads them from suite files."""

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import seqlens

DTYPES = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
MODES = ("decode", "verify")
PADDINGS = ("minus_one", "one", "zero", "huge", "stale")
SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


@lru_cache(maxsize=1)      # asked once per case; the files do not change during a run
def scenario_names() -> tuple[str, ...]:
    """The scenarios that exist: one module each in harness/scenarios (the files are the registry)."""
    return tuple(sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.stem.startswith("_")))


DEEPSEEK_SOFTMAX_SCALE = 192 ** -0.5   # 1/sqrt(qk_nope 128 + qk_rope 64)


@dataclass(frozen=True)
class Case:
    """One test: a shape, a dtype, a length distribution and a seed."""

    id: str
    seed: int
    mode: str = "decode"
    batch_size: int = 4
    heads: int = 16
    kv_heads: int = 1
    draft_tokens: int = 1
    dtype: str = "bf16"
    seqlen: str = "uniform:1:512"
    seqlen_is_cache: bool = False      # the draw is the kernel's cache_seqlens (FlashMLA's tests), not the prefix
    page_size: int = 64
    padding: str = "minus_one"
    causal: bool = True
    d_qk: int = 576
    d_v: int = 512
    softmax_scale: float = DEEPSEEK_SOFTMAX_SCALE
    k_scale: float | None = None       # fp8 only; None: amax(KV) / fp8 max
    extra_pages: int = 4               # unused, poisoned pages in the pool
    pool_pages: int = 0                # > 0: the pool's total pages, live ones spread over the whole range
    shared_prefix: int = 0             # tokens (whole pages) of one prefix every request shares, as a radix cache
    scenario: str = "call"
    # sparse MLA (scenario "sparse", docs/sparse.md); left at their defaults they are no part of a
    # case's definition (``to_dict``), so dense cases keep their hashes
    topk: int = 0                      # index entries per query token (SGLang's index_topk)
    kv_format: str = "v32"             # the cache record: record_formats.FORMATS
    kv_scales: str = "amax"            # the writer's scale policy: "amax" (SGLang) or "ue8m0" (FlashMLA's tests)
    sink: str = "none"                 # attn_sink per head: "none", "random", "inf" (random with +-inf heads)
    index_pattern: str = "random"      # which positions the top-k lists: INDEX_PATTERNS
    verify_rows: str = "flattened"     # verify's query rows: "flattened" (SGLang: a row per draft, s_q 1) or
    #                                    "per_request" (vLLM: a row per request, s_q = drafts)
    topk_length: str = "none"          # the kernel's per-row topk_length: LENGTHS ("none": no tensor)
    # DeepSeek V4's second ("extra") cache, read in the same call and the same softmax (docs/sparse.md): the
    # compressed cache beside the sliding-window main one; extra_topk 0 means none
    extra_topk: int = 0                # extra index entries per query token
    extra_page_size: int = 64          # its own page size (FlashMLA reads extra_k_cache.shape[1])
    extra_seqlen: str = ""             # entries per request: a seqlen spec, or "ratio:N" (tokens seen // N)
    extra_index_pattern: str = "random"
    extra_topk_length: str = "none"
    extra_kv_format: str = ""          # "": the main cache's format
    # the inputs as models and engines hand them (dense and sparse alike): value distributions of q and of the
    # KV (VALUES, ``building.values``) and how the tensors lie in memory (LAYOUTS, ``building.layouts``); left
    # at their defaults they too are no part of a case's definition
    q_values: str = "normal"
    kv_values: str = "normal"
    layout: str = "contiguous"
    tags: tuple = field(default=())
    suite_file: str = ""               # the suite's .toml path when it was given as one (reruns use it)

    @property
    def suite(self) -> str:
        return self.id.split("/")[0]

    @property
    def group(self) -> str:
        return self.id.split("/")[1]

    @property
    def s_q(self) -> int:
        """Query tokens per request: 1 for decode, the draft tokens for verify."""
        return self.draft_tokens if self.mode == "verify" else 1

    def max_cache_seqlen(self) -> int:
        return seqlens.max_length(self.seqlen, self.page_size) + self.s_q - (self.mode == "decode")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tags"] = list(self.tags)
        for key in SPARSE_FIELDS + EXTRA_FIELDS + INPUT_FIELDS:     # at their defaults: as before they existed
            if d[key] == CASE_DEFAULTS[key]:
                del d[key]
        return d


SPARSE_FIELDS = ("topk", "kv_format", "kv_scales", "sink", "index_pattern", "verify_rows", "topk_length")
EXTRA_FIELDS = ("extra_topk", "extra_page_size", "extra_seqlen", "extra_index_pattern", "extra_topk_length",
                "extra_kv_format")
INPUT_FIELDS = ("q_values", "kv_values", "layout")
CASE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Case)}
SINKS = ("none", "random", "inf")
# which context positions a query token's top-k lists (harness/building/sparse_inputs.py draws them): a random
# subset, the most recent ones, a random subset with -1 holes inside, one with repeated positions, none,
# random with the last third of the batch's requests all -1 (CUDA-graph / DP padding rows), and a random
# subset drawn for every row at once on the device, as FlashMLA's tests draw theirs ("batched")
INDEX_PATTERNS = ("random", "window", "holes", "repeat", "invalid", "padded", "batched")
VERIFY_ROWS = ("flattened", "per_request")
# a scope's per-row length (FlashMLA's topk_length / extra_topk_length, (b,) int32: a position at or past it
# is invalid whatever its index says): no tensor; FlashMLA's tests' randint(0, width + 1); the end of the
# row's listed entries (vLLM: min(pos + 1, window)); that clamped to at least 1 (SGLang's C128 length,
# max(seq_len // 128, 1), whose empty set is length 1 over a -1 entry)
LENGTHS = ("none", "random", "listed", "listed_min1")
# a tensor's values (``building.values`` draws each): "normal" N(0, 1) draws; "latent" per-channel RMSNorm-like
# gains with outlier channels; "large" scores near float32's exp limit; "peaked" one key per row dominates;
# "flat" every row of a request the same; "zero_tiles" some 128-value tiles exactly zero; "tiny" values in
# bf16's and e4m3's subnormal ranges; "signed_zero" zeros of both signs mixed in
VALUES = ("normal", "latent", "large", "peaked", "flat", "zero_tiles", "tiny", "signed_zero")
# how the tensors a kernel reads lie in memory (``building.layouts``): whole allocations, views into larger
# buffers (every dim one larger, the last 128 larger), views at a non-zero storage offset, or q's nope and
# rope parts in buffers of their own, as DeepSeek's attention hands them to a kernel that takes them apart
LAYOUTS = ("contiguous", "strided", "offset", "split_q")
WHOLE_Q_LAYOUTS = ("contiguous", "strided", "offset")      # those a kernel taking q as one tensor can be given
