"""The parent's handle on one worker process, with the one state it is in (``State``).

The event loop (``isolation``) moves a worker from state to state as it hears from it; what a
state allows is asked here (``idle``, ``may_hand_back``), never pieced together from flags.
"""

import enum
import signal
import time

from .worker_process import EMPTY_CACHE, NEXT_BACKEND, kill_worker

KEEP_WAIT_S = 30.0    # a kept worker's answer (its device settled, its cache emptied): a healthy one takes ms


class State(enum.Enum):
    STARTING = "starting"     # importing and loading its backend; no chunk yet
    IDLE = "idle"             # ready, and its allocator keeps nothing it could hand back
    CACHED = "cached"         # ready; its allocator keeps what its last chunk allocated
    BUSY = "busy"             # a chunk in flight
    EMPTYING = "emptying"     # told to empty its cache, reply not yet in
    RETIRING = "retiring"     # told to stop once idle; its exit is reaped later (``WorkerPool.reap``)
    DEAD = "dead"             # killed, or found dead


class WorkerState:
    """A worker's state and the memory it holds, and the messages each move sends (``post``)."""

    def __init__(self, place=None):
        self.place = place          # its worker set (``WorkerSet``), None: the only one
        self.state = State.STARTING
        self.chunk = None           # the chunk in flight (BUSY), kept while its death is recorded
        self.holds = 0              # the estimated bytes of the chunk in flight
        self.cache = 0              # the bytes its allocator held after its last chunk, as it reported

    def post(self, message):
        """Send ``message`` to the worker (a chunk, ``EMPTY_CACHE`` or None: stop)."""
        raise NotImplementedError

    def idle(self) -> bool:
        return self.state in (State.IDLE, State.CACHED)

    def may_hand_back(self) -> bool:
        """Whether it holds, or is about to report, memory that it could hand back: a chunk in flight,
        a kept cache, or a cache being emptied.  A worker that is starting or idle and empty does not."""
        return self.state in (State.BUSY, State.CACHED, State.EMPTYING)

    def footprint(self) -> int:
        """The device memory this worker may hold now.  A chunk in flight is counted beside the kept
        cache, not inside it: its blocks may be of other sizes than the cached ones."""
        return self.holds + self.cache

    def started(self):
        self.state = State.IDLE

    def send(self, chunk, holds: int):
        self.chunk, self.holds, self.state = chunk, holds, State.BUSY
        self.post(chunk)

    def chunk_done(self, cache: int):
        self.chunk, self.holds, self.cache, self.state = None, 0, cache, State.CACHED

    def empty_cache(self):
        self.state = State.EMPTYING
        self.post(EMPTY_CACHE)

    def cache_emptied(self, cache: int):
        self.cache, self.state = cache, State.IDLE

    def retire(self):
        """Tell an idle worker to stop and go on without waiting for it."""
        self.state = State.RETIRING
        self.post(None)


class Worker(WorkerState):
    """A worker process taken from ``pool`` (a spare, or a new one) and told ``job``."""

    def __init__(self, job: tuple, startup_timeout_s, place=None, pool=None):
        super().__init__(place)
        self.pool = pool
        worker = pool.worker_for(job, place.pin if place is not None else None)
        self.proc, self.conn, self.progress = worker.proc, worker.conn, worker.progress
        self.output = worker.output     # where its stderr goes (``worker_output``), None: to this process's
        self.seen = -1              # the progress last seen: the per-case deadline restarts when it moves
        self.deadline = time.monotonic() + startup_timeout_s
        pool.clock_in(self)

    def post(self, message):
        self.conn.send(message)

    def started(self):
        super().started()
        self.deadline = None

    def send(self, chunk, holds: int):
        self.progress.value = -1
        self.seen, self.deadline = -1, None
        super().send(chunk, holds)

    def chunk_done(self, cache: int):
        super().chunk_done(cache)
        self.deadline = None

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
        """An idle worker whose backend needs it no more: kept for the next backend where the pool keeps
        workers and it settles cleanly (``keep``); else told to stop, and not waited for (``WorkerPool.reap``)."""
        kept = self.pool.carry_over and self.keep()
        self.pool.clock_out(self)      # after ``keep``: the next backend finds it a spare, not a new process
        if kept:
            return
        try:
            super().retire()
        except (BrokenPipeError, OSError):
            pass
        self.pool.retire(self.proc)

    def keep(self) -> bool:
        """Hand this worker back to the pool as a spare for the next backend, once it says its device is
        settled; a worker that cannot say so is killed (reaped with the retiring ones)."""
        try:
            self.post(NEXT_BACKEND)
            kind, settled = self.conn.recv() if self.conn.poll(KEEP_WAIT_S) else (None, False)
        except (EOFError, OSError):
            kind, settled = None, False
        self.said()               # what it wrote while it settled belongs to no row
        if kind == "kept" and settled:
            self.state = State.RETIRING
            self.pool.keep(self.proc, self.conn, self.progress, self.output, getattr(self.place, "pin", None))
            return True
        kill_worker(self.proc)
        return False

    def kill(self):
        """End a worker that has to go (dead, hung, lost its device, or the run is over): a finished
        one retires instead (``retire``)."""
        self.pool.clock_out(self)
        self.state = State.DEAD
        kill_worker(self.proc)
        self.proc.join()

    def said(self) -> str:
        """What the worker wrote to stderr since last asked: its imports, a chunk, or its last moments."""
        return self.output.new_text() if self.output is not None else ""

    def death_reason(self) -> str:
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                return f"worker killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"
