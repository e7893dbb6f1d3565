"""``run``'s first moves, made before this process imports torch: free memory measured, spare workers started.

A spare's imports and CUDA context (seconds) then overlap this process's own imports and preparation.
Free memory is measured first, where NVML can say (``gpu_memory``), so a too-large verdict never depends
on how far the spares have got.  Nothing here imports torch: ``run_cmd.main`` calls ``start_spares``
before its heavy imports.
"""

import time
from dataclasses import dataclass

from ..cores import cpu_workers, usable_cores
from ..running import gpu_memory, gpus, worker_pool


@dataclass
class MeasuredAtStart:
    """Free memory measured before any spare could make a CUDA context; None where it was not."""
    whole: tuple[int, str, float] | None = None               # the one GPU (``gpu_memory.free_memory``)
    per_gpu: dict[int, tuple[int, str]] | None = None         # each GPU of ``--gpus`` (``free_memory_of``)

    @property
    def before_spares(self) -> bool:
        """Whether NVML measured before the spares started: they may then make CUDA contexts at once."""
        return self.whole is not None or self.per_gpu is not None


def spares_wanted(workers: int | None, device: str, sets: int = 1) -> int:
    """How many workers per GPU ``run`` with crash isolation (the default) will start: ``--workers`` as
    given (on the CPU at most one per core, as ``run`` settles it), else the default for ``device`` over
    ``sets`` GPUs.  0 for ``--workers 0``."""
    if workers is None:
        return worker_pool.default_workers(device, sets)
    workers = max(workers, 0)
    return cpu_workers(workers, usable_cores())[0] if device == "cpu" else workers


def start_spares(args, pool: worker_pool.WorkerPool) -> MeasuredAtStart:
    """Start ``run``'s spare workers in ``pool``, one set per GPU it uses, measuring free memory first
    where NVML can say; returns what was measured.  The device is the driver's guess (no torch yet):
    ``--device``, else cuda where an NVIDIA GPU is visible."""
    device = args.device or ("cuda" if worker_pool.gpu_present() else "cpu")
    sets = gpus.plan(args.gpus, device)[0]
    spares = spares_wanted(args.workers, device, len(sets))
    measured = MeasuredAtStart()
    if not spares:
        return measured
    if device == "cuda" and sets[0][0] is None:
        measured.whole = gpu_memory.free_memory()
    elif device == "cuda":
        measured.per_gpu = gpu_memory.free_memory_of([record["gpu"] for _, record in sets])
    pins = [pin for pin, _ in sets]
    pool.start_spares(spares, warm=measured.before_spares, pins=pins)     # pins [None]: one set on the default device
    return measured


def memory_before_the_spares_load(device: str, sets, at_start: MeasuredAtStart):
    """Free memory for the run and the seconds measuring took.  The spares load the first backend and
    make their CUDA context while this process prepares the run, so free memory is measured first and
    never depends on how far they got: before the spares started, where NVML could say
    (``start_spares``), else here, before they are told what to load."""
    per_gpu = per_gpu_memory(sets, at_start) if device == "cuda" and sets[0].pin is not None else None
    if per_gpu is not None:
        return per_gpu
    whole = at_start.whole if device == "cuda" else None
    if whole is not None:
        return whole[:2], whole[2]
    from ..running import resources
    t0 = time.perf_counter()
    memory = resources.available_bytes(device)
    return memory, time.perf_counter() - t0


def per_gpu_memory(sets, at_start: MeasuredAtStart) -> tuple[tuple[int, str], float] | None:
    """Each GPU's free memory for its set's gate, as NVML said before the spares started (``start_spares``), else
    now, before any spare is told its job; and the least of them, which every case must fit.  None where
    NVML cannot say: the run then measures with torch, on its default GPU, for every set."""
    t0 = time.perf_counter()
    found = at_start.per_gpu or gpu_memory.free_memory_of(
        [s.placement["gpu"] for s in sets])
    if found is None:
        return None
    for s in sets:
        s.available = found[s.placement["gpu"]][0]
    least = min(sets, key=lambda s: s.available)
    return found[least.placement["gpu"]], time.perf_counter() - t0
