"""What ``fuzz`` draws from: the values the shipped suites (``cases/*.toml``) give each case field, with
the weight each is drawn with, and the bounds that keep a drawn case quick on a CPU.

The suites test these values in chosen combinations; a campaign draws other combinations of the same
values.  A weight is a relative frequency: the common serving values are drawn most.
"""

from dataclasses import dataclass

from ..planning.case import (
    DEEPSEEK_SOFTMAX_SCALE,
    INDEX_PATTERNS,
    LENGTHS,
    PADDINGS,
    SINKS,
    VALUES,
    VERIFY_ROWS,
)
from ..planning.case_checks import LAYOUT_SCENARIOS, VALUES_SCENARIOS

# (value, weight) pairs
DENSE_DTYPES = (("bf16", 4), ("fp16", 2), ("fp8_e4m3", 3), ("fp8_e5m2", 1))
DENSE_HEADS = tuple((h, 1) for h in (1, 3, 4, 8, 9, 16, 32, 63, 64, 126, 128))   # decode, verify, upstream
KV_HEADS = ((1, 6), (2, 1), (3, 1), (8, 1))                                       # flashmla-upstream's h_kv
SPARSE_HEADS = ((16, 1), (64, 1), (128, 1))
# scenario: call most; graph where the backend has a graph session (a CUDA device), refused otherwise
DENSE_SCENARIOS = (("call", 8), ("padding", 1), ("determinism", 1), ("batch_invariance", 1), ("graph", 1))
SPARSE_SHARE = 0.25                                  # of drawn cases, on a backend with a sparse entry point
# (d_qk, d_v): DeepSeek's 576/512, and the 16/8 tokens selfcheck's spread pool uses to stay small
DENSE_DIMS = (((576, 512), 15), ((16, 8), 1))
DENSE_SCALES = ((DEEPSEEK_SOFTMAX_SCALE, 4), (576 ** -0.5, 1))               # FlagGems' fixed 1/sqrt(576)
K_SCALES = ((None, 6), (1.0, 1), (0.25, 1), (0.02, 1), (0.004, 1))           # fp8 only
PADDING_POLICIES = tuple((p, 4 if p == "minus_one" else 1) for p in PADDINGS)
EXTRA_PAGES = ((4, 4), (0, 1), (1, 1), (16, 1))
SPREAD_POOL_SHARE = 1 / 8                            # pool_pages > 0: live pages spread over a larger pool
SPREAD_EXTRA_PAGES = 1024                            # at most this many pages past what the draw needs
WRAPPING_POOL = 65600                                # selfcheck's: page ids past 65,535 (16-wide tokens only)
SHARED_PREFIX_SHARE = 1 / 8
SHARED_PREFIX_PAGES = ((1, 2), (2, 1), (4, 1))
NON_CAUSAL_SHARE = 1 / 8                             # verify: flashmla-upstream runs causal false too
CACHE_LENGTHS_SHARE = 1 / 8                          # verify: lengths drawn as cache_seqlens (upstream)
VERIFY_SHARE = 0.5
DRAFTS = tuple((d, 1) for d in range(1, 9))

# sparse: flashmla-sparse-upstream's page sizes and topk, sparse.toml's defaults weighted up
SPARSE_PAGE_SIZES = ((64, 6), (2, 1), (53, 1), (61, 1), (69, 1), (256, 1), (576, 1))
TOPKS = ((64, 2), (128, 2), (256, 1), (512, 1), (576, 1), (2048, 1))
# (kv_format, d_qk, scale policies, softmax scale): V3.2 at DeepSeek's scale or upstream's, V4 at upstream's
SPARSE_FORMATS = ((("v32", 576, ("amax", "ue8m0"), DEEPSEEK_SOFTMAX_SCALE), 3),
                  (("v32", 576, ("amax", "ue8m0"), 0.030322683585054203), 1),
                  (("v4", 512, ("ue8m0",), 0.032352028870043036), 2))
SINK_CHOICES = tuple((s, 2 if s == "none" else 1) for s in SINKS)
INDEX_CHOICES = tuple((p, 3 if p == "random" else 1) for p in INDEX_PATTERNS)
VERIFY_ROW_CHOICES = tuple((v, 1) for v in VERIFY_ROWS)

# DeepSeek V4 (kv_format v4) only: V3.2 takes neither on FlashMLA ("V3.2 does not support extra KV cache",
# "... dynamic topk length"), so a v32 case with them would only be unsupported.  Per-row lengths on every V4
# case; on some, the compressed extra cache of sparse-v4.toml (C4: top-512 at ratio 4, C128: every entry at
# ratio 128, vLLM's extra pages 64 and 2) and FlashMLA's tests' (any width, independent entries per request)
LENGTH_CHOICES = tuple((n, 2 if n in ("none", "listed") else 1) for n in LENGTHS)
EXTRA_CACHE_SHARE = 0.5                              # of V4 cases
# widths: FlashMLA takes multiples of 64 (extra_topk_multiple); now and then any multiple of 64 up to 1024
EXTRA_TOPKS = ((64, 2), (128, 2), (512, 2), (1024, 1))
EXTRA_TOPK_ANY_SHARE = 1 / 6
EXTRA_TOPK_MULTIPLE = 64
EXTRA_PAGE_SIZES = ((64, 4), (2, 3), (53, 1), (61, 1), (69, 1), (256, 1), (576, 1))
# entries per request: the tokens seen, 4 or 128 to one (V4's C4 and C128), or a spec of its own, drawn as
# the main seqlen is and within the same bounds ("spec")
EXTRA_SEQLENS = (("ratio:4", 2), ("ratio:128", 1), ("spec", 2))

# seqlen distributions (harness/planning/seqlens.py), by weight
SEQLEN_KINDS = (("uniform", 3), ("longtail", 2), ("equal", 2), ("boundary", 1), ("normal", 1), ("list", 2))
EMPTY_ROW_SHARE = 0.15                               # a list's entry is 0 (a request with no keys)

MAX_BATCH = 8
MAX_CONTEXT = 2048
REDRAWS = 16        # draws of one case before one the backend refuses is kept (its row says why)


@dataclass(frozen=True)
class Bounds:
    """How large a drawn case may be: requests per case and the longest request's keys."""
    max_batch: int = MAX_BATCH
    max_context: int = MAX_CONTEXT

# inputs as models and engines hand them (cases/values.toml, cases/layouts.toml), q and KV drawn apart: normal
# values and whole tensors most, each other distribution and layout now and then; in the scenarios that build
# the inputs they shape (``case_checks``)
VALUE_CHOICES = tuple((v, 12 if v == "normal" else 1) for v in VALUES)
# split_q takes its share from contiguous's, so strided and offset keep the draws they had before it
LAYOUT_CHOICES = (("contiguous", 9), ("split_q", 1), ("strided", 1), ("offset", 1))
INPUT_SCENARIOS = {"q_values": VALUES_SCENARIOS, "kv_values": VALUES_SCENARIOS, "layout": LAYOUT_SCENARIOS}
