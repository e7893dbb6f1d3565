"""Cases in chunks: each case's kernel runs on its own, the chunk's oracles and comparisons together.

A case of the ``call`` (or ``sparse``) scenario is built and launched on its own; its answer then waits for
the rest of its chunk, and one ``verdicts`` call runs the oracles still to run (after every kernel
of the chunk; an answer without a short request got its oracle right after its own kernel, see
``scenarios._common.expect``) and compares them with one device-to-host transfer for the chunk
(``compare.check_batches``).  Small cases spend most of their time in the host work of many tiny launches;
sharing the oracle's and the comparison's launches is what makes them cheap.  A case's numbers are
the same in any chunk (``reference/batched.py``, ``compare.check_tensors``), and a chunk of one is
how a single case runs, so there is one path.

A ``sparse`` case (``scenarios/sparse.py``) takes the same path with its own inputs, oracle and
judging: ``scenarios.verdicts`` hands each answer to its scenario's judging, a chunk's sparse answers
together.  Other scenarios (several calls per case, their own checks) run whole, one case at a time,
in the order the chunk gives them.
"""

import sys
import time

import torch

from reference.batched import SHARED_MAX_KEYS

from .. import scenarios
from ..backends.process_state import as_imported_by
from ..building.inputs import cache_seqlens_for, draw_seq_lens
from ..errors import InputError, RejectedOutput, Unsupported
from ..interrupts import is_the_codes_own
from ..phases import PhaseClock, PhaseError
from ..planning.cases import Case
from ..recording.outcome import Outcome, result_row
from . import resources

# Cases a chunk may hold: fewer chunks are fewer waits.  On the H200 (docs/archive/gpu-runs-history.md) the upstream
# matrix ran at 363-367 cases/s with 32 and 385 with 64 in one call (4 workers); a later call's runs (360-385)
# put that within the spread between runs.  The byte budget below still bounds a chunk.
CHUNK_CASES = 64
# The estimated peak bytes of a chunk (resources.chunk_bytes): its answers wait for one compare.  On the CPU a
# chunk's fresh memory is paid for in page faults: make verify's suites took 24-26 s on 2 cores with 2 GiB
# chunks and 34-39 s with 8 GiB, most of the difference system time.
CHUNK_BYTES = {"cuda": 8 << 30, "cpu": 2 << 30}


def chunk_budget(device) -> int:
    return CHUNK_BYTES.get(torch.device(device).type, CHUNK_BYTES["cpu"])


def shape_order(case: Case) -> tuple:
    """Cases whose oracle requests can share blocks (``reference/batched.py``) sort together: short
    cases first (a long one fills a chunk's memory alone), then by shape.  Sparse cases sort by what
    sizes their oracle and comparison (record format, topk, heads, rows), so a chunk's same-size tensors
    are compared in one group."""
    long = max(cache_seqlens_for(case, draw_seq_lens(case)), default=0) > SHARED_MAX_KEYS
    if case.scenario == "sparse":
        return (long, case.scenario, case.kv_format, case.topk, case.d_qk, case.heads, case.s_q, case.batch_size,
                case.page_size)
    return (long, case.scenario, case.dtype, case.d_qk, case.d_v, case.page_size, case.kv_heads, case.heads,
            case.s_q, case.batch_size)


def plan(cases: list[Case], max_cases: int = CHUNK_CASES, max_bytes: int = CHUNK_BYTES["cuda"],
         cost=resources.chunk_bytes) -> list[list[Case]]:
    """Cases sorted by shape (``shape_order``; otherwise in their order), then grouped while they are few
    and small enough (``cost``, estimated bytes) to wait together; a large case alone.  Rows are written
    in this order."""
    chunks, current = [], []
    for case in sorted(cases, key=shape_order):
        if current and (len(current) >= max_cases or cost(current + [case]) > max_bytes):
            chunks.append(current)
            current = []
        current.append(case)
    return chunks + ([current] if current else [])


def _guarded(step, case_id: str = "?"):
    """``(value, None)``, or ``(None, outcome)`` for what ``step()`` (of case ``case_id``) raised.  Bad input
    propagates."""
    try:
        return step(), None
    except InputError:
        raise
    except Unsupported as e:   # the kernel's API refused the input at call time: quote it
        return None, Outcome.unsupported((str(e) or type(e).__name__).splitlines()[0][:500])
    except RejectedOutput as e:   # the kernel answered with something no comparison can read
        return None, Outcome.judged([e.check], messages=[f"{case_id}: {e}"])
    except PhaseError as e:
        return None, Outcome.raised(e.phase, e.error)
    except BaseException as e:   # raised outside any phase: scenario glue, which is the harness's
        if not is_the_codes_own(e):
            raise
        return None, Outcome.raised("scenario", e)


class ContextLost(Exception):
    """A case left the device unusable (a sticky CUDA error): the chunk stops.  ``index`` is the case whose
    row says so, or None where the fault cannot be placed (a chunk whose cases did not wait for their
    kernels, ``waits`` in ``run_chunk``): then every case of the chunk runs again alone."""

    def __init__(self, index: int | None, row: dict):
        super().__init__(row.get("reason"))
        self.index, self.row = index, row


def run_chunk(cases: list[Case], backend, backend_spec: str, device: str, on_start=None,
              context_lost=None) -> list[dict]:
    """Run prechecked cases and return their rows, in order.

    ``on_start(i)`` is called before case ``i`` starts, and with ``len(cases)`` before the
    comparison (a worker reports it, so a crash is charged to the right case).
    ``context_lost(row)`` says whether a case's row means the device is lost; the chunk then
    raises ``ContextLost`` instead of running on in a dead context.

    A case alone waits for the device around its kernel, so a fault lands in its own phase; so do a
    chunk's cases when nobody could run them again (no ``context_lost``: run in this process).  Cases
    of a chunk in a worker do not wait (``phases``): the chunk's device work queues up, and a fault
    that loses the device is placed by running each case again alone.  ``waits`` says which, to
    every launch (``scenarios.start``).
    """
    as_imported_by(backend)      # another backend's package may have replaced a shared function here
    waits = len(cases) == 1 or context_lost is None
    clocks = [PhaseClock() for _ in cases]

    def check_device(i, row):
        if context_lost is not None and context_lost(row):
            raise ContextLost(i if waits else None, row)

    seconds = [0.0] * len(cases)             # each case's own time; a waiting one adds its share of the compare
    results = [None] * len(cases)            # an Outcome, or an Answer waiting for the compare
    for i, case in enumerate(cases):
        if on_start:
            on_start(i)
        t0 = time.perf_counter()
        with clocks[i]:
            result, failure = _guarded(lambda case=case: scenarios.start(case, backend, device, waits), case.id)
        seconds[i] = time.perf_counter() - t0
        results[i] = failure or result
        if isinstance(results[i], Outcome) and context_lost is not None:
            check_device(i, _row(case, backend, backend_spec, device, results[i], clocks[i], seconds[i]))
    if on_start:
        on_start(len(cases))
    waiting = [i for i, r in enumerate(results) if not isinstance(r, Outcome)]
    for i, (outcome, share_ms) in zip(waiting, _judge([results[i] for i in waiting], [clocks[i] for i in waiting])):
        results[i] = outcome
        seconds[i] += share_ms / 1e3
    rows = [_row(case, backend, backend_spec, device, results[i], clocks[i], seconds[i])
            for i, case in enumerate(cases)]
    for i, row in enumerate(rows):      # a context lost while comparing: no worker may run on in it
        check_device(i, row)
    return rows


def _judge(answers, clocks) -> list[tuple[Outcome, float]]:
    """Each answer's outcome and its milliseconds of oracle and comparing: together, or each alone if
    together raised (so the fault lands on its own case)."""
    if not answers:
        return []
    timing = {}
    judged, failure = _guarded(lambda: scenarios.verdicts(answers, timing))
    if failure is None:
        for clock in clocks:
            for name, ms in timing.items():
                clock.add(name, ms / len(answers))
        return [(outcome, sum(timing.values()) / len(answers)) for outcome in judged]
    # legitimate for memory (a chunk's comparison holds all its answers at once), a harness bug otherwise
    print(f"mla-verify: warning: comparing {len(answers)} cases together raised ({failure.reason}); "
          "comparing each alone", file=sys.stderr)
    alone = []
    for answer, clock in zip(answers, clocks):
        answer.reset()      # its oracle computed again, alone
        t0 = time.perf_counter()
        with clock:
            judged, failure = _guarded(lambda answer=answer: scenarios.verdicts([answer]))
        alone.append((failure or judged[0], (time.perf_counter() - t0) * 1e3))
    return alone


def _row(case, backend, backend_spec, device, outcome: Outcome, clock: PhaseClock, wall_s: float) -> dict:
    """The case's row, with its phases' times as the device took them (``reference_ms`` among them: the
    device's time for the oracle, not the host's for queueing it)."""
    return result_row(case, backend, backend_spec, device, outcome, wall_s, phase_ms=clock.read()).to_json()
