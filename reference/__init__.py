"""mla-verify's oracles: slow, readable float64 PyTorch.

This package imports torch and nothing from ``harness``.
"""

from .attention import (
    descale_scalar,
    gather_tokens,
    key_set_attention_loop,
    mla_attention_batched,
    mla_attention_loop,
    visible_key_count,
)
from .batched import Problem, as_bits, joins_shared_blocks, mla_attention_many
from .fp8 import FP8_MAX, dequantize_fp8, is_fp8, quantize_fp8
from .keysets import KeySets
from .merge import merge_attention
from .non_absorbed import absorb_query, attention_non_absorbed, unabsorb_output

__all__ = [
    "FP8_MAX", "absorb_query", "as_bits", "attention_non_absorbed", "descale_scalar", "dequantize_fp8", "gather_tokens",
    "KeySets", "Problem", "is_fp8", "joins_shared_blocks", "key_set_attention_loop", "merge_attention",
    "mla_attention_batched", "mla_attention_loop", "mla_attention_many",
    "quantize_fp8", "unabsorb_output", "visible_key_count",
]
