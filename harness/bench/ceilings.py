"""The device's ceilings, measured, not quoted: copy bandwidth and bf16 matmul rate.

Measured once per device and cached in ``<cache>/ceilings-<device>.json`` (cache:
``$MLA_VERIFY_CACHE_DIR``, else ``$XDG_CACHE_HOME/mla-verify``, else
``~/.cache/mla-verify``); ``--remeasure-ceilings`` measures again.  Each ceiling is the
fastest of several timed runs: noise only ever slows a run down.

- copy: ``dst.copy_(src)`` of a large buffer (1 GiB on a GPU, far past its L2), counted as
  bytes read + bytes written, so a kernel that reads its bytes at the copy's pace scores 100%.
- matmul: ``torch.mm`` of square bf16 matrices (8192 on a GPU), ``2 n^3`` FLOPs.
"""

import json
import os
import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..errors import InputError


@dataclass
class Ceilings:
    device_name: str
    copy_bytes_per_s: float
    matmul_flop_per_s: float
    method: str
    measured_at: str
    torch: str
    source: str = "measured"       # "measured" now, or the cache file it was read from

    def to_dict(self) -> dict:
        return asdict(self)


GPU_SIZES = {"copy_bytes": 1 << 30, "matmul_n": 8192, "runs": 20}
CPU_SIZES = {"copy_bytes": 64 << 20, "matmul_n": 512, "runs": 5}


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu-{platform.machine()}-{os.cpu_count()}cores"


def cache_dir() -> Path:
    if os.environ.get("MLA_VERIFY_CACHE_DIR"):
        return Path(os.environ["MLA_VERIFY_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mla-verify"


def cache_path(name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "device"
    return cache_dir() / f"ceilings-{slug}.json"


def _timer(device):
    """A function timing ``fn`` once, in seconds: CUDA events on a GPU, wall clock on the CPU."""
    if torch.device(device).type == "cuda":
        def timed(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def timed(fn):
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    return timed


def _copy_rate(device, nbytes: int, runs: int) -> float:
    """Bytes read + written per second by ``dst.copy_(src)``, best of ``runs``."""
    timed = _timer(device)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    for _ in range(3):                   # warm-up: first touch and clock ramp
        dst.copy_(src)
    return 2 * nbytes / min(timed(lambda: dst.copy_(src)) for _ in range(runs))


def _matmul_rate(device, n: int, runs: int) -> float:
    """FLOP/s of a bf16 ``n x n x n`` torch.mm, best of ``runs``."""
    timed = _timer(device)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, b)
    return 2 * n ** 3 / min(timed(lambda: torch.mm(a, b)) for _ in range(runs))


def measure(device: str) -> Ceilings:
    sizes = GPU_SIZES if torch.device(device).type == "cuda" else CPU_SIZES
    copy = _copy_rate(device, sizes["copy_bytes"], sizes["runs"])
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()         # give the 2 GiB of copy buffers back before the matmul
    n = sizes["matmul_n"]
    return Ceilings(
        device_name=device_name(device), copy_bytes_per_s=copy,
        matmul_flop_per_s=_matmul_rate(device, n, sizes["runs"]),
        method=(f"copy: best of {sizes['runs']} copies of {sizes['copy_bytes'] >> 20} MiB, read + write bytes; "
                f"matmul: best of {sizes['runs']} bf16 torch.mm {n}x{n}x{n}, 2n^3 FLOPs"),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), torch=torch.__version__)


def load_cached(path: Path) -> Ceilings | None:
    try:
        data = json.loads(path.read_text())
        c = Ceilings(**{k: data[k] for k in Ceilings.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None                      # missing or unreadable: measure again
    if not (c.copy_bytes_per_s > 0 and c.matmul_flop_per_s > 0):
        return None
    c.source = str(path)
    return c


def get(device: str, remeasure: bool = False) -> Ceilings:
    """The cached ceilings of this device, or freshly measured ones (then cached)."""
    path = cache_path(device_name(device))
    if not remeasure:
        cached = load_cached(path)
        if cached is not None:
            return cached
    c = measure(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(c.to_dict(), indent=1) + "\n")
    except OSError as e:
        raise InputError(f"cannot write the ceilings cache {path}: {e.strerror or e} "
                         f"(set MLA_VERIFY_CACHE_DIR to a writable folder)") from None
    return c
