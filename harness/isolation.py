"""Crash isolation: kernels run in worker processes, the parent keeps the results.

An illegal memory access, an abort or a hang in one case must not end the
suite.  Each worker loads the backend once and runs chunks of cases sent over a
pipe (``chunk.run_chunk``); the parent writes every row as it arrives.  Before
each case the worker posts the case's index in a shared counter.  When a worker
dies in a case run alone, the parent knows which it was: that case is recorded
as ``crash`` (or ``timeout``, for one that overran and was killed).  The cases
of a chunk of several do not wait for their kernels (``phases``), so a fault
there may surface in any later case: none is charged, and every case of the
chunk runs again alone, in a fresh worker, where the fault finds its own case.
A crash costs one case; a row that reached the parent is never lost.  A CUDA
error is sticky (the context is unusable afterwards), so a worker that hits one
reports it and exits to be replaced.
"""

import atexit
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

from . import placement
from .checks import CRASH
from .errors import InputError
from .status import Status

PIN_ENV = "CUDA_VISIBLE_DEVICES"
EMPTY_CACHE = "empty cache"      # a message to an idle worker: hand your allocator's kept memory back

STICKY_CUDA = ("CUDA error", "illegal memory access", "device-side assert", "AcceleratorError",
               "unspecified launch failure")


def _context_lost(device):
    def lost(row) -> bool:
        return (device == "cuda" and row["status"] in (Status.ERROR, Status.HARNESS_ERROR)
                and any(s in (row.get("reason") or "") for s in STICKY_CUDA))
    return lost


def serve(conn, progress, warm=False, pin=None):
    """A worker's life: its imports (and with ``warm`` its CUDA context), then told what to load (or None:
    not needed after all), then chunk after chunk.  ``pin``: the one GPU it may see (``gpus.Gpu.pin``),
    set before torch is imported, so CUDA never sees another."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent handles Ctrl-C
    if pin is not None:
        os.environ[PIN_ENV] = pin
    import torch  # the slow imports, made while the parent (which started a spare early) makes its own
    if warm:      # free memory was measured before this process started (gpu_memory)
        try:
            _warm_up("cuda")
        except Exception:       # no usable GPU after all: the job says which device, and warms up for it
            pass

    from .backend_loader import load_backend
    from .chunk import ContextLost
    job = conn.recv()
    if job is None:
        return
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

    def on_start(i):
        progress.value = i

    def cached() -> int:
        """What this worker's allocator holds now, in use or kept for reuse (no wait for the device)."""
        return torch.cuda.memory_reserved() if device == "cuda" else 0

    while True:
        job = conn.recv()
        if job is None:
            return
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
            return
        except ContextLost as lost:
            row = None if lost.index is None else \
                {**lost.row, "status": Status.CRASH.value, "reason": f"CUDA context lost: {lost.row['reason']}",
                 "failed_checks": [CRASH]}
            conn.send(("lost", (lost.index, row)))
            return
        conn.send(("rows", (rows, cached())))


def _warm_up(device):
    """Create the CUDA context and cuBLAS's handle now, while the parent still prepares the run, rather than
    in the first case (0.45 s and 0.11 s on the H200).  No kernel of the backend runs here."""
    import torch
    if torch.device(device).type == "cuda":
        a = torch.ones(8, 8, dtype=torch.float64, device=device)
        (a @ a).sum().item()


# Spare workers: started before this process imports torch (``cli`` calls ``start_spares`` first
# thing), so the worker's imports, most of its start, overlap the parent's; told what to load as
# soon as the parent knows (``load_in_spare``), so that overlaps the parent's preparation too.
# This module imports nothing heavy at the top for that reason.  Spares nobody took are stopped at exit.

@dataclass
class _Spare:
    proc: object
    conn: object
    progress: object
    job: tuple | None = None          # what it was told to load, once told
    pin: str | None = None            # the GPU it sees alone (``serve``), None: the default device


_spares: list[_Spare] = []


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while a worker starts.  A Ctrl-C at the terminal reaches every process of the group;
    a worker inherits the ignored disposition (Python leaves an ignored SIGINT ignored), so one still
    importing prints no traceback.  The parent, interrupted, stops its workers itself."""
    if threading.current_thread() is not threading.main_thread():     # only the main thread may set it
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def spawn(warm: bool = False, pin: str | None = None) -> _Spare:
    """A new worker process, not yet told what to run; with ``warm`` it makes its CUDA context at once;
    with ``pin`` it sees that GPU alone."""
    ctx = mp.get_context("spawn")      # never fork a process that may hold a CUDA context
    conn, child_conn = ctx.Pipe()
    progress = ctx.Value("i", -1, lock=False)      # index of the case in hand (see chunk.run_chunk's on_start)
    proc = ctx.Process(target=serve, args=(child_conn, progress, warm, pin), daemon=True)
    with _sigint_ignored():
        proc.start()
    child_conn.close()
    return _Spare(proc, conn, progress, pin=pin)


# Workers on a GPU, by default: its small cases are bound by the host's work, which several processes share
# out.  On the H200's 16 cores the flashmla-upstream matrix ran at 224 cases/s with 1 worker, 274 with 2 and
# 313-348 with 3 to 8 (docs/gpu-runs.md, 2026-12-03, fourth session); one per 4 cores, at most 4.
GPU_WORKERS = 4
CORES_PER_GPU_WORKER = 4


def default_workers(device: str, gpus: int = 1) -> int:
    """Worker processes per GPU for a run on ``device`` over ``gpus`` GPUs that did not ask for a number:
    the host's cores shared out over the GPUs.  On the CPU one: there the oracle's arithmetic is the
    work, spread over the process's threads already."""
    if device != "cuda":
        return 1
    return max(1, min(GPU_WORKERS, (os.cpu_count() or 1) // CORES_PER_GPU_WORKER // max(gpus, 1)))


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible, asked of the driver without importing torch (for ``start_spares``)."""
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def start_spares(count: int, warm: bool = False, pins=(None,)):
    """Have ``count`` spare workers waiting for each of ``pins`` (a worker set's GPU, ``serve``), starting
    those missing now, the sets' in turn.  ``warm``: free memory has been measured already, so they make
    their CUDA contexts as soon as torch is imported."""
    for _ in range(count):
        for pin in pins:
            alive = sum(spare.proc.is_alive() and spare.pin == pin for spare in _spares)
            if alive < count:
                _spares.append(spawn(warm, pin))


def worker_job(backend_spec, device, run_chunk) -> tuple:
    """What a worker is told to load: ``(backend spec, device, threads, run_chunk)`` (see ``serve``).
    A spare told one job serves only that job.

    On the CPU a worker computes with this process's torch thread count: a float64 reduction or matmul
    splits its work over the threads, so another count gives other last bits.  On a GPU the host's work
    is small integer arrays, and several workers' threads on the same cores cost time (2 workers on the
    H200's 16 cores: 11.7 s with 16 threads each, 9.0 s with one), so a worker has one thread.
    """
    import torch
    return backend_spec, device, 1 if device == "cuda" else torch.get_num_threads(), run_chunk


def load_in_spare(job: tuple, count: int):
    """Tell up to ``count`` waiting spares what to load (``worker_job``), ahead of their use.  Spares not
    told are stopped at exit (without a device context, unless they made one at start, ``start_spares``)."""
    for spare in _spares:
        if count > 0 and spare.job is None and spare.proc.is_alive():
            spare.conn.send(job)
            spare.job = job
            count -= 1


def worker_for(job: tuple, pin: str | None = None) -> _Spare:
    """A live spare on ``pin``'s GPU told (or now told) to load ``job``, else a new worker told so."""
    while True:
        mine = [s for s in _spares if s.pin == pin]
        if not mine:
            spare = spawn(pin=pin)
            break
        spare = mine[0]
        _spares.remove(spare)
        if spare.proc.is_alive() and spare.job in (None, job):
            break
        spare.proc.kill()
        spare.conn.close()
    if spare.job is None:
        spare.conn.send(job)
        spare.job = job
    return spare


def stop_spares():
    """A spare has run nothing and holds nothing that matters: it is killed, not waited for.  Retired
    workers are then reaped."""
    while _spares:
        spare = _spares.pop()
        spare.proc.kill()
        spare.proc.join()
        spare.conn.close()
    reap()


# Workers whose every row has arrived, told to stop: their exit (tearing down a CUDA context, most of a
# second) is not waited for inside the run, only before the next run measures free memory (``reap``).
_retiring: list = []


def reap():
    """Wait for retired workers to exit (kill one that does not), so the memory they held is free again."""
    while _retiring:
        proc = _retiring.pop()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _stop_all():
    """At exit: stop the spares and reap retired workers.  A Ctrl-C meanwhile kills what is left, quietly."""
    try:
        stop_spares()
    except KeyboardInterrupt:
        for proc in [spare.proc for spare in _spares] + _retiring:
            proc.kill()


atexit.register(_stop_all)      # spares nobody took, and retired workers, at exit


class Worker:
    def __init__(self, job: tuple, startup_timeout_s, place=None):
        self.place = place          # its worker set (``WorkerSet``), None: the only one
        worker = worker_for(job, place.pin if place is not None else None)
        self.proc, self.conn, self.progress = worker.proc, worker.conn, worker.progress
        self.chunk = None
        self.seen = -1              # the progress last seen: the per-case deadline restarts when it moves
        self.deadline = time.monotonic() + startup_timeout_s
        self.ready = False
        self.holds = 0              # the estimated bytes of the chunk in flight
        self.cache = 0              # the bytes its allocator held after its last chunk, as it reported
        self.emptying = False       # told to empty its cache, reply not yet in
        self.emptied = True         # has run nothing since it last emptied its cache

    def send(self, chunk, holds: int):
        self.progress.value = -1
        self.chunk, self.seen, self.deadline, self.holds = chunk, -1, None, holds
        self.emptied = False
        self.conn.send(chunk)

    def idle(self) -> bool:
        return self.ready and self.chunk is None and not self.emptying

    def footprint(self) -> int:
        """The device memory this worker may hold now.  A chunk in flight is counted beside the kept
        cache, not inside it: its blocks may be of other sizes than the cached ones."""
        return self.holds + self.cache

    def empty_cache(self):
        self.emptying = True
        self.conn.send(EMPTY_CACHE)

    def cache_emptied(self, cache: int):
        self.cache, self.emptying, self.emptied = cache, False, True

    def watch(self, timeout_s: float, now: float):
        """Restart the deadline whenever the worker moves on to another case."""
        if self.chunk is not None and self.progress.value != self.seen:
            self.seen, self.deadline = self.progress.value, now + timeout_s

    def in_hand(self):
        """The case to charge with the worker's death (None while comparing, and in a chunk of several,
        whose cases did not wait for their kernels: a fault there may belong to any of them), and the
        chunk's other cases, not yet recorded."""
        i = self.progress.value
        if len(self.chunk) > 1 or not 0 <= i < len(self.chunk):
            return None, list(self.chunk)
        return self.chunk[i], []

    def retire(self):
        """Tell an idle worker to stop and go on without waiting for it (``reap``)."""
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        _retiring.append(self.proc)

    def kill(self):
        """End a worker that has to go (dead, hung, lost its device, or the run is over): a finished
        one retires instead (``retire``)."""
        self.proc.kill()
        self.proc.join()


def _death_reason(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code}"


class MemoryGate:
    """Admits a chunk to a worker only while every worker's memory fits the device together.

    ``cost(chunk)`` estimates a chunk's peak bytes; ``budget`` is what all workers may hold at once.
    A worker's allocator keeps what its chunks allocated, to reuse without allocating again (emptying
    it after each large chunk cost the upstream matrix 5-10% on the H200, docs/gpu-runs.md).  So a
    worker holds its chunk in flight and the cache it reported after its last chunk, and a chunk is
    admitted only beside everything every worker holds.  When no chunk fits, the idle workers are told
    to empty their caches (``hand_out``).  A chunk that fits nothing runs alone (its cases' fit was
    checked before the run).  The gate is as good as ``cost``: the scale suite ran out of memory with
    SGLang's kernels while their fp8 verify view went uncounted (docs/gpu-runs.md, a sixth session).
    """

    LOOKAHEAD = 64            # chunks scanned for one that fits, past a large one that must wait

    def __init__(self, cost=None, budget: int = 0):
        self.cost, self.budget = cost, budget

    def pick(self, todo: list, others: int, own_cache: int = 0, alone: bool = False, allowed=None) -> int | None:
        """The index in ``todo`` of the next chunk to start in a worker whose allocator keeps
        ``own_cache`` bytes while the other workers hold ``others`` (``Worker.footprint``), or None
        to wait for memory.  ``alone``: nothing else runs or keeps memory it could hand back.
        ``allowed(chunk)``: whether this worker may take it (a rerun avoids the GPU it died on)."""
        for i, chunk in enumerate(todo if alone or self.cost is None else todo[:self.LOOKAHEAD]):
            if allowed is not None and not allowed(chunk):
                continue
            if self.cost is None or alone or others + own_cache + self.cost(chunk) <= self.budget:
                return i
        return None


def hand_out(todo: list, pool: list, memory: MemoryGate, place=None, sets=()):
    """Give each idle worker of ``place``'s set in ``pool`` its next chunk from ``todo`` where memory
    allows; with none left it may run, retire it.  Where no chunk fits, the idle workers that kept a
    cache are told to empty it.  Memory is the set's own (one GPU's): other sets' workers do not count."""
    mine = [w for w in pool if getattr(w, "place", None) is place]
    allowed = (lambda chunk: placement.may_run(chunk, place, sets)) if sets else None
    for w in mine:
        if not w.idle():
            continue
        if not todo or (allowed is not None and not any(map(allowed, todo))):
            w.retire()
            pool.remove(w)
            continue
        others = [o for o in mine if o is not w]
        alone = not any(o.chunk is not None or o.emptying or not o.emptied for o in others)
        i = memory.pick(todo, sum(o.footprint() for o in others), w.cache, alone, allowed)
        if i is not None:
            chunk = todo.pop(i)
            w.send(chunk, memory.cost(chunk) if memory.cost else 0)
            continue
        for o in mine:
            if o.idle() and not o.emptied:
                o.empty_cache()


def run_isolated(chunks, backend_spec, device, on_row, crash_row, run_chunk, workers=1, timeout_s=300.0,
                 startup_timeout_s=300.0, memory: MemoryGate | None = None, stop=None, sets=None) -> list:
    """Run ``chunks`` (lists of cases) in ``workers`` processes; ``on_row(row)`` gets every row.

    ``run_chunk(cases, backend, spec, device, on_start=, context_lost=)`` runs in a worker (a
    module-level function, so it pickles by name); ``crash_row(case, status, reason)`` builds the
    row of a case whose worker died or hung.  ``timeout_s`` bounds each case, not each chunk.
    Once ``stop()`` is true no chunk starts (those in flight finish); returns the cases never started.
    ``sets``: one ``placement.WorkerSet`` per GPU, ``workers`` processes each, each with its memory
    gate; without, one set on the default device gated by ``memory``.
    """
    sets = list(sets) if sets else [placement.WorkerSet(memory=memory)]
    for s in sets:
        s.memory = s.memory or MemoryGate()
    run = _Run([list(c) for c in chunks if c], sets, worker_job(backend_spec, device, run_chunk), backend_spec,
               on_row, crash_row, stop, startup_timeout_s)
    first = min(workers * len(sets), len(run.todo))
    pool = [run.start(sets[i % len(sets)]) for i in range(first)]
    try:
        while pool:
            run.heed_stop()
            for s in placement.live(sets) if len(sets) > 1 else sets:
                hand_out(run.todo, pool, s.memory, s, sets if len(sets) > 1 else ())
            for s in sets:            # a lost GPU's idle workers get nothing more
                if s.lost is not None:
                    for w in [w for w in pool if w.place is s and w.idle()]:
                        w.retire()
                        pool.remove(w)
            if len(sets) > 1:
                pool += [run.start(s) for s in placement.uncovered(run.todo, sets, pool)]
            if not pool:
                break
            ready = wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], timeout=0.5)
            now = time.monotonic()
            for w in list(pool):
                w.watch(timeout_s, now)
                lost = run.hear(w, ready, now, timeout_s)
                if lost is None:
                    continue
                run.bury(w, *lost)
                w.kill()
                pool.remove(w)
                run.heed_stop()
                place = placement.refill(w.place, sets, pool)
                if run.todo and place is not None:
                    pool.append(run.start(place))
    finally:
        for w in pool:
            w.kill()
    return run.never_started


class _Run:
    """What ``run_isolated`` keeps while it runs: the chunks to do and what a worker's news does to them."""

    def __init__(self, todo, sets, job, backend_spec, on_row, crash_row, stop, startup_timeout_s):
        self.todo, self.sets, self.job, self.backend_spec = todo, sets, job, backend_spec
        self.on_row, self.crash_row, self.stop, self.startup_timeout_s = on_row, crash_row, stop, startup_timeout_s
        self.never_started = []

    def start(self, place) -> Worker:
        return Worker(self.job, self.startup_timeout_s, place)

    def heed_stop(self):
        """Once ``stop()`` says so, the chunks waiting are set aside: none of them starts."""
        if self.stop is not None and self.stop():
            self.never_started.extend(case for chunk in self.todo for case in chunk)
            self.todo.clear()

    def requeue(self, cases, like=None):
        """Cases whose rows died with a worker run again, one per chunk: should one of them be what
        killed it while comparing, it is found on its own.  A rerun's cases stay reruns (``like``)."""
        if isinstance(like, placement.Rerun):
            self.todo[:0] = [placement.Rerun([c], like.origin, like.after) for c in cases]
        else:
            self.todo[:0] = [[c] for c in cases]

    def hear(self, w: Worker, ready, now: float, timeout_s: float):
        """Take in what ``w`` sent; ``(status, reason)`` when it has to go (status None: it lost its
        device and said which case, ``bury``), else None."""
        kind = None
        if w.conn in ready:
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                kind, payload = "died", None
            rows = placement.deliver(self.on_row, w.place, w.chunk)
            if kind == "ready":
                w.ready, w.deadline = True, None
            elif kind == "rows":
                got, w.cache = payload
                for row in got:
                    rows(row)
                w.chunk, w.holds, w.deadline = None, 0, None
                w.place.deaths = 0
            elif kind == "cache":
                w.cache_emptied(payload)
            elif kind == "lost":      # a sticky CUDA error: that case crashed (if known), the rest run again
                return "lost", payload
            elif kind == "bad_input":
                raise InputError(payload)
            dead = kind == "died"
        else:
            dead = w.proc.sentinel in ready and not w.proc.is_alive()
        if dead:
            w.proc.join(timeout=5)
            if not w.ready:
                return self.not_started(w, f"worker failed to start ({_death_reason(w.proc)})")
            return Status.CRASH, _death_reason(w.proc)
        if w.deadline is not None and now > w.deadline:
            if not w.ready:
                return self.not_started(w, f"worker did not start within {self.startup_timeout_s:g} s")
            return Status.TIMEOUT, f"no result within {timeout_s:g} s; worker killed"
        return None

    def not_started(self, w: Worker, why: str):
        """A worker that could not start: bad input on the only GPU left, else its GPU is out of the run."""
        if len(self.sets) == 1 or not any(s is not w.place for s in placement.live(self.sets)):
            raise InputError(f"backend '{self.backend_spec}': {why}")
        if w.place.lost is None:
            placement.drop(w.place, why)
        return "gone", why

    def bury(self, w: Worker, status, reason):
        """Record or requeue the chunk of a worker that has to go."""
        chunk, rows = w.chunk, placement.deliver(self.on_row, w.place, w.chunk)
        w.chunk = None
        if status == "gone" or chunk is None:
            return
        context_lost = status == "lost"
        if context_lost:
            index, row = reason
            reason = (row or {}).get("reason") or "CUDA context lost"
        if status in ("lost", Status.CRASH) and placement.moves_elsewhere(chunk, w.place, self.sets):
            self.todo[:0] = placement.move(chunk, w.place, reason)
            placement.check_lost(w.place, self.sets, reason)
            return
        if status in ("lost", Status.CRASH):
            placement.forgive(chunk, w.place)
        if context_lost:
            if index is not None:
                rows(row)
            self.requeue([c for i, c in enumerate(chunk) if i != index], chunk)
            return
        w.chunk = chunk
        case, others = w.in_hand()
        if case is None and len(others) == 1:       # died comparing a chunk of one: that case
            case, others, reason = others[0], [], f"{reason} while comparing"
        if case is not None:
            row = self.crash_row(case, status, reason)
            if w.place.placement is not None and isinstance(row.get("env"), dict) and row["env"].get("gpu"):
                row["env"] = {**row["env"], "gpu": w.place.placement["name"]}    # built here, not on its GPU
            rows(row)
        self.requeue(others, chunk)
