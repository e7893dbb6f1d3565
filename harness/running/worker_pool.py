"""Worker processes, owned for the length of a run: the spares waiting to be used and the workers retiring.

Spares are started before this process imports torch (``run``'s ``main`` starts them first thing), so
the worker's imports, most of its start, overlap the parent's; they are told what to load as soon as
the parent knows (``load_in_spare``), so that overlaps the parent's preparation too.  A pool that carries
workers over (``carry_over``) keeps each backend's workers, settled, as the next backend's spares: a kernel
package's import (20 s a process for SGLang's on the H200 box) and its kernels' compiles are paid once per
process, not once per backend.  This module imports
nothing heavy at the top for that reason.  A ``WorkerPool`` is used as a context manager: on the way out
(an exit, an error or a Ctrl-C) it stops the spares nobody took, reaps the workers that retired, and cleans
up what every worker it started left: its stderr file, and any named resource it did not unlink
(``worker_output``).
"""

import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass

from . import gpus as gpus_module
from .worker_output import WorkerOutput
from .worker_process import PRELOAD, kill_worker, serve

# Workers on a GPU, by default: its small cases are bound by the host's work, which several processes share
# out.  On the H200's 16 cores (docs/gpu-runs.md, 2026-12-04, at 6fe7758; runs alternated in one call) the
# flashmla-upstream matrix ran at 440, 404 and 371 cases/s with 4 workers and 447, 460, 505 and 510 with 8;
# the flashmla-sparse-upstream matrix at 181 with 4 and 224 and 234 with 8.  One per 2 cores, at most 8.
GPU_WORKERS = 8
CORES_PER_GPU_WORKER = 2


def default_workers(device: str, gpus: int = 1) -> int:
    """Worker processes per GPU for a run on ``device`` over ``gpus`` GPUs that did not ask for a number:
    the host's cores shared out over the GPUs.  On the CPU one: there the oracle's arithmetic is the
    work, spread over the process's threads already."""
    if device != "cuda":
        return 1
    return gpus_module.workers_per_gpu(os.cpu_count() or 1, gpus, GPU_WORKERS, CORES_PER_GPU_WORKER)


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible, asked of the driver without importing torch (for the spares)."""
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


FOLDER_PREFIX = "mla-verify-workers-"       # then the owning process's pid, a dash, mkdtemp's letters


def new_folder(base: str | None = None) -> str:
    """A pool's folder for its workers' files, named for this process.  A pool whose process was killed
    (a SIGKILL, a Ray actor taken down mid-round) could not remove its own: the folders of owners that
    are gone are removed first."""
    base = base or tempfile.gettempdir()
    for name in os.listdir(base):
        owner = folder_owner(name)
        if owner is not None and not process_alive(owner):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=base)


def folder_owner(name: str) -> int | None:
    """The pid in a pool folder's name, or None for any other name."""
    pid, dash, _ = name.removeprefix(FOLDER_PREFIX).partition("-")
    return int(pid) if name.startswith(FOLDER_PREFIX) and dash and pid.isdigit() else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # someone else's process: alive
        return True
    return True


@dataclass
class Spare:
    proc: object
    conn: object
    progress: object
    job: tuple | None = None          # what it was told to load, once told
    pin: str | None = None            # the GPU it sees alone (``serve``), None: the default device
    output: WorkerOutput | None = None    # its stderr file and resource ledger; None: stderr is this process's


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while a worker starts.  A Ctrl-C at the terminal reaches every process of the group;
    a worker inherits the ignored disposition (Python leaves an ignored SIGINT ignored), so one still
    importing prints no traceback.  The parent, interrupted, stops its workers itself.  Only the main thread
    may set a disposition: another (a backend's, side by side, ``overlap``) blocks SIGINT in itself instead,
    and the worker inherits the blocked mask, which it keeps (it ignores SIGINT once it runs)."""
    if threading.current_thread() is not threading.main_thread():
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def spawn(warm: bool = False, pin: str | None = None, output: WorkerOutput | None = None) -> Spare:
    """A new worker process, not yet told what to run; with ``warm`` it makes its CUDA context at once;
    with ``pin`` it sees that GPU alone; with ``output`` its stderr and resource ledger go there.

    Neither the pipe nor the progress counter holds a named resource: the counter is a ``RawValue``
    (``lock=False``: no semaphore) in multiprocessing's heap, a mapped file unlinked as it is made."""
    ctx = mp.get_context("spawn")      # never fork a process that may hold a CUDA context
    conn, child_conn = ctx.Pipe()
    progress = ctx.Value("i", -1, lock=False)      # index of the case in hand (see chunk.run_chunk's on_start)
    proc = ctx.Process(target=serve, args=(child_conn, progress, warm, pin, output), daemon=True)
    with _sigint_ignored():
        proc.start()
    child_conn.close()
    return Spare(proc, conn, progress, pin=pin, output=output)


class WorkerPool:
    """The worker processes of one run: spares, the workers at work, and workers retiring.

    ``retiring``: workers whose every row has arrived, told to stop.  Their exit (tearing down a CUDA
    context, most of a second) is not waited for inside the run, only before the next run measures free
    memory (``stop_spares``) and when the pool closes (``reap``).  ``working``: the workers at work, of every
    backend running (``overlap``), for the memory gates; ``limit``: how many may be at once (None: no limit).
    Backends running side by side share the pool from their threads: its lists change under ``lock``.
    """

    def __init__(self, carry_over: bool = False):
        self.carry_over = carry_over        # keep a finished backend's workers for the next (``keep``)
        self.spares: list[Spare] = []
        self.retiring: list = []
        self.started: list[Spare] = []      # every worker it started: its files are cleaned up at ``close``
        self.folder: str | None = None      # those files' folder, made at the first start
        self.working: list = []             # the ``worker.Worker`` handles at work, whichever backend's
        self.limit: int | None = None
        self.lock = threading.RLock()

    def may_start(self) -> bool:
        """Whether another worker may go to work now (``limit``)."""
        return self.limit is None or len(self.working) < self.limit

    def clock_in(self, worker):
        with self.lock:
            self.working.append(worker)

    def working_beside(self, mine: list, pin: str | None) -> list:
        """The workers at work on ``pin``'s GPU but for ``mine``: other backends' (``overlap``), read whole while
        their threads may clock in or out."""
        with self.lock:
            return [w for w in self.working if w not in mine and w.place.pin == pin]

    def clock_out(self, worker):
        """A worker no longer at work (retired, kept or killed): its place is free for another."""
        with self.lock:
            if worker in self.working:
                self.working.remove(worker)

    def spawn(self, warm: bool = False, pin: str | None = None) -> Spare:
        """A new worker whose stderr and resource ledger are this pool's to read and clean up."""
        with self.lock:
            return self._spawn(warm, pin)

    def _spawn(self, warm: bool, pin: str | None) -> Spare:
        if self.folder is None:
            self.folder = new_folder()
        spare = spawn(warm, pin, WorkerOutput.in_folder(self.folder, len(self.started)))
        self.started.append(spare)
        return spare

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start_spares(self, count: int, warm: bool = False, pins=(None,)):
        """Have ``count`` spare workers waiting for each of ``pins`` (a worker set's GPU, ``serve``), starting
        those missing now, the sets' in turn.  ``warm``: free memory has been measured already, so they make
        their CUDA contexts as soon as torch is imported."""
        for _ in range(count):
            for pin in pins:
                alive = sum(spare.proc.is_alive() and spare.pin == pin for spare in self.spares)
                if alive < count:
                    self.spares.append(self.spawn(warm, pin))

    def preload(self, modules: list[str]):
        """Have every spare not yet told its job import ``modules`` first (``worker_process.PRELOAD``)."""
        if not modules:
            return
        for spare in self.spares:
            if spare.job is None and spare.proc.is_alive():
                spare.conn.send((PRELOAD, tuple(modules)))

    def load_in_spare(self, job: tuple, count: int):
        """Tell up to ``count`` waiting spares what to load (``worker_job``), ahead of their use.  Spares not
        told are stopped when the pool closes (without a device context, unless they made one at start)."""
        for spare in self.spares:
            if count > 0 and spare.job is None and spare.proc.is_alive():
                spare.conn.send(job)
                spare.job = job
                count -= 1

    def worker_for(self, job: tuple, pin: str | None = None) -> Spare:
        """A live spare on ``pin``'s GPU told (or now told) to load ``job``, else a new worker told so."""
        with self.lock:
            return self._worker_for(job, pin)

    def _worker_for(self, job: tuple, pin: str | None) -> Spare:
        while True:
            mine = [s for s in self.spares if s.pin == pin]
            if not mine:
                spare = self._spawn(False, pin)
                break
            spare = mine[0]
            self.spares.remove(spare)
            if spare.proc.is_alive() and spare.job in (None, job):
                break
            kill_worker(spare.proc)
            spare.conn.close()
        if spare.job is None:
            spare.conn.send(job)
            spare.job = job
        return spare

    def keep(self, proc, conn, progress, output, pin: str | None = None):
        """A worker whose backend is done, kept as a spare told nothing yet: the next backend's job loads
        into a process that has imported torch and the kernel packages, and compiled their kernels, already."""
        with self.lock:
            self.spares.append(Spare(proc, conn, progress, pin=pin, output=output))

    def retire(self, proc):
        """A worker told to stop: its exit is waited for later (``reap``)."""
        with self.lock:
            self.retiring.append(proc)

    def stop_spares(self):
        """A spare has run nothing and holds nothing that matters: it is killed, not waited for.  Retired
        workers are then reaped.  Every spare is killed before any is waited for, so their exits (each tearing
        down a CUDA context) overlap."""
        for spare in self.spares:
            kill_worker(spare.proc)
        while self.spares:
            spare = self.spares.pop()
            spare.proc.join()
            spare.conn.close()
        self.reap()

    def reap(self):
        """Wait for retired workers to exit (kill one that does not), so the memory they held is free again."""
        while self.retiring:
            proc = self.retiring.pop()
            proc.join(timeout=5)
            if proc.is_alive():
                kill_worker(proc)
                proc.join()

    def close(self):
        """Stop the spares and reap retired workers.  A Ctrl-C meanwhile kills what is left, quietly.  Then
        what the workers left is cleaned up (``release``)."""
        try:
            self.stop_spares()
        except KeyboardInterrupt:
            for proc in [spare.proc for spare in self.spares] + self.retiring:
                kill_worker(proc)
        finally:
            self.release()

    def release(self):
        """Every worker this pool started gone (one still alive, which none should be by now, is killed, and
        so is what an unreaped one left running, a compiler it had started): the named resources each left
        registered are unlinked, and their files removed."""
        for spare in self.started:
            kill_worker(spare.proc)
        for spare in self.started:
            spare.proc.join()
            spare.output.release()
        self.started.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
