"""What a backend declares it supports, as data the harness reads (``Backend.capabilities``): the dense
interface's limits and conventions (``Capabilities``) and, for a backend with a sparse entry point, the
sparse section (``Capabilities.sparse``, a ``SparseSupport``).  A case outside them is ``unsupported``, with
the reason they give.
"""

import math
from dataclasses import dataclass, fields

from ..planning.case import WHOLE_Q_LAYOUTS
from ..planning.cases import DTYPES, MODES, Case
from ..planning.fixed_params import fixed_scale
from ..planning.record_formats import FORMATS


@dataclass(frozen=True)
class SparseSupport:
    """The sparse section of a backend's capabilities (``Capabilities.sparse``): what its ``run_sparse``
    takes and its conventions, as data (docs/sparse.md).  ``run_sparse(SparseInputs) -> (out, lse)``: out
    ``(n, s_q, heads, d_v)`` bf16 and LSE ``(n, heads, s_q)`` float32, the model's heads (a backend that pads
    heads for its kernel, as SGLang does, slices them off again)."""

    kv_formats: tuple | None = ("v32",)   # None: every format of ``record_formats.FORMATS`` (read as data)
    kv_dequant: str = "exact"           # the oracle view its arithmetic starts from: "exact", "bf16_product", "e4m3"
    # the error model its rows are judged under (``tolerances.TOLERANCES``): bf16 arithmetic, or
    # "fp8_e4m3" for one that reads q and KV as e4m3 and rounds P to e4m3 before P.V
    tolerance: str = "bf16"
    devices: tuple = ("cpu", "cuda")
    head_padding: tuple = ()            # the engine zero-pads q heads to the first of these that holds them
    topk_multiple: int = 1              # topk must be a multiple of this
    page_sizes: tuple | None = None
    sink: bool = True                   # takes attn_sink
    lse_base: str = "e"
    empty_row_lse: float = math.inf
    # True: the LSE it returns counts attn_sink in its denominator, logaddexp(LSE, sink), the empty row's
    # LSE (``empty_row_lse``) included; False: the LSE of the keys alone
    lse_includes_sink: bool = False
    has_lse: bool = True                # False: run_sparse returns no LSE (out alone is checked, and so recorded)
    index_format: str = "token_slots"   # page * page_size + offset, -1 invalid
    max_draft_tokens: int = 8
    layouts: tuple | None = None        # the ``layout``s it takes (None: every one a sparse case can have)
    engine: str = "mla-verify"
    # DeepSeek V4's second cache in the same call (docs/sparse.md): the (main, extra) format pairs it reads
    # together (None: every pair of known formats), a multiple the extra width must be, and the main formats
    # with which it takes per-row lengths (topk_length, extra_topk_length; None: every format).  ``refusals``:
    # the kernel's own words for a limit, quoted in the reason: ((what, quote), ...), what one of
    # "topk", "extra_topk" (the multiples), "layout", "extra_cache", "topk_length"
    extra_pairs: tuple | None = ()
    extra_topk_multiple: int = 1
    length_formats: tuple | None = ()
    refusals: tuple = ()

    def formats(self) -> tuple:
        """The record formats it reads."""
        return tuple(FORMATS) if self.kv_formats is None else self.kv_formats

    def padded_heads(self, heads: int) -> int | None:
        """The head count the kernel is called with (None: no padding takes these heads)."""
        if not self.head_padding:
            return heads
        return next((h for h in self.head_padding if h >= heads), None)

    def reason_unsupported(self, case: Case, device: str) -> str | None:
        if device not in self.devices:
            return f"device {device} not supported (supports {', '.join(self.devices)})"
        if case.kv_format not in self.formats():
            return f"kv_format {case.kv_format} not supported (reads {', '.join(self.formats())})"
        if self.page_sizes is not None and case.page_size not in self.page_sizes:
            return f"page_size {case.page_size} not supported (supports {', '.join(map(str, self.page_sizes))})"
        if self.padded_heads(case.heads) is None:
            return self._quoted("heads", f"{case.heads} heads: the engine pads q heads to one of "
                                         f"{', '.join(map(str, self.head_padding))}, and none holds them")
        if case.topk % self.topk_multiple:
            return self._quoted("topk", f"topk {case.topk} is not a multiple of {self.topk_multiple}")
        if case.sink != "none" and not self.sink:
            return "takes no attn_sink"
        if case.mode == "verify" and case.draft_tokens > self.max_draft_tokens:
            return f"{case.draft_tokens} draft tokens; supports at most {self.max_draft_tokens}"
        if self.layouts is not None and case.layout not in self.layouts:
            return self._quoted("layout", f"layout {case.layout} not supported (takes {', '.join(self.layouts)})")
        return self._second_cache_reason(case)

    def _second_cache_reason(self, case: Case) -> str | None:
        """Why the case's extra cache or lengths are refused, quoting the kernel where it says."""
        quote = dict(self.refusals)
        if case.extra_topk:
            pair = [case.kv_format, case.extra_kv_format or case.kv_format]
            if pair not in self.pairs():
                said = quote.get("extra_cache", "takes no extra cache")
                return f"a {pair[1]} extra cache beside a {pair[0]} main cache: {said}"
            if case.extra_topk % self.extra_topk_multiple:
                return self._quoted("extra_topk", f"extra_topk {case.extra_topk} is not a multiple of "
                                                  f"{self.extra_topk_multiple}")
        if "none" != case.topk_length or "none" != case.extra_topk_length:
            if self.length_formats is not None and case.kv_format not in self.length_formats:
                said = quote.get("topk_length", "takes no per-row topk_length")
                return f"per-row lengths with a {case.kv_format} cache: {said}"
        return None

    def _quoted(self, what: str, text: str) -> str:
        """``text``, then the kernel's own words for that limit where ``refusals`` holds them."""
        said = dict(self.refusals).get(what)
        return f"{text}: {said}" if said else text

    def pairs(self) -> list:
        """The (main, extra) format pairs it reads in one call."""
        if self.extra_pairs is not None:
            return [list(p) for p in self.extra_pairs]
        return [[main, extra] for main in FORMATS for extra in FORMATS
                if FORMATS[main].d_qk == FORMATS[extra].d_qk]          # one softmax: keys of one width

    def describe(self) -> dict:
        """What ``mla-verify list`` prints: the inputs it takes, then its conventions."""
        return {"kv_formats": list(self.formats()), "devices": list(self.devices),
                "page_sizes": list(self.page_sizes) if self.page_sizes else None,
                "topk_multiple": self.topk_multiple, "max_draft_tokens": self.max_draft_tokens,
                "layouts": list(self.layouts) if self.layouts is not None else None,
                "extra_pairs": self.pairs(), "extra_topk_multiple": self.extra_topk_multiple,
                "length_formats": list(self.length_formats if self.length_formats is not None else FORMATS),
                "refusals": [list(r) for r in self.refusals],
                **self.conventions()}

    def conventions(self) -> dict:
        """What a sparse row records (``sparse_conventions``)."""
        # a convention at its default is left out, so the rows of backends that keep it keep their keys
        unusual = {k: v for k, v in (("lse_includes_sink", self.lse_includes_sink), ("has_lse", self.has_lse),
                                     ("tolerance", self.tolerance)) if v != SPARSE_DEFAULTS[k]}
        return {"engine": self.engine, "index_format": self.index_format, "kv_dequant": self.kv_dequant,
                "lse_base": self.lse_base, "empty_row_lse": self.empty_row_lse,
                "head_padding": list(self.head_padding), "sink": self.sink, **unusual}


SPARSE_DEFAULTS = {f.name: f.default for f in fields(SparseSupport)}
# split_q refused where a kernel's own signature is not quoted (``quoted_limits``' "layout")
WHOLE_Q = "its API takes q as one tensor, so q's nope and rope cannot come from buffers of their own"


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports.  ``None`` means any value.  ``sparse``: its sparse entry point's section
    (``SparseSupport``), None without one."""

    modes: tuple = MODES
    dtypes: tuple = DTYPES
    devices: tuple = ("cpu", "cuda")
    page_sizes: tuple | None = None
    heads: tuple | None = None
    kv_heads: tuple | None = None
    d_qk: tuple | None = None
    d_v: tuple | None = None
    max_draft_tokens: int = 8
    non_causal: bool = True
    layouts: tuple = WHOLE_Q_LAYOUTS    # planning.case.LAYOUTS it takes: split_q only where its API takes q apart
    lse_base: str = "e"                 # "e" or "2"; the harness converts base-2 LSE before comparing
    empty_row_lse: float = math.inf     # what the backend's LSE holds for a row with no visible key
    has_lse: bool = True                # False: the kernel returns no LSE (run() returns None for it)
    # Conventions: data the harness reads, never special cases in it.
    out_dtype: str | None = None        # None: the model dtype (bf16 for fp8 cases); else "bf16", "float32", ...
    lse_dtype: str = "float32"          # every engine keeps LSE in float32
    index_format: str = "page_table"    # "page_table", "csr_pages" or "token_slots": what the kernel indexes by
    fp8_q: str = "quantized_k_scale"    # fp8 cases: q given "quantized_k_scale" (SGLang's FlashMLA path),
                                        # "model_dtype" (bf16 q, FlashInfer) or "cast_in_kernel" (SGLang Triton)
    engine: str = "mla-verify"          # whose calling convention this reproduces, e.g. "sglang:flashmla"
    # A parameter the kernel takes no argument for: every case runs at the kernel's value and the oracle
    # computes at it (conventions.py); None: the case's.  A number, or a rule's name ("1/sqrt(d_qk)").
    fixed_softmax_scale: float | str | None = None
    # The kernel's own words for a limit above, quoted in its unsupported reason: ((what, quote), ...) with
    # what one of mode, dtype, device, page_size, heads, kv_heads, d_qk, d_v, s_q, non_causal, layout.
    quoted_limits: tuple = ()
    sparse: SparseSupport | None = None

    def __post_init__(self):
        fixed_scale(self.fixed_softmax_scale, 576)       # an unknown rule or a bad number fails at once

    def reason_unsupported(self, case: Case, device: str) -> str | None:
        reason = self._limit_reached(case, device)
        if reason is None:
            return None
        what, text = reason
        quote = dict(self.quoted_limits).get(what) or (WHOLE_Q if what == "layout" and case.layout == "split_q"
                                                       else None)
        return f"{text}: {quote}" if quote else text

    def _limit_reached(self, case: Case, device: str) -> tuple[str, str] | None:
        checks = [
            ("mode", case.mode, self.modes), ("dtype", case.dtype, self.dtypes),
            ("device", device, self.devices), ("page_size", case.page_size, self.page_sizes),
            ("heads", case.heads, self.heads), ("kv_heads", case.kv_heads, self.kv_heads),
            ("d_qk", case.d_qk, self.d_qk), ("d_v", case.d_v, self.d_v),
        ]
        for what, value, allowed in checks:
            if allowed is not None and value not in allowed:
                return what, f"{what} {value} not supported (supports {', '.join(map(str, allowed))})"
        if case.s_q > self.max_draft_tokens:
            return "s_q", f"{case.s_q} query tokens per request; supports at most {self.max_draft_tokens}"
        if not case.causal and not self.non_causal:
            return "non_causal", "non-causal attention not supported"
        if case.layout not in self.layouts:
            return "layout", f"layout {case.layout} not supported (takes {', '.join(self.layouts)})"
        return None

    def conventions(self) -> dict:
        """The conventions a row records: how the kernel was called and what its outputs mean (a fixed
        parameter only where the kernel has one, so other backends' rows keep their keys)."""
        fixed = {} if self.fixed_softmax_scale is None else {"fixed_softmax_scale": self.fixed_softmax_scale}
        return {"engine": self.engine, "index_format": self.index_format, "fp8_q": self.fp8_q,
                "lse_base": self.lse_base, "empty_row_lse": self.empty_row_lse, "has_lse": self.has_lse,
                "out_dtype": self.out_dtype, "lse_dtype": self.lse_dtype, **fixed}

    def describe(self) -> dict:
        """The dense interface's declarations (``list``'s "supports"); the sparse section's are its own."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if k != "sparse"}
