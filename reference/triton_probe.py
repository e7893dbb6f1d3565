"""A Triton kernel's first launch in a process, as a probe: where this Triton cannot build the kernel, one
warning line and the caller's PyTorch form, so a Triton the kernel was not tried with costs speed, never
a verdict (``harness/judging/compare_kernel.py``, ``widen_kernel.py``, ``harness/building/sparse_keys_kernel.py``)."""

import sys


def launches(what: str, device: str, fallback: str, launch) -> bool:
    """Whether ``launch()`` (a first launch on ``device``) runs; on any error one warning line, naming
    ``what`` and the error's first line, says that ``fallback`` runs instead."""
    try:
        launch()
    except Exception as error:      # a compiler error, of whatever class this Triton raises
        line = (str(error).strip().splitlines() or [""])[0][:200]
        print(f"mla-verify: warning: {what} does not build on {device} ({type(error).__name__}: {line}); "
              f"{fallback}", file=sys.stderr)
        return False
    return True
