"""Free memory on the GPU, asked of the driver (NVML) without a CUDA context.

``run`` measures free memory once, before any of its processes touches the device, so a
too-large verdict never depends on how far its workers have got.  Asking NVML takes no
context, so the measure can come first thing, and the workers can make their contexts while
this process is still importing torch (``commands/run_start.start_spares``).  NVML is asked only where
it is plain which GPU the run will use: one GPU, not in MIG mode, and ``CUDA_VISIBLE_DEVICES``
unset or ``0``; anywhere else the answer is None and the run measures with torch, as before.
"""

import ctypes
import os
import time
from contextlib import contextmanager

GiB = 1 << 30


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


@contextmanager
def nvml_session():
    """NVML loaded and initialised for the ``with`` block (shut down after it), or None where the library
    does not load or does not start."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        yield None
        return
    if nvml.nvmlInit_v2() != 0:
        yield None
        return
    try:
        yield nvml
    finally:
        nvml.nvmlShutdown()


def free_memory() -> tuple[int, str, float] | None:
    """``(free bytes, how it was measured, seconds the asking took)`` of the one GPU, or None."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() != "0":
        return None
    t0 = time.perf_counter()
    with nvml_session() as nvml:
        if nvml is None:
            return None
        count, handle, memory = ctypes.c_uint(), ctypes.c_void_p(), _Memory()
        mig, pending = ctypes.c_uint(), ctypes.c_uint()
        name = ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value != 1 \
                or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
            return None
        if nvml.nvmlDeviceGetMigMode(handle, ctypes.byref(mig), ctypes.byref(pending)) == 0 and mig.value:
            return None       # CUDA sees MIG instances, each with memory of its own
        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return None
        named = nvml.nvmlDeviceGetName(handle, name, len(name)) == 0
    gpu = name.value.decode(errors="replace") if named else "the GPU"
    return memory.free, (f"{memory.free / GiB:.1f} GiB free of {memory.total / GiB:.1f} GiB on {gpu} "
                         f"before the run (NVML)"), time.perf_counter() - t0


def free_memory_of(indices) -> dict[int, tuple[int, str]] | None:
    """``{index: (free bytes, how it was measured)}`` of the GPUs with these NVML indices, one NVML session,
    for a run over several (``run --gpus``): each GPU's memory gate gets its own.  None where NVML cannot
    say for all of them (the run then measures with torch)."""
    found = {}
    with nvml_session() as nvml:
        if nvml is None:
            return None
        for index in indices:
            handle, memory = ctypes.c_void_p(), _Memory()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0 \
                    or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
                return None
            found[index] = memory.free, (f"{memory.free / GiB:.1f} GiB free of {memory.total / GiB:.1f} GiB on "
                                         f"GPU {index} before the run (NVML)")
    return found
