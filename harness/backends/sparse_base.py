"""What a sparse MLA backend declares: its conventions as data (docs/sparse.md).

A backend with a sparse entry point has ``run_sparse(SparseInputs) -> (out, lse)``, out
``(n, s_q, heads, d_v)`` in bf16 and LSE ``(n, heads, s_q)`` float32 (the model's heads: a backend
that pads heads for its kernel, as SGLang does, slices them off again), and ``sparse_capabilities``.
"""

import math
from dataclasses import dataclass

from ..planning.cases import Case
from ..planning.record_formats import FORMATS


@dataclass(frozen=True)
class SparseCapabilities:
    kv_formats: tuple | None = ("v32",)   # None: every format of ``record_formats.FORMATS`` (read as data)
    kv_dequant: str = "exact"           # the oracle view its arithmetic starts from: "exact", "bf16_product"
    devices: tuple = ("cpu", "cuda")
    head_padding: tuple = ()            # the engine zero-pads q heads to the first of these that holds them
    topk_multiple: int = 1              # topk must be a multiple of this
    page_sizes: tuple | None = None
    sink: bool = True                   # takes attn_sink
    lse_base: str = "e"
    empty_row_lse: float = math.inf
    index_format: str = "token_slots"   # page * page_size + offset, -1 invalid
    max_draft_tokens: int = 8
    engine: str = "mla-verify"

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
            return (f"{case.heads} heads: the engine pads q heads to one of "
                    f"{', '.join(map(str, self.head_padding))}, and none holds them")
        if case.topk % self.topk_multiple:
            return f"topk {case.topk} is not a multiple of {self.topk_multiple}"
        if case.sink != "none" and not self.sink:
            return "takes no attn_sink"
        if case.mode == "verify" and case.draft_tokens > self.max_draft_tokens:
            return f"{case.draft_tokens} draft tokens; supports at most {self.max_draft_tokens}"
        return None

    def formats(self) -> tuple:
        """The record formats it reads."""
        return tuple(FORMATS) if self.kv_formats is None else self.kv_formats

    def describe(self) -> dict:
        """What ``mla-verify list`` prints: the inputs it takes, then its conventions."""
        return {"kv_formats": list(self.formats()), "devices": list(self.devices),
                "page_sizes": list(self.page_sizes) if self.page_sizes else None,
                "topk_multiple": self.topk_multiple, "max_draft_tokens": self.max_draft_tokens,
                **self.conventions()}

    def conventions(self) -> dict:
        return {"engine": self.engine, "index_format": self.index_format, "kv_dequant": self.kv_dequant,
                "lse_base": self.lse_base, "empty_row_lse": self.empty_row_lse,
                "head_padding": list(self.head_padding), "sink": self.sink}
