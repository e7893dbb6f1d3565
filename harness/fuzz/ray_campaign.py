"""A fuzz campaign across the machines of a Ray cluster (``fuzz --ray``, docs/fuzz.md).

The driver is the single-machine campaign (``campaign.Campaign``) with its rounds run elsewhere: it draws
them as that campaign does (the same seed, the same cases, whatever the cluster's size; the draw's
question of whether a case would run is answered by an actor, on the device the cases run on), hands each
to whichever actor is free (``ray_cluster.Actors``), and writes the rows that come back into one results
file, round after round in the campaign's order, whatever order the rounds finish in.  It judges each
round as that campaign does; a new failure is shrunk here, each step's candidates run by the next actor
free while the others run the next rounds, and kept in the driver's ``--corpus``.

A round whose actor is lost runs again on another; its rows say so (``rerun_after``).  One that loses
``ray_cluster.LOSSES`` actors, or that no actor is left to run, is recorded as ``crash`` rows.
"""

import time

from ..recording.outcome import Outcome, result_row
from ..recording.status import Status
from .campaign import Campaign, Round, _CampaignRows
from .ray_cluster import Job


class RayCampaign(Campaign):
    # a block a round: the rounds are what the actors share out, and an actor's worker count is its own
    blocks_per_round = 1

    def __init__(self, settings, backend, actors, progress=None):
        super().__init__(settings, backend, pool=None, memory=None, refused=self._refused, progress=progress)
        self.actors = actors
        self.upcoming = None           # the rounds not yet drawn (``Campaign.rounds``)
        self.in_order: list[Job] = []  # the rounds handed out, in the campaign's order, not yet written

    def _refused(self, case) -> str | None:
        return self.actors.ask("refused", case)

    def _more(self, started: float) -> bool:
        return self.actors.alive() and super()._more(started)

    def run(self, writer, replay: list):
        """Rounds handed out while an actor is free; each written and judged once it and those before it
        are back."""
        rows = _CampaignRows(writer, self.progress)
        started = time.perf_counter()
        self.upcoming = self.rounds(replay, started)
        while True:
            self.actors.hand_out(self._next_round)
            while self.in_order and self.in_order[0].done:
                job = self.in_order.pop(0)
                self.judge(job.tag, self._write(job, rows))     # a shrink here keeps the actors busy
            if not self.in_order:
                break
            self.actors.wait()
        self.summary.seconds += time.perf_counter() - started
        self.progress.close()
        return self.summary

    def _next_round(self) -> Job | None:
        batch = next(self.upcoming, None)
        if batch is None:
            return None
        job = Job("run_round", (batch.cases, batch.spec), tag=batch)
        self.in_order.append(job)
        return job

    def _write(self, job: Job, rows: _CampaignRows) -> list[dict]:
        """A round's rows into the results file, in its cases' order."""
        batch: Round = job.tag
        round_rows = job.result if job.result is not None else self._lost_rows(batch.cases, batch.spec, job)
        rows.reruns = batch.reruns
        for row in round_rows:
            if job.losses and job.result is not None:
                row["rerun_after"] = "; ".join(job.losses)
            rows.write(row)
            self.summary.rows.append(row)
        return round_rows

    def rerun(self, cases: list, spec: str) -> list[dict]:
        """A shrink step's candidates, run by the first actor free (the others meanwhile get new rounds)."""
        job = Job("rerun", (cases, spec))
        self.actors.submit(job, first=True)
        while not job.done:
            self.actors.hand_out(self._next_round)
            self.actors.wait()
        return job.result if job.result is not None else self._lost_rows(cases, spec, job)

    def _lost_rows(self, cases: list, spec: str, job: Job) -> list[dict]:
        """Rows for cases no actor could finish: each a crash, saying which actors were lost."""
        why = "; ".join(job.losses)
        backend = self.backend_for(spec)
        return [result_row(c, backend, spec, self.s.device, Outcome.lost(Status.CRASH, why)).to_json()
                for c in cases]
