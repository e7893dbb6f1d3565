"""Crash isolation: kernels run in worker processes, the parent keeps the results.

An illegal memory access, an abort or a hang in one case must not end the
suite.  Each worker loads the backend once and runs cases sent over a pipe; the
parent writes every row as it arrives.  A worker that dies is recorded as
``crash`` for its case, one that overruns the timeout is killed and recorded
as ``timeout``, and a fresh worker carries on.  A CUDA error is sticky (the
context is unusable afterwards), so a worker that hits one reports the case as
``crash`` and exits to be replaced.
"""

import multiprocessing as mp
import signal
import time
from multiprocessing.connection import wait

from .checks import CRASH
from .errors import InputError
from .status import Status

STICKY_CUDA = ("CUDA error", "illegal memory access", "device-side assert", "AcceleratorError",
               "unspecified launch failure")


def _worker_main(conn, backend_spec, device, threads, run_case):
    from .backend_loader import load_backend
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the parent handles Ctrl-C
    import torch
    # the parent's thread count, whatever the number of workers: a CPU float64 reduction or matmul
    # splits its work over the threads, so another count gives other last bits in the metrics
    torch.set_num_threads(threads)
    try:
        backend = load_backend(backend_spec)
    except InputError as e:
        conn.send(("bad_input", str(e)))
        return
    conn.send(("ready", None))
    while True:
        job = conn.recv()
        if job is None:
            return
        case, release_memory = job
        try:
            row = run_case(case, backend, backend_spec, device)
            if release_memory and device == "cuda":
                torch.cuda.empty_cache()      # hand a large case's memory back for the other workers
        except InputError as e:
            conn.send(("bad_input", str(e)))
            return
        sticky = (device == "cuda" and row["status"] in (Status.ERROR, Status.HARNESS_ERROR)
                  and any(s in (row.get("reason") or "") for s in STICKY_CUDA))
        if sticky:
            row = {**row, "status": Status.CRASH.value, "reason": f"CUDA context lost: {row['reason']}",
                   "failed_checks": [CRASH]}
        conn.send(("row", row))
        if sticky:
            return


class Worker:
    def __init__(self, ctx, backend_spec, device, threads, run_case):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, backend_spec, device, threads, run_case),
                                daemon=True)
        self.proc.start()
        child.close()
        self.case = None
        self.deadline = None
        self.ready = False
        self.holds = 0            # the estimated bytes of the case in flight

    def send(self, case, timeout_s, holds: int):
        self.case, self.deadline, self.holds = case, time.monotonic() + timeout_s, holds
        self.conn.send((case, holds > MemoryGate.RELEASE_BYTES))

    def stop(self, kill=False):
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
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
    """Admits a case to a worker only while the cases in flight fit the device together.

    ``cost(case)`` estimates a case's peak bytes; ``budget`` is what all workers may hold at once.
    A case that fits nothing runs alone (its own fit was checked before the run).  A worker that
    ran a case over ``RELEASE_BYTES`` empties its allocator's cache afterwards.
    """

    RELEASE_BYTES = 1 << 30
    LOOKAHEAD = 64            # cases scanned for one that fits, past a large one that must wait

    def __init__(self, cost=None, budget: int = 0):
        self.cost, self.budget = cost, budget

    def pick(self, todo: list, in_flight: int) -> int | None:
        """The index in ``todo`` of the next case to start, or None to wait for memory."""
        if self.cost is None or not in_flight:
            return 0
        for i, case in enumerate(todo[:self.LOOKAHEAD]):
            if in_flight + self.cost(case) <= self.budget:
                return i
        return None


def run_isolated(cases, backend_spec, device, on_row, crash_row, run_case, workers=1, timeout_s=300.0,
                 startup_timeout_s=300.0, memory: MemoryGate | None = None):
    """Run ``cases`` in ``workers`` processes; ``on_row(row)`` gets every row, in completion order.

    ``run_case(case, backend, spec, device)`` runs one case in a worker (a module-level function, so
    it pickles by name); ``crash_row(case, status, reason)`` builds the row of a case whose worker
    died or hung.
    """
    ctx = mp.get_context("spawn")        # never fork a process that may hold a CUDA context
    memory = memory or MemoryGate()
    todo = list(cases)
    import torch
    threads = torch.get_num_threads()
    pool = [Worker(ctx, backend_spec, device, threads, run_case) for _ in range(min(workers, len(todo)) or 0)]
    for w in pool:
        w.deadline = time.monotonic() + startup_timeout_s
    try:
        while pool:
            for w in list(pool):
                if w.ready and w.case is None:
                    if not todo:
                        w.stop()
                        pool.remove(w)
                        continue
                    i = memory.pick(todo, sum(other.holds for other in pool if other.case is not None))
                    if i is not None:
                        case = todo.pop(i)
                        w.send(case, timeout_s, memory.cost(case) if memory.cost else 0)
            if not pool:
                break
            ready = wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], timeout=0.5)
            now = time.monotonic()
            for w in list(pool):
                replace = False
                if w.conn in ready:
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        kind, payload = "died", None
                    if kind == "ready":
                        w.ready, w.deadline = True, None
                    elif kind == "row":
                        on_row(payload)
                        w.case, w.holds = None, 0
                        replace = payload["status"] == Status.CRASH
                    elif kind == "bad_input":
                        raise InputError(payload)
                    if kind == "died":
                        replace = True
                        if w.case is not None:
                            w.proc.join(timeout=5)
                            on_row(crash_row(w.case, Status.CRASH, _death_reason(w.proc)))
                elif w.proc.sentinel in ready and not w.proc.is_alive():
                    replace = True
                    if w.case is not None:
                        on_row(crash_row(w.case, Status.CRASH, _death_reason(w.proc)))
                    elif not w.ready:
                        raise InputError(f"backend '{backend_spec}': worker failed to start "
                                         f"({_death_reason(w.proc)})")
                elif w.deadline is not None and now > w.deadline:
                    replace = True
                    if w.case is not None:
                        on_row(crash_row(w.case, Status.TIMEOUT, f"no result within {timeout_s:g} s; worker killed"))
                    else:
                        raise InputError(f"backend '{backend_spec}': worker did not start within "
                                         f"{startup_timeout_s:g} s")
                if replace:
                    w.stop(kill=True)
                    pool.remove(w)
                    if todo:
                        fresh = Worker(ctx, backend_spec, device, threads, run_case)
                        fresh.deadline = time.monotonic() + startup_timeout_s
                        pool.append(fresh)
    finally:
        for w in pool:
            w.stop(kill=True)
