"""Worker sets, one per GPU, and what happens to a GPU's cases when its worker dies (``run --gpus``).

Each set has its workers pinned to one GPU (``worker_process.serve``) and a memory gate of its own, so
a chunk is admitted beside what that GPU's workers hold, never another's.  A worker that dies, or
loses its CUDA context, on a run over several GPUs charges none of its cases at once: each runs again
alone, on another GPU (``Rerun``), and its row says why (``rerun_after: "gpu 2 lost: ..."``).  A case
that kills its worker there too is the kernel's crash, charged as on one GPU, and the GPUs' deaths are
forgiven.  A GPU whose workers die ``LOST_AFTER`` times in a row without a row in between, or
whose worker cannot start, is out of the run; its cases go to the others.  On one GPU (one set)
nothing here changes what isolation does.
"""

import sys
from dataclasses import dataclass

LOST_AFTER = 2      # deaths in a row on one GPU, none of them forgiven, that take it out of the run


@dataclass(eq=False)
class WorkerSet:
    pin: str | None = None            # CUDA_VISIBLE_DEVICES of its workers; None: the default device
    placement: dict | None = None     # what its rows record (``gpus.Gpu.placement``)
    available: int | None = None      # free bytes measured on its GPU, for its memory gate
    memory: object = None             # its ``memory_gate.MemoryGate``
    deaths: int = 0                   # workers lost in a row, no row between
    lost: str | None = None           # why it is out of the run

    @property
    def name(self) -> str:
        return f"gpu {self.placement['gpu']}" if self.placement else "the device"


class Rerun(list):
    """One case again, after its worker died on ``origin``'s GPU: run elsewhere, its row says so."""

    def __init__(self, cases, origin: WorkerSet, after: str):
        super().__init__(cases)
        self.origin, self.after = origin, after


def live(sets) -> list[WorkerSet]:
    return [s for s in sets if s.lost is None]


def may_run(chunk, place: WorkerSet, sets) -> bool:
    """A rerun goes anywhere but where it died, unless no other GPU is left."""
    if not isinstance(chunk, Rerun) or chunk.origin is not place:
        return True
    return not any(s is not place for s in live(sets))


def moves_elsewhere(chunk, place: WorkerSet, sets) -> bool:
    """Whether the cases of a chunk whose worker died on ``place`` run again elsewhere rather than
    being charged: on a run over several GPUs, a first death, with another GPU left to run them."""
    return not isinstance(chunk, Rerun) and any(s is not place for s in live(sets))


def move(cases, place: WorkerSet, reason: str) -> list[Rerun]:
    """The reruns of a dead worker's cases, one per chunk; the death counts against its GPU."""
    place.deaths += 1
    return [Rerun([c], place, f"{place.name} lost: {reason}") for c in cases]


def forgive(chunk, place: WorkerSet):
    """A rerun that killed its worker again: the case, not either GPU, is at fault."""
    place.deaths = 0
    if isinstance(chunk, Rerun):
        chunk.origin.deaths = 0


def check_lost(place: WorkerSet, sets, reason: str) -> bool:
    """Take ``place`` out of the run once its workers have died ``LOST_AFTER`` times in a row,
    while another GPU is left; says so on stderr.  True when it was taken out now."""
    if place.lost is not None or place.deaths < LOST_AFTER or not any(s is not place for s in live(sets)):
        return False
    drop(place, f"{place.deaths} workers died on it in a row (last: {reason})")
    return True


def drop(place: WorkerSet, why: str):
    place.lost = why
    print(f"mla-verify: {place.name} lost: {why}; its cases run on the other GPUs", file=sys.stderr)


def refill(place: WorkerSet, sets, pool) -> WorkerSet | None:
    """Where a worker that had to go is replaced: on its own GPU while that is in the run, else on
    the GPU in the run with the fewest workers; None when none is left."""
    if place.lost is None:
        return place
    left = live(sets)
    if not left:
        return None
    return min(left, key=lambda s: sum(w.place is s for w in pool))


def uncovered(todo, sets, pool) -> list[WorkerSet]:
    """Sets to start a worker on, so that every chunk waiting has a worker that may take it: after
    deaths, the only workers left may be on the GPU a rerun must avoid.  At most one set."""
    runners = {w.place for w in pool if w.place.lost is None}
    for chunk in todo:
        if not any(may_run(chunk, s, sets) for s in runners):
            able = [s for s in live(sets) if may_run(chunk, s, sets)]
            return [min(able, key=lambda s: sum(w.place is s for w in pool))] if able else []
    return []


def deliver(on_row, place: WorkerSet | None, chunk):
    """``on_row`` for the rows of ``chunk`` run on ``place``: each row says which GPU ran it, and a
    rerun why it ran again."""
    def deliver_row(row: dict):
        if place is not None and place.placement is not None:
            row["placement"] = place.placement
        if isinstance(chunk, Rerun):
            row["rerun_after"] = chunk.after
        on_row(row)
    return deliver_row
