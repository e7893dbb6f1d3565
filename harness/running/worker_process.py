"""A worker process's side of crash isolation: what it imports, loads and runs (``serve``).

Nothing heavy is imported at the top: a spare worker is started before the parent imports torch
(``worker_pool``), and this module is what it runs.
"""

import contextlib
import os
import signal
import sys

from ..allocator import keep_freed_blocks
from ..cores import cpu_threads, passive_openmp, usable_cores
from ..errors import InputError
from ..recording.status import Status
from .worker_output import capture

PIN_ENV = "CUDA_VISIBLE_DEVICES"
EMPTY_CACHE = "empty cache"      # a message to an idle worker: hand your allocator's kept memory back
# a message to an idle worker whose backend is done: settle the device, hand the allocator's memory back,
# say so ("kept") and wait for the next backend's job, its imports and compiled kernels kept (``WorkerPool``)
NEXT_BACKEND = "next backend"
# a message to a spare not yet told its job: import these kernel modules now, while the parent imports them to
# resolve the run's backends, rather than when each backend's turn comes (``WorkerPool.preload``)
PRELOAD = "preload"

STICKY_CUDA = ("CUDA error", "illegal memory access", "device-side assert", "AcceleratorError",
               "unspecified launch failure")


def lead_own_group():
    """Make this worker the leader of a process group of its own.  The compilers a JIT starts (Triton's
    ptxas, the nvcc of a ninja build) inherit the worker's ignored SIGINT, so a Ctrl-C does not stop them;
    killed with their group (``kill_worker``), none is left behind compiling for a run that is over."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def kill_worker(proc):
    """SIGKILL to worker ``proc`` and whatever it started.  Its group only while the worker is not yet waited
    for (alive, or dead and unreaped): till then its number is its own, after it may lead another's group.
    Before it leads its group there is none of that id, and the worker alone is killed."""
    if _unreaped(proc):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()


def _unreaped(proc) -> bool:
    """Whether child ``proc`` has not been waited for: asked without reaping it (``WNOWAIT``)."""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _context_lost(device):
    def lost(row) -> bool:
        return (device == "cuda" and row["status"] in (Status.ERROR, Status.HARNESS_ERROR)
                and any(s in (row.get("reason") or "") for s in STICKY_CUDA))
    return lost


def serve(conn, progress, warm=False, pin=None, output=None):
    """A worker's life: its imports (and with ``warm`` its CUDA context), then told what to load (or None:
    not needed after all), then chunk after chunk; kept for the next backend, the same again with its job.
    ``pin``: the one GPU it may see (``gpus.Gpu.pin``),
    set before torch is imported, so CUDA never sees another.  ``output``: the files its stderr and its
    resource ledger go to (``worker_output``), taken before anything can write or register."""
    if output is not None:
        capture(output)
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent handles Ctrl-C
    lead_own_group()
    if pin is not None:
        os.environ[PIN_ENV] = pin
    passive_openmp()          # before torch loads OpenMP: a spare may start before the CLI's own call
    keep_freed_blocks()
    import torch  # the slow imports, made while the parent (which started a spare early) makes its own
    if warm:      # free memory was measured before this process started (gpu_memory)
        try:
            _warm_up("cuda")
        except Exception:       # no usable GPU after all: the job says which device, and warms up for it
            pass

    from .backend_loader import load_backend
    job = _next_job(conn)
    while job is not None:
        backend_spec, device, threads, run_chunk = job
        # the parent's thread count, whatever the number of workers: a CPU float64 reduction or matmul
        # splits its work over the threads, so another count gives other last bits in the metrics
        torch.set_num_threads(threads)
        try:
            backend = load_backend(backend_spec)
        except InputError as e:
            conn.send(("bad_input", str(e)))
            return
        _warm_up(device)
        conn.send(("ready", None))
        if not _serve_chunks(conn, progress, backend, backend_spec, device, run_chunk):
            return
        job = _next_job(conn)


def _next_job(conn):
    """The next job (or None), the modules of a ``PRELOAD`` before it imported first; one that does not import
    is the backend's to report when its job loads it."""
    from ..backends.optional import try_import
    job = conn.recv()
    while isinstance(job, tuple) and len(job) == 2 and job[0] == PRELOAD:
        for name in job[1]:
            try_import(name)
        job = conn.recv()
    return job


def _serve_chunks(conn, progress, backend, backend_spec, device, run_chunk):
    """Chunk after chunk until told None or ``NEXT_BACKEND`` (or until the chunk's input is bad, or the context
    is lost); True when told ``NEXT_BACKEND``: the worker then waits for another backend's job."""
    import torch

    from ..recording.outcome import context_lost_row
    from .chunk import ContextLost

    def on_start(i):
        progress.value = i

    def cached() -> int:
        """What this worker's allocator holds now, in use or kept for reuse (no wait for the device)."""
        return torch.cuda.memory_reserved() if device == "cuda" else 0

    while True:
        job = conn.recv()
        if job is None:
            return False
        if job == NEXT_BACKEND:
            conn.send(("kept", _settled(device)))
            return True
        if job == EMPTY_CACHE:          # the parent needs this worker's kept memory for another's chunk
            if device == "cuda":
                torch.cuda.empty_cache()
            conn.send(("cache", cached()))
            continue
        try:
            rows = run_chunk(job, backend, backend_spec, device, on_start=on_start,
                             context_lost=_context_lost(device))
        except InputError as e:
            conn.send(("bad_input", str(e)))
            return False
        except ContextLost as lost:
            sys.stderr.flush()          # in its file before the parent reads it into the row
            conn.send(("lost", (lost.index, None if lost.index is None else context_lost_row(lost.row))))
            return False
        sys.stderr.flush()
        conn.send(("rows", (rows, cached())))


def _settled(device) -> bool:
    """Whether this worker may serve another backend: on a GPU, every launch finished without a deferred
    error, and its allocator's kept memory handed back."""
    if device != "cuda":
        return True
    import torch
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception:          # a fault that surfaced only now: this process ends with its backend
        return False
    return True


def _warm_up(device):
    """Create the CUDA context and cuBLAS's handle, and ready the witness's, the comparison's and the oracles'
    Triton kernels, now, while the parent still prepares the run, rather than in the first case (0.45 s, 0.11 s and,
    under cProfile, 0.57 s on the H200).  No kernel of the backend runs here."""
    import torch
    if torch.device(device).type == "cuda":
        from ..fast import compare_kernel, sparse_softmax_kernel, widen_kernel
        from ..judging import integrity
        a = torch.ones(8, 8, dtype=torch.float64, device=device)
        integrity.warm_up(device)
        compare_kernel.warm_up(device)
        widen_kernel.warm_up(device)
        sparse_softmax_kernel.warm_up(device)
        (a @ a).sum().item()


def worker_job(backend_spec, device, run_chunk, workers: int = 1) -> tuple:
    """What a worker is told to load: ``(backend spec, device, threads, run_chunk)`` (see ``serve``), for a
    run of ``workers`` worker processes on this host.  A spare told one job serves only that job, until
    its pool keeps it for the next backend (``NEXT_BACKEND``).

    On the CPU the workers share the cores: each computes with this process's torch thread count, cut so
    that workers x threads stays within the cores (``cores.cpu_threads``).  On a GPU the host's work is small
    integer arrays, and several workers' threads on the same cores cost time (2 workers on the H200's 16
    cores: 11.7 s with 16 threads each, 9.0 s with one), so a worker has one thread.
    """
    import torch
    threads = 1 if device == "cuda" else cpu_threads(torch.get_num_threads(), workers, usable_cores())
    return backend_spec, device, threads, run_chunk

