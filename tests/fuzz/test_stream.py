"""A stream of rounds (``fuzz/stream.py``): rounds of one spec go to the same ``run_cases`` call; each is counted
once its last row is in, whatever order the rows come in; the stream ends at a round of another spec (the next
stream's first) or as soon as a drawn case's row shows a new signature, and every round it took is counted."""

from types import SimpleNamespace

import pytest

from harness.fuzz.campaign import Round
from harness.fuzz.signature import signature
from harness.fuzz.stream import Stream

FAILING = {"status": "fail", "failed_checks": ["out.element"]}


class Rows:
    def __init__(self):
        self.reruns, self.rows = {}, []

    def write(self, row):
        assert row["case_id"] in self.reruns          # its rerun line is there while its round runs
        self.rows.append(row)


class Campaign:
    """``run_round`` as ``run_cases`` with ``more`` behaves: the next cases are asked for once the ones before
    are handed out, before their rows are in; rows come back in reverse.  ``count`` notes each round."""

    def __init__(self, failing=()):
        self.summary, self.failing, self.counted, self.calls, self.found = None, set(failing), [], 0, {}

    def run_round(self, cases, spec, writer, summary, more):
        self.calls += 1
        handed = list(cases)
        while handed:
            following = more() or []
            for case in reversed(handed):
                row = FAILING if case.id in self.failing else {"status": "pass"}
                writer.write({"case_id": case.id, **row})
            handed = following

    def count(self, batch, round_rows):
        self.counted.append((batch.spec, sorted(r["case_id"] for r in round_rows)))
        return [("sig",)] if any(r["status"] == "fail" for r in round_rows) else []


def rounds(*specs, size=3):
    out = []
    for r, spec in enumerate(specs):
        cases = [SimpleNamespace(id=f"fuzz/{r}/{i}") for i in range(size)]
        out.append(Round(cases, spec, drawn=True, reruns={c.id: (i, "rerun") for i, c in enumerate(cases)}))
    return out


def ids(batch):
    return sorted(c.id for c in batch.cases)


def test_rounds_of_one_spec_stream_and_another_spec_starts_the_next_stream():
    a1, a2, a3, b1 = rounds("a", "a", "a", "b")
    campaign, rows = Campaign(), Rows()
    upcoming = iter([a2, a3, b1])
    stream = Stream(campaign, a1, upcoming, rows)
    assert stream.run() is b1 and campaign.calls == 1
    assert campaign.counted == [("a", ids(a1)), ("a", ids(a2)), ("a", ids(a3))]
    assert len(rows.rows) == 9 and rows.reruns == {} and stream.met == []
    assert Stream(campaign, b1, upcoming, rows).run() is None and campaign.counted[-1] == ("b", ids(b1))


def test_a_new_signature_ends_the_stream_as_its_row_comes_in():
    r0, r1, r2, r3 = rounds("a", "a", "a", "a")
    campaign = Campaign(failing={r1.cases[1].id})
    upcoming = iter([r1, r2, r3])
    stream = Stream(campaign, r0, upcoming, Rows())
    assert stream.run() is None
    # r2 was asked for before r1's rows were in; r3 never was, and every round taken was counted
    assert [spec_ids[1] for spec_ids in campaign.counted] == [ids(r0), ids(r1), ids(r2)]
    assert stream.met == [(r1, [("sig",)])] and next(upcoming) is r3


@pytest.mark.parametrize("why", ["replayed from the corpus", "met before"])
def test_a_failure_of_a_signature_not_new_to_the_campaign_does_not_end_the_stream(why):
    r0, r1, r2 = rounds("a", "a", "a")
    campaign = Campaign(failing={r0.cases[0].id})
    if why == "met before":
        campaign.found[signature(FAILING)] = "found in an earlier stream"
    else:
        r0.drawn = False
    stream = Stream(campaign, r0, iter([r1, r2]), Rows())
    assert stream.run() is None and [c[1] for c in campaign.counted] == [ids(r0), ids(r1), ids(r2)]
