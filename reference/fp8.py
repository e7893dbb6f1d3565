"""fp8 quantisation semantics as the serving engine applies them.

SGLang stores the KV cache as ``float8_e4m3fn`` with one per-tensor scale
(``layer.k_scale``) and quantises q with that same scale before calling FlashMLA
(``scaled_fp8_quant(q, k_scale)``).  Quantisation divides by the scale, saturates
to the format's largest finite value and rounds to nearest, ties to even.
"""

import torch

FP8_MAX = {
    torch.float8_e4m3fn: 448.0,
    torch.float8_e5m2: 57344.0,
}


def quantize_fp8(x: torch.Tensor, scale: float, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """Return ``saturate(x / scale)`` rounded to nearest-even in ``dtype``.

    torch's cast already rounds to nearest-even, but it does not saturate (a value
    past the largest finite one becomes NaN for e4m3fn), so we clamp first.
    NaN inputs stay NaN, which is what the poisoning of padded slots relies on.
    """
    if dtype not in FP8_MAX:
        raise ValueError(f"not an fp8 dtype: {dtype}")
    if not scale > 0:
        raise ValueError(f"fp8 scale must be positive, got {scale}")
    limit = FP8_MAX[dtype]
    scaled = x.to(torch.float32) / scale
    return scaled.clamp(-limit, limit).to(dtype)


def dequantize_fp8(x: torch.Tensor, descale: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The value a kernel reads from an fp8 tensor: ``x * descale`` in ``dtype``."""
    return x.to(dtype) * descale


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_MAX
