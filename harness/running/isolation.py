"""Crash isolation: kernels run in worker processes, the parent keeps the results.

An illegal memory access, an abort or a hang in one case must not end the suite.  Each worker loads the backend once
and runs chunks of cases sent over a pipe (``chunk.run_chunk``, in ``worker_process.serve``); the parent writes
every row as it arrives.  Before each case the worker posts the case's index in a shared counter.  When a worker
dies in a case run alone, the parent knows which it was: that case is recorded as ``crash`` (or ``timeout``, for one
that overran and was killed).  The cases of a chunk of several do not wait for their kernels (``phases``), so a
fault there may surface in any later case: none is charged, and every case of the chunk runs again alone, in a fresh
worker, where the fault finds its own case. A crash costs one case; a row that reached the parent is never lost.  A
CUDA error is sticky (the context is unusable afterwards), so a worker that hits one reports it and exits to be
replaced.  What a worker writes to stderr goes into the rows of the chunk it was running, as ``worker_stderr``
(``worker_output``), not to the console.

This module is the event loop: each worker is in one ``worker.State``, moved as its news arrives. The processes come
from a ``worker_pool.WorkerPool`` (spares and retiring workers) and a chunk starts where ``memory_gate`` admits it.
"""

import time
from multiprocessing.connection import wait

from ..errors import InputError
from ..recording.status import Status
from . import placement
from .dispatch import hand_out
from .memory_gate import MemoryGate
from .worker import State, Worker
from .worker_output import attach
from .worker_pool import WorkerPool
from .worker_process import kill_worker, worker_job

__all__ = ["MemoryGate", "run_isolated"]


def run_isolated(chunks, backend_spec, device, on_row, crash_row, run_chunk, workers=1, timeout_s=300.0,
                 startup_timeout_s=300.0, memory: MemoryGate | None = None, stop=None, sets=None,
                 pool: WorkerPool | None = None, later=(), on_release=None, waits_on=None, drained=None,
                 halt=None, feed=None) -> list:
    """Run ``chunks`` (lists of cases) in ``workers`` processes; ``on_row(row)`` gets every row.

    ``run_chunk(cases, backend, spec, device, on_start=, context_lost=)`` runs in a worker (a
    module-level function, so it pickles by name); ``crash_row(case, status, reason, gpu=)`` builds the
    row of a case whose worker died or hung (``gpu``: the name of the GPU it ran on, or None).
    ``timeout_s`` bounds each case, not each chunk.
    Once ``stop()`` is true no chunk starts (those in flight finish); returns the cases never started.
    ``sets``: one ``placement.WorkerSet`` per GPU, ``workers`` processes each, each with its memory
    gate; without, one set on the default device gated by ``memory``.  ``pool``: the run's
    ``WorkerPool`` (its spares are used, its retiring workers are left to it); without, one of this call's.
    ``later``: chunks held back (``warm_up``): each until the rows of the cases ``waits_on(chunk)`` names (a set of
    case ids, all of ``chunks`` by default) are in; ``on_release()`` once every case of ``chunks`` has its row.
    ``drained()`` once every chunk is handed out (the next backend may start, ``overlap``); ``halt``: an event
    that, set, ends the run as a Ctrl-C does.  At most ``pool.limit`` workers of every backend work at once.
    ``feed()``: more chunks, asked for whenever every chunk is handed out and a worker waits, until it gives
    None (as it must once ``stop()`` is true); meanwhile no worker retires for want of a chunk (a stream of
    rounds, ``fuzz``).
    """
    if pool is None:
        with WorkerPool() as own:
            return run_isolated(chunks, backend_spec, device, on_row, crash_row, run_chunk, workers, timeout_s,
                                startup_timeout_s, memory, stop, sets, own, later, on_release, waits_on, drained,
                                halt, feed)
    sets = list(sets) if sets else [placement.WorkerSet(memory=memory)]
    for s in sets:
        s.memory = s.memory or MemoryGate()
    job = worker_job(backend_spec, device, run_chunk, workers * len(sets))
    run = _Run([list(c) for c in chunks if c], sets, job, backend_spec, on_row, crash_row, stop, startup_timeout_s,
               pool, feed)
    run.hold([list(c) for c in later if c], on_release, waits_on)
    working = []
    try:
        while True:
            if halt is not None and halt.is_set():
                raise KeyboardInterrupt
            run.heed_stop()
            run.release(working)
            run.refill(working)
            if not run.staff(working, workers * len(sets)):
                break
            run.assign(working)
            if drained is not None and not run.todo:      # held chunks wait without holding the next back
                drained()
            if not working:
                continue       # every place taken by another backend's workers (``staff`` waits for one)
            ready = wait([w.conn for w in working] + [w.proc.sentinel for w in working],
                         timeout=0.5 if len(working) == workers * len(sets) else 0.05)
            run.listen(working, ready, time.monotonic(), timeout_s)
    finally:
        for w in working:
            w.kill()
    return run.never_started


class _Run:
    """What ``run_isolated`` keeps while it runs: the chunks to do and what a worker's news does to them."""

    def __init__(self, todo, sets, job, backend_spec, on_row, crash_row, stop, startup_timeout_s, pool, feed=None):
        self.todo, self.sets, self.job, self.backend_spec = todo, sets, job, backend_spec
        self.on_row, self.crash_row, self.stop, self.startup_timeout_s = on_row, crash_row, stop, startup_timeout_s
        self.pool = pool
        self.never_started = []
        self.later, self.on_release = [], None     # held back until the rows they wait on are in (``release``)
        self.first, self.waits_on = set(), None    # the case ids of the chunks run first, not yet recorded
        self.staffed = False                       # the first workers started (``staff``)
        self.feed = feed                           # more chunks once these are handed out (``refill``)

    def hold(self, later: list, on_release, waits_on):
        """Hold ``later`` back: each chunk until the cases ``waits_on(chunk)`` names have their rows (by default
        every case handed out first)."""
        self.later, self.on_release = later, on_release
        if later or on_release is not None:
            self.first = {case.id for chunk in self.todo for case in chunk}
            self.waits_on = waits_on or (lambda chunk: self.first)
            recorded = self.on_row

            def on_row(row):
                self.first.discard(row["case_id"])
                recorded(row)
            self.on_row = on_row

    def start(self, place) -> Worker:
        return Worker(self.job, self.startup_timeout_s, place, self.pool)

    def staff(self, working: list, wanted: int) -> bool:
        """Workers started, up to ``wanted``: at once for every chunk, held ones included; where the pool has a
        limit (backends side by side, ``overlap``), whenever chunks that may start wait and a place is free,
        a held chunk's place being another backend's meanwhile.  Whether the run goes on: a worker at work,
        or chunks waiting for a place another backend will free."""
        side_by_side = self.pool.limit is not None
        startable = len(self.todo) + (0 if side_by_side else len(self.later))
        growing = side_by_side or not self.staffed or self.feed is not None    # a stream's later chunks too
        while len(working) < min(wanted, startable) and self.pool.may_start() and growing:
            working.append(self.start(self.sets[len(working) % len(self.sets)]))
        self.staffed = True
        if working or not (side_by_side and (self.todo or self.later) and self.pool.working):
            return bool(working)
        time.sleep(0.05)
        return True

    def refill(self, working: list):
        """Once every chunk is handed out and a worker waits for one, the next from ``feed`` (None: it is done; a
        feed heeds ``stop`` itself, as ``runner``'s does its breaker).  Not sooner: what ``feed`` gives is started,
        and a campaign's time checked there would be overrun by a whole round more."""
        if working and not any(w.idle() for w in working):
            return
        while self.feed is not None and not self.todo and not self.later:
            chunks = self.feed()
            if chunks is None:
                self.feed = None
            self.todo.extend(chunks or [])

    def heed_stop(self):
        """Once ``stop()`` says so, the chunks waiting are set aside: none of them starts."""
        if self.stop is not None and self.stop():
            self.never_started.extend(case for chunk in self.todo + self.later for case in chunk)
            self.todo.clear()
            self.later.clear()

    def release(self, working: list):
        """Each chunk held back once every case it waits on has its row (a crashed one's included), in order;
        ``on_release`` once every first case has."""
        waiting = []
        for chunk in self.later:
            (waiting if self.waits_on(chunk) & self.first else self.todo).append(chunk)
        self.later = waiting
        if not self.first and self.on_release is not None:
            self.on_release()
            self.on_release = None

    def assign(self, working: list):
        """Chunks to the idle workers of each GPU in the run; a lost GPU's idle workers retire; on several
        GPUs, a worker started where a waiting chunk has none that may take it.  While chunks are held back
        (``release``), an idle worker waits for them; backends side by side, it goes to another (``staff``)."""
        several, held = len(self.sets) > 1, bool(self.later) and self.pool.limit is None
        for s in placement.live(self.sets) if several else self.sets:
            hand_out(self.todo, working, s.memory, s, self.sets if several else (), held,
                     self.pool.working_beside(working, s.pin))
        for s in self.sets:            # a lost GPU's idle workers get nothing more
            if s.lost is not None:
                for w in [w for w in working if w.place is s and w.idle()]:
                    w.retire()
                    working.remove(w)
        if several:
            working += [self.start(s) for s in placement.uncovered(self.todo, self.sets, working)]

    def listen(self, working: list, ready, now: float, timeout_s: float):
        """Take in every worker's news; one that has to go is recorded, killed and replaced."""
        for w in list(working):
            w.watch(timeout_s, now)
            lost = self.hear(w, ready, now, timeout_s)
            if lost is None:
                continue
            self.bury(w, *lost)
            w.kill()
            working.remove(w)
            self.heed_stop()
            place = placement.refill(w.place, self.sets, working)
            if (self.todo or self.later) and place is not None:
                working.append(self.start(place))

    def requeue(self, cases, like=None):
        """Cases whose rows died with a worker run again, one per chunk: should one of them be what
        killed it while comparing, it is found on its own.  A rerun's cases stay reruns (``like``)."""
        if isinstance(like, placement.Rerun):
            self.todo[:0] = [placement.Rerun([c], like.origin, like.after) for c in cases]
        else:
            self.todo[:0] = [[c] for c in cases]

    def hear(self, w: Worker, ready, now: float, timeout_s: float):
        """Take in what ``w`` sent; ``(status, reason)`` when it has to go (status ``"lost"``: it lost its
        device and said which case, ``bury``), else None."""
        dead = w.proc.sentinel in ready and not w.proc.is_alive()
        if w.conn in ready:
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                kind, payload = "died", None
            if kind == "lost":      # a sticky CUDA error: that case crashed (if known), the rest run again
                return "lost", payload
            self.take(w, kind, payload)
            dead = kind == "died"
        if dead:
            kill_worker(w.proc)      # before it is reaped: what it started dies with it (``kill_worker``)
            w.proc.join(timeout=5)
            if w.state is State.STARTING:
                last = [line for line in w.said().splitlines() if line.strip()][-1:]
                return self.not_started(w, f"worker failed to start ({w.death_reason()})"
                                        + "".join(f": {line.strip()}" for line in last))
            return Status.CRASH, w.death_reason()
        if w.deadline is not None and now > w.deadline:
            if w.state is State.STARTING:
                return self.not_started(w, f"worker did not start within {self.startup_timeout_s:g} s")
            return Status.TIMEOUT, f"no result within {timeout_s:g} s; worker killed"
        return None

    def take(self, w: Worker, kind: str, payload):
        """A message from a live worker: it is ready, a chunk's rows, or its cache emptied."""
        if kind == "ready":
            w.started()
        elif kind == "rows":
            got, cache = payload
            said = w.said()       # what it wrote while it ran the chunk: any of its cases may have
            deliver = placement.deliver(self.on_row, w.place, w.chunk)
            for row in got:
                deliver(attach(row, said))
            w.chunk_done(cache)
            w.place.deaths = 0
        elif kind == "cache":
            w.cache_emptied(payload)
        elif kind == "bad_input":
            raise InputError(payload)

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
        said = w.said()           # its last words, for the row of the case it died in
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
                rows(attach(row, said))
            self.requeue([c for i, c in enumerate(chunk) if i != index], chunk)
            return
        w.chunk = chunk
        case, others = w.in_hand()
        if case is None and len(others) == 1:       # died comparing a chunk of one: that case
            case, others, reason = others[0], [], f"{reason} while comparing"
        if case is not None:       # built here, not on its GPU: the row names the GPU it ran on
            gpu = None if w.place.placement is None else w.place.placement["name"]
            rows(attach(self.crash_row(case, status, reason, gpu=gpu), said))
        self.requeue(others, chunk)
