"""How the Triton kernels come to be used.  Each is defined on first use (``defined_with_triton``: importing
its module never imports Triton; ``harness/judging/block_hash.py``, and beside this module
``compare_kernel.py``, ``sparse_softmax_kernel.py``, ``widen_kernel.py``, ``sparse_keys_kernel.py`` and
``sparse_write_kernel.py``).  For every one but the first, the definition and the first launch in a process
are a probe (``usable``): where this Triton cannot define or build the kernel, one warning line and the
caller's PyTorch form, so a Triton the kernel was not tried with costs speed, never a verdict."""

import functools
import struct
import sys


def defined_with_triton(define):
    """``define(triton, tl)``'s kernel, made on the first call and kept; None where Triton does not import
    or does not load here."""
    @functools.cache
    def kernel():
        try:
            import triton
            import triton.language as tl
        except Exception:        # no Triton, or one that does not load here
            return None
        return define(triton, tl)
    return kernel


def usable(what: str, device: str, fallback: str, kernel_of, first_launch):
    """``kernel_of()`` once ``first_launch(kernel)`` has run on ``device``; None where Triton does not import,
    and None with one warning line (naming ``what``, the error's first line and ``fallback``, what runs
    instead) where the definition or the launch fails."""
    built = {}
    try:
        kernel = built["kernel"] = kernel_of()
        if kernel is not None:
            first_launch(kernel)
    except Exception as error:      # a compiler error, of whatever class this Triton raises
        line = (str(error).strip().splitlines() or [""])[0][:200]
        print(f"mla-verify: warning: {what} does not build on {device} ({type(error).__name__}: {line}); "
              f"{fallback}", file=sys.stderr)
        return None
    return built["kernel"]


def float64_bits(x: float) -> int:
    """A float64's bits as an int64, for a kernel to bitcast back: Triton passes a Python float as float32,
    which would round it."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]
