"""A fuzz campaign: the corpus replayed first, then rounds of drawn cases, the rounds of one engine profile
streamed through one ``runner.run_cases`` call (``stream``: the workers, isolation, checks and results file of
``run``); a failure with a signature not seen yet is shrunk (``shrink``) and kept in the corpus (``corpus``).

Shrink candidates run in one worker process per step (``--workers 0``: in this process), never in the
results file: only the campaign's own rows are written there.
"""

import dataclasses
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..backends.base import Feature
from ..recording.status import Status
from ..running.backend_loader import load_backend
from ..running.chunk import run_chunk
from ..running.run_summary import RunSummary
from ..running.runner import run_cases
from ..running.worker_process import worker_job
from . import corpus
from .draw import draw_case
from .profiles import round_specs, spec_for_round
from .progress import Progress, case_size
from .shrink import SUITE_SEEDS, Shrunk, shrink, sizes_line
from .signature import describe, signature
from .space import Bounds
from .stream import Stream

ROUND_CASES = 32      # drawn cases a block: each block runs on its index's engine profile (``profiles``)


@dataclass
class Settings:
    backend_spec: str
    device: str
    seed: int
    cases: int | None            # drawn cases to run; None: until ``seconds`` have passed
    seconds: float | None
    bounds: Bounds
    corpus_dir: str
    workers: int                 # per worker set, as ``run`` settles it
    sets: list
    timeout_s: float
    chunk_cases: int


@dataclass
class Found:
    """A signature the campaign met: the first case that showed it, and what shrinking made of it."""
    sig: tuple
    case: object
    spec: str                      # the backend spec it failed on (its engine profile, where it has one)
    shrunk: Shrunk | None = None
    kept: Path | None = None
    existed: bool = False          # the corpus had this shrunk case already
    confirmed: bool | None = None  # its file, loaded and run alone, failed the same way
    corpus: bool = False           # shown by a case replayed from the corpus (not shrunk again)
    cases: int = 0
    note: str = ""


@dataclass
class Round:
    """A round's cases and the engine-profile spec they run on; a drawn round's rerun lines by case id."""
    cases: list
    spec: str
    drawn: bool
    reruns: dict = field(default_factory=dict)     # case id -> (index, rerun line)


class Collect:
    """A results writer that keeps its rows (a shrink's candidates are not the campaign's rows)."""

    def __init__(self):
        self.rows = []

    def write(self, row):
        self.rows.append(row)


def _joined(blocks: list) -> Round:
    """Drawn blocks of one spec as one round."""
    return Round([c for b in blocks for c in b.cases], blocks[0].spec, drawn=True,
                 reruns={k: v for b in blocks for k, v in b.reruns.items()})


@dataclass
class _CampaignRows:
    """The results file, as the campaign writes it: a drawn case's rerun line is the campaign that draws
    it (a drawn case has no suite file), and each row moves the progress line."""
    writer: object
    progress: Progress
    reruns: dict = field(default_factory=dict)     # case id -> (index, rerun line)

    def write(self, row):
        if row["case_id"] in self.reruns:
            index, line = self.reruns[row["case_id"]]
            row.update(rerun=line, fuzz={"index": index})
        self.writer.write(row)
        self.progress.row(row)


class Campaign:
    def __init__(self, settings: Settings, backend, pool, memory, refused=None, progress: Progress | None = None):
        self.s, self.backend, self.pool, self.memory, self.refused = settings, backend, pool, memory, refused
        self.progress = progress or Progress()
        self.specs = round_specs(settings.backend_spec, backend)
        self.backends = {settings.backend_spec: backend}
        self.summary = RunSummary()
        self.found: dict[tuple, Found] = {}
        self.drawn = 0
        self.replayed = 0
        self.deadline = None          # where --time ends (``run``)

    def run(self, writer, replay: list) -> RunSummary:
        """The corpus's cases first, then drawn rounds until the cases or the time are spent: each stream of
        rounds run (``Stream``), then the new signatures it met shrunk."""
        rows = _CampaignRows(writer, self.progress)
        started = time.perf_counter()
        self.deadline = None if self.s.seconds is None else started + self.s.seconds    # shrinking stops there too
        self._warm(self.s.backend_spec if replay else spec_for_round(self.specs, self.s.seed, 0), self.s.workers,
                   [s.pin for s in self.s.sets])       # the first round's job loads while it is drawn
        upcoming = self.rounds(replay, started)
        batch = next(upcoming, None)
        while batch is not None:
            stream = Stream(self, batch, upcoming, rows)
            after = stream.run()
            for done, met in stream.met:
                self.shrink_new(done, met)
            batch = after or next(upcoming, None)
        self.progress.close()
        return self.summary

    @property
    def blocks_per_round(self) -> int:
        """Drawn blocks of ``ROUND_CASES`` run together as one round: as many as give every worker a chunk of
        ``run``'s size (``chunk_cases``; a chunk's cases are compared together).  Rounds of one spec stream
        through the same workers (``Stream``)."""
        return max(1, self.s.workers) * max(1, len(self.s.sets)) * max(1, self.s.chunk_cases // ROUND_CASES)

    def rounds(self, replay: list, started: float):
        """The campaign's rounds, each yielded when it is asked for (``--time`` is checked then): the corpus's
        cases first, then drawn blocks, up to ``blocks_per_round`` of one spec a round.  A block's spec (its
        engine profile) is its index's, so the cases and what each runs on are the seed's whatever the
        workers."""
        if replay:
            self.replayed = len(replay)
            yield Round(replay, self.s.backend_spec, drawn=False)
        group = []
        for block in self._blocks(started):
            if group and block.spec != group[0].spec:
                yield _joined(group)
                group = []
            group.append(block)
            if len(group) == self.blocks_per_round:
                yield _joined(group)
                group = []
        if group:
            yield _joined(group)

    def _blocks(self, started: float):
        """Blocks of ``ROUND_CASES`` drawn cases, each drawn while the rounds before run.  A draw is pure (the
        seed and the index); drawn in turn between rounds, with the workers idle meanwhile, the cases cost
        the campaign a millisecond or more each, several where the host's cores are shared out over other
        processes.  A round's worth is drawn ahead."""
        drawing = ThreadPoolExecutor(max_workers=1)
        ahead = deque(drawing.submit(self.draw_block, b * ROUND_CASES) for b in range(self.blocks_per_round))
        block = 0
        try:
            while self._more(started):
                indices, cases = ahead.popleft().result()
                ahead.append(drawing.submit(self.draw_block, (block + len(ahead) + 1) * ROUND_CASES))
                self.drawn += len(cases)
                yield Round(cases, spec_for_round(self.specs, self.s.seed, block), drawn=True,
                            reruns={c.id: (i, self.rerun_line(i)) for i, c in zip(indices, cases)})
                block += 1
        finally:
            drawing.shutdown(cancel_futures=True)      # the draws nobody will run are not waited for

    def draw_block(self, first: int) -> tuple[range, list]:
        """The block of drawn cases that starts at index ``first``: its indices and its cases."""
        count = ROUND_CASES if self.s.cases is None else min(ROUND_CASES, self.s.cases - first)
        indices = range(first, first + count)      # empty once the count is drawn
        return indices, [self.draw(i) for i in indices]

    def _more(self, started: float) -> bool:
        if self.s.cases is not None:
            return self.drawn < self.s.cases
        return time.perf_counter() - started < self.s.seconds

    def draw(self, index: int):
        b = self.backend
        return draw_case(self.s.seed, index, self.s.bounds, dense=b.supports(Feature.DENSE),
                         sparse=b.supports(Feature.SPARSE), refused=self.refused)

    def rerun_line(self, index: int) -> str:
        """The command that draws case ``index`` again: the campaign up to it."""
        bounds = "".join(f" --{k.replace('_', '-')} {v}" for k, v in dataclasses.asdict(self.s.bounds).items()
                         if v != getattr(Bounds(), k))
        return (f"mla-verify fuzz --backend {self.s.backend_spec} --device {self.s.device} --seed {self.s.seed} "
                f"--cases {index + 1}{bounds}")

    def backend_for(self, spec: str):
        if spec not in self.backends:
            self.backends[spec] = load_backend(spec)
        return self.backends[spec]

    def run_round(self, cases: list, spec: str, writer, summary: RunSummary, more=None):
        """A round's cases through ``run_cases``: run's workers, isolation, chunks and checks; ``more``, the
        rounds streamed after it (``Stream``)."""
        self._warm(spec, self.s.workers, [s.pin for s in self.s.sets])
        run_cases(cases, self.backend_for(spec), spec, self.s.device, writer, progress=False,
                  workers=self.s.workers, timeout_s=self.s.timeout_s, summary=summary,
                  chunk_cases=self.s.chunk_cases, memory=self.memory, sets=self.s.sets, pool=self.pool, more=more)

    def judge(self, batch: Round, round_rows: list):
        """A round's rows: each failure counted, and a new signature shrunk."""
        self.shrink_new(batch, self.count(batch, round_rows))

    def count(self, batch: Round, round_rows: list) -> list:
        """A round's failures counted; each signature first met here noted (``found``) and returned, with the
        smallest case that showed it (the quickest to shrink) and its row, for ``shrink_new``."""
        by_id = {c.id: c for c in batch.cases}
        new: dict[tuple, list] = {}
        for row in round_rows:
            sig = signature(row)
            if sig is None:
                continue
            case = by_id[row["case_id"]]
            self.progress.failed(case, sig)
            if sig in self.found:
                self.found[sig].cases += 1
            else:
                new.setdefault(sig, []).append((case_size(case), case.id, case, row))
        met = []
        for sig, failing in new.items():
            _, _, case, row = min(failing, key=lambda f: f[:2])
            self.found[sig] = Found(sig, case, batch.spec, corpus=not batch.drawn, cases=len(failing))
            met.append((sig, case, row))
        self.progress.round_done()
        return met

    def shrink_new(self, batch: Round, met: list):
        """The signatures a drawn round met first, shrunk (a corpus case replayed is not shrunk again)."""
        if not batch.drawn:
            return
        for sig, case, row in met:
            cases = self.found[sig].cases            # counted on by the rounds since
            self.found[sig] = self._shrunk(case, row, sig, batch.spec, batch.reruns[case.id][1])
            self.found[sig].cases = cases

    def _shrunk(self, case, row: dict, sig: tuple, spec: str, drawn_by: str) -> Found:
        """The failure shrunk, kept in the corpus, and its file run once more, alone."""
        found = Found(sig, case, spec)
        if row["status"] == Status.TIMEOUT:
            found.note = "a timeout is not shrunk: each rerun of it could take --timeout"
            return found
        found.shrunk = result = shrink(case, row, lambda cases: self.rerun(cases, spec), self.deadline)
        if result.case is None:
            found.note = (f"not shrunk: run as a suite file (its lengths written out, {SUITE_SEEDS} seeds) "
                          "it did not fail the same way; its failure hangs on the drawn values")
            return found
        notes = [f"mla-verify fuzz: {describe(sig)}", f"backend: {spec}; shrunk from {case.id}, "
                 f"drawn by: {drawn_by}", f"shrunk: {sizes_line(case, result.case)}"]
        loaded, found.existed = corpus.keep(self.s.corpus_dir, result.case, result.suite_seed,
                                            f"mla-verify fuzz: {describe(sig)} on {spec}", notes)
        found.kept = Path(loaded.suite_file)
        found.confirmed = signature(self.rerun([loaded], spec)[0]) == sig
        self.progress.failed(result.case, sig)
        return found

    def rerun(self, cases: list, spec: str) -> list[dict]:
        """Run shrink candidates, each alone (a crash costs its case only, ``isolation``), spread over the
        campaign's workers; their rows, in order."""
        ids = [f"fuzz-shrink/candidate/{k}" for k in range(len(cases))]
        workers = self.s.workers
        self._warm(spec, workers, [None])
        collect = Collect()
        run_cases([dataclasses.replace(c, id=i) for c, i in zip(cases, ids)], self.backend_for(spec), spec,
                  self.s.device, collect, progress=False, workers=workers, timeout_s=self.s.timeout_s,
                  chunk_cases=1, memory=self.memory, pool=self.pool)
        by_id = {r["case_id"]: r for r in collect.rows}
        return [by_id[i] for i in ids]

    def _warm(self, spec: str, workers: int, pins: list):
        """Spares for the coming call, and one more per set, loading while this call runs, for the next
        (a worker's start, its imports, is most of a small call's time)."""
        if not workers:
            return
        self.pool.start_spares(workers + 1, pins=pins)
        self.pool.load_in_spare(worker_job(spec, self.s.device, run_chunk, workers * len(pins)),
                                (workers + 1) * len(pins))
