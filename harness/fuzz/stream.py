"""Rounds of one spec streamed through one ``run_cases`` call (its ``more``): the next round is asked for as
soon as a worker is free and every chunk before is handed out.  No worker waits at a round's end for the
round's slowest chunk, and none is handed back to the pool and told its backend again between rounds:
``run``'s one stream of chunks, which fuzzing matches.

Each round is judged as its last row comes in (``Campaign.count``).  The stream ends at the first round of
another spec, which starts the next stream, or as soon as a drawn case's row shows a signature not seen before:
shrinking it needs the workers (``Campaign.shrink_new``), so no further round starts, and the rounds handed
out finish, before it is shrunk.  Its round need not be done: a round's chunks may take a while (a cold JIT
builds its kernels in them).
"""

from .signature import signature


class Stream:
    def __init__(self, campaign, first, upcoming, rows):
        self.campaign, self.first, self.upcoming, self.rows = campaign, first, upcoming, rows
        self.spec = first.spec
        self.waiting = {}        # case id -> its round, while the row is not in
        self.got = {}            # id(round) -> its rows so far
        self.met = []            # (round, what ``count`` returned) for each round that met a new signature
        self.after = None        # the round of another spec that ended the stream
        self.new = False         # a drawn case's row showed a signature not seen before
        self._add(first)

    def run(self):
        """The stream's rounds run and counted; the round the next stream starts with (None: take the next)."""
        self.campaign.run_round(self.first.cases, self.spec, self, self.campaign.summary, more=self.more)
        return self.after

    def more(self):
        """The next round's cases, or None: the stream ends (the rounds are spent, the spec changes, or a
        drawn case met a new signature)."""
        if self.new:
            return None
        batch = next(self.upcoming, None)
        if batch is not None and batch.spec != self.spec:
            self.after, batch = batch, None
        if batch is None:
            return None
        self._add(batch)
        return batch.cases

    def write(self, row):
        """A row to the campaign's results; the last of its round has the round counted."""
        self.rows.write(row)
        batch = self.waiting.pop(row["case_id"])
        sig = signature(row)
        self.new = self.new or (batch.drawn and sig is not None and sig not in self.campaign.found)
        got = self.got[id(batch)]
        got.append(row)
        if len(got) == len(batch.cases):
            self._done(batch)

    def _add(self, batch):
        self.rows.reruns.update(batch.reruns)
        self.waiting.update((case.id, batch) for case in batch.cases)
        self.got[id(batch)] = []
        if not batch.cases:
            self._done(batch)

    def _done(self, batch):
        met = self.campaign.count(batch, self.got.pop(id(batch)))
        for case_id in batch.reruns:
            self.rows.reruns.pop(case_id, None)
        if met:
            self.met.append((batch, met))
