"""Run cases against a backend and record one result row per case.

Per case: ask the backend whether it supports the case; build the inputs; check
the block table (no kernel ever sees an invalid one); run the kernel *before*
the oracle, so memory the oracle reuses cannot hide a bug; compare, together with
the other cases of its chunk (``chunk.py``); append the rows to the results file
as each chunk finishes.  What is done with a case's inputs is its scenario
(``harness/scenarios/``).
"""

import functools
import time

import torch

from ..phases import KERNEL
from ..planning.cases import Case
from ..recording.outcome import Outcome, result_row
from ..recording.results import ResultsWriter
from ..recording.status import Status, gates
from . import chunk, isolation, placement, resources, warm_up
from .built_variants import Memo
from .chunk import run_chunk
from .circuit_breaker import MAX_TIMEOUTS, CircuitBreaker, timeout_limit  # noqa: F401  (``run``'s options)
from .memory_gate import MemoryGate
from .run_summary import RunSummary
from .worker_pool import WorkerPool


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def precheck(case: Case, backend, device: str, available: int | None = None, measured: str | None = None):
    """The outcome of a case that is not run here (the backend refuses it, it does not fit, or the
    backend's own check raised), or None to run it.  ``available``: memory measured once for a run."""
    try:
        reason = backend.unsupported_reason(case, device)
    except Exception as e:   # a plug-in's broken capability check is its error, on this case
        e.args = (f"unsupported_reason() raised {type(e).__name__}: {e}",)
        return Outcome.raised(KERNEL, e)
    reason = reason or resources.too_large_reason(case, device, available, measured=measured,
                                                  capabilities=backend.capabilities)
    return None if reason is None else Outcome.unsupported(reason)


def run_case(case: Case, backend, backend_spec: str, device: str) -> dict:
    """Check and run one case and return its result row.  Bad input raises ``InputError``."""
    refused = precheck(case, backend, device)
    if refused is not None:
        return result_row(case, backend, backend_spec, device, refused).to_json()
    return run_chunk([case], backend, backend_spec, device)[0]


def run_cases(cases: list[Case], backend, backend_spec: str, device: str, writer: ResultsWriter,
              skip_ids: set | None = None, progress: bool = True, workers: int = 0,
              timeout_s: float = 300.0, summary: RunSummary | None = None,
              row_extra: dict | None = None, chunk_cases: int = chunk.CHUNK_CASES,
              memory: tuple[int, str] | None = None, max_timeouts: int = MAX_TIMEOUTS,
              sets: list | None = None, pool: WorkerPool | None = None, warm: bool = False, drained=None,
              halt=None, built: Memo | None = None, more=None) -> RunSummary:
    """Run cases and write each row as it finishes.

    ``workers == 0`` runs in this process; otherwise kernels run in that many
    worker processes (``isolation.py``), so a crash or hang costs one case.
    Cases the backend does not support are recorded here without a worker.  Up to
    ``chunk_cases`` cases are compared together (``chunk.py``); 1 runs each case alone.
    ``memory``: ``resources.available_bytes`` as the caller measured it before any worker of this run touched
    the device (a worker's context counts as used; ``shared_budget`` allows for it).  Without it the run
    measures, once the workers of earlier runs and any spare told another job are gone.
    After ``max_timeouts`` timeouts in a row the cases not yet started are recorded as ``timeout``
    without being run (``CircuitBreaker``; 0 runs every case whatever happens).
    ``sets``: a ``placement.WorkerSet`` per GPU (``run --gpus``), ``workers`` processes each, each gated by
    its GPU's memory; a case must fit the GPU with the least.  Without, one set on the default device.
    ``pool``: the invocation's ``WorkerPool`` (its spares); without, one of this call's, closed at its end.
    ``warm``: run the first case of each variant the backend's JIT compiles (``compiled_per``) first, each alone,
    the rest once they are all done (``warm_up``), but those ``built`` names (``built_variants``), where it notes.
    ``drained``, ``halt``: for backends run side by side (``overlap``; ``isolation.run_isolated``).
    ``more()``: the next cases, asked for each time every chunk is handed out and a worker waits, until it gives
    None (a campaign's rounds streamed to the same workers, ``fuzz``); they are planned as ``cases`` are.
    """
    if pool is None:
        with WorkerPool() as own:
            return run_cases(cases, backend, backend_spec, device, writer, skip_ids, progress, workers, timeout_s,
                             summary, row_extra, chunk_cases, memory, max_timeouts, sets, own, warm, drained, halt,
                             built, more)
    todo = [c for c in cases if c.id not in (skip_ids or set())]
    summary = RunSummary() if summary is None else summary
    started = time.perf_counter()
    rec = _Recorder(backend, backend_spec, device, writer, summary, row_extra, len(todo), progress,
                    CircuitBreaker(max_timeouts))
    if memory is None:
        pool.stop_spares()      # spares and earlier workers with a device context of their own
        memory = resources.available_bytes(device)
    sets = sets or [placement.WorkerSet()]
    summary.workers = max(summary.workers, workers * len(sets))
    first, chunks, plan_more = _plan(todo, rec, memory, sets, max(workers, 1), chunk_cases,
                                     backend.compiled_per if warm else (), built.built(backend) if built else set())
    if workers:
        never_run = isolation.run_isolated(first or chunks, backend_spec, device, rec.record, rec.lost_row,
                                           run_chunk, workers=workers, timeout_s=timeout_s,
                                           stop=lambda: rec.breaker.tripped, sets=sets, pool=pool,
                                           later=chunks if first else (), on_release=rec.warmed,
                                           waits_on=warm_up.waits_on([c for chunk in first for c in chunk],
                                                                     backend.compiled_per),
                                           drained=drained, halt=halt, feed=_feed(more, plan_more, rec))
        rec.warmed()          # where every case was a variant's first, nothing was held back to release
    else:
        never_run = _in_this_process(first, chunks, _feed(more, plan_more, rec), rec, sets[0])
    for case in never_run:
        rec.record(rec.lost_row(case, Status.TIMEOUT, rec.breaker.reason()))
    rec.finish(built)
    summary.add_span(started, time.perf_counter())
    return summary


class _Recorder:
    """Where a backend's rows go: the results file, the summary, the progress bar and the breaker."""

    def __init__(self, backend, backend_spec, device, writer, summary, row_extra, total, progress, breaker):
        from tqdm import tqdm
        self.backend, self.backend_spec, self.device = backend, backend_spec, device
        self.writer, self.summary, self.row_extra, self.breaker = writer, summary, row_extra, breaker
        self.bar = tqdm(total=total, desc=f"{backend.name}", unit="case", disable=not progress,
                        dynamic_ncols=True, mininterval=0.5)
        self.not_passed = 0
        self.started = time.perf_counter()
        self.warm_ids = {}            # the first case of each kernel variant (``warm_up``): its variant's key
        self.warm_done = False
        self.built_now = set()        # the keys of the variants whose first case ran its kernel to an answer

    def warming(self, cases, fields: tuple):
        """The first cases of each variant run now, alone: the bar says so until ``warmed``."""
        self.warm_ids = {c.id: warm_up.variant_key(c, fields) for c in cases}
        self.bar.set_description_str(f"{self.backend.name} warm-up ({len(cases)} variant(s))")

    def finish(self, built):
        """The bar closed, and the variants built now noted under the cache root (``built``, if any)."""
        if built is not None:
            built.note(self.backend, self.built_now)
        self.bar.close()

    def warmed(self):
        """Every variant's first case is done: the warm-up's wall time is the summary's, the rest fan out."""
        if self.warm_ids and not self.warm_done:
            self.warm_done = True
            self.summary.add_span(self.started, time.perf_counter(), warm_up=True)
            self.summary.warm_up_cases += len(self.warm_ids)
            self.bar.set_description_str(self.backend.name)

    def record(self, row: dict):
        self.breaker.see(row)
        if self.summary.first_row is None and row.get("phase_ms"):
            self.summary.first_row = time.perf_counter()
        row.update(self.row_extra or {})
        if row["case_id"] in self.warm_ids:
            row["warm_up"] = True       # its kernel time holds the variant's build
            if row["status"] in (Status.PASS, Status.FAIL):
                self.built_now.add(self.warm_ids[row["case_id"]])
        t0 = time.perf_counter()
        self.writer.write(row)
        self.summary.io_seconds += time.perf_counter() - t0
        self.summary.rows.append(row)
        self.not_passed += gates(row["status"])
        self.bar.set_postfix_str(f"not passed {self.not_passed}", refresh=False)
        self.bar.update(1)

    def row(self, case, outcome, gpu: str | None = None) -> dict:
        return result_row(case, self.backend, self.backend_spec, self.device, outcome, gpu=gpu).to_json()

    def lost_row(self, case, status: str, reason: str, gpu: str | None = None) -> dict:
        """The row of a case whose worker died or hung (``gpu``: the one it ran on, ``isolation``)."""
        return self.row(case, Outcome.lost(Status(status), reason), gpu)


def _plan(todo, rec: _Recorder, memory, sets, workers: int, chunk_cases: int, compiled_per: tuple, built: set):
    """The chunks to run: cases refused here recorded at once, each set's memory gate built, and the
    rest planned into chunks no larger than the machine can give all workers' chunks at once: the first case
    of each variant of ``compiled_per`` not ``built`` alone, in chunks of their own, and the rest; and how
    cases asked for later are planned (``more``)."""
    backend, device = rec.backend, rec.device
    available, measured = memory      # once: a verdict must not depend on the moment
    available, measured = _least(sets, available, measured)
    runnable = [case for case in todo if not _refused(case, rec, available, measured)]
    cost = functools.partial(resources.chunk_bytes, capabilities=backend.capabilities)
    for s in sets:
        s.memory = MemoryGate(cost, _set_budget(device, s, available, workers, len(sets)))
    budget = min(s.memory.budget for s in sets)
    first, rest = warm_up.first_of_each(runnable, compiled_per, built)
    if first:
        rec.warming(first, compiled_per)
    plan = functools.partial(chunk.plan, max_bytes=min(chunk.chunk_budget(device), budget), cost=cost)

    def plan_rest(cases):
        return plan(cases, max_cases=min(chunk_cases, spread(len(cases), workers * len(sets))))

    def plan_more(cases):
        """Cases asked for later (``more``), refused or planned as the first ones, in the gates built here."""
        return plan_rest([case for case in cases if not _refused(case, rec, available, measured)])
    return plan(first, max_cases=1), plan_rest(rest), plan_more


def _refused(case, rec: _Recorder, available: int, measured: str) -> bool:
    """Whether ``case`` is not run here (``precheck``): then its row is recorded now."""
    refused = precheck(case, rec.backend, rec.device, available, measured)
    if refused is not None:
        rec.record(rec.row(case, refused))
    return refused is not None


def _feed(more, plan_more, rec: _Recorder):
    """``more`` as the chunks ``run_isolated`` asks for, the breaker's tripping ending it; None without."""
    if more is None:
        return None

    def feed():
        cases = None if rec.breaker.tripped else more()
        if cases is None:
            return None
        rec.bar.total += len(cases)
        return plan_more(cases)
    return feed


def spread(cases: int, workers: int) -> int:
    """The most cases a chunk may hold so that ``cases`` give every one of ``workers`` a chunk.  A backend of
    few cases in chunks of ``CHUNK_CASES`` ran on a few workers, the rest idle: on a fresh H200, FlagGems'
    sparse prefill built a kernel for nearly every one of its 23 cases after the warm-up (its Triton kernel
    takes the sizes and the softmax scale as constants), all in one chunk, one after another, for 29 s."""
    return max(1, -(-cases // max(workers, 1)))


def _in_this_process(first, chunks, feed, rec: _Recorder, place) -> list:
    """``--workers 0``: the variants' first cases, then the rest, then what ``feed`` gives; the cases never run."""
    never_run = _run_here(first, rec, place)
    rec.warmed()
    never_run += _run_here(chunks, rec, place)
    while feed is not None and (more := feed()) is not None:
        never_run += _run_here(more, rec, place)
    return never_run


def _run_here(chunks, rec: _Recorder, place) -> list:
    """``--workers 0``: every chunk in this process; returns the cases the breaker kept from running."""
    never_run = []
    for cases_together in chunks:
        if rec.breaker.tripped:
            never_run.extend(cases_together)
            continue
        for row in run_chunk(cases_together, rec.backend, rec.backend_spec, rec.device):
            if place.placement is not None:
                row["placement"] = place.placement
            rec.record(row)
    return never_run


def _least(sets, available: int, measured: str) -> tuple[int, str]:
    """The memory a case must fit: the least any GPU of the run has (it may run on any of them)."""
    for s in sets:
        if s.available is not None and s.available < available:
            available = s.available
            measured = f"{available / resources.GiB:.1f} GiB free on {s.name}, the run's GPU with the least"
    return available, measured


def _set_budget(device: str, place, available: int, workers: int, count: int) -> int:
    """What one set's workers may hold at once: its own GPU's memory; on the CPU, where every set shares
    the host's RAM (pretend GPUs, ``gpus.FAKE_ENV``), a share of it."""
    budget = resources.shared_budget(device, place.available if place.available is not None else available, workers)
    return budget if device == "cuda" else budget // count
