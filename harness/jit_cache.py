"""One cache root for what the kernels' JITs keep, outliving the run, so a second run on the same box
compiles nothing: ``--cache-dir``, else ``$MLA_VERIFY_CACHE``, else ``~/.cache/mla-verify``.

Each JIT reads its own variable, before it is imported, so the CLI points them all under the root before any
worker starts (workers inherit the environment).  A variable the user already set is left alone: their
folder wins.  Nothing here imports torch.
"""

import os
from pathlib import Path

ENV = "MLA_VERIFY_CACHE"
DEFAULT = Path.home() / ".cache" / "mla-verify"
# each JIT's own variable and its folder under the root: Triton's compiled kernels (SGLang's, FlagGems',
# ours), FlashInfer's nvcc builds (under $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer),
# torch.utils.cpp_extension's builds, and FlagGems' generated code and autotuning database
# (flag_gems/utils/code_cache.py reads FLAGGEMS_CACHE_DIR, else ~/.flaggems), and SGLang's tvm-ffi builds
# (sglang 0.5.23 kernels/jit/utils/compile/cache.py reads SGLANG_JIT_CACHE_DIR, else ~/.cache/sglang/jit)
JITS = (("TRITON_CACHE_DIR", "triton"), ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
        ("TORCH_EXTENSIONS_DIR", "torch_extensions"), ("FLAGGEMS_CACHE_DIR", "flaggems"),
        ("SGLANG_JIT_CACHE_DIR", "sglang_jit"))
# Triton's autotuner times every config again in each process unless told to keep its choice on disk (under
# TRITON_CACHE_DIR): SGLang's autotuned V4 sparse decode spent 39.5 s of kernel phase over its 21 warm-up cases
# on a second run with every kernel built (the H200, 2026-12-05), and its rows' last digits followed whichever
# config won.  Kept, a second run reuses the first's choice.
FLAGS = (("TRITON_CACHE_AUTOTUNING", "1"),)


def cache_root(asked: str | None = None) -> Path:
    """The root: the flag's, the environment's, or the default."""
    return Path(asked or os.environ.get(ENV) or DEFAULT).expanduser()


def point_jits_at(root: Path) -> dict[str, str]:
    """Every JIT's variable under ``root`` unless already set, and ``$MLA_VERIFY_CACHE`` to the root (workers
    and their children read it); returns each variable's value now."""
    os.environ[ENV] = str(root)
    for variable, folder in JITS:
        os.environ.setdefault(variable, str(root / folder))
    for variable, value in FLAGS:
        os.environ.setdefault(variable, value)
    return {variable: os.environ[variable] for variable, _ in JITS + FLAGS}
