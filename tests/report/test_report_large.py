"""A large results file is read in byte ranges on several cores (``report.split_read``), each line parsed by
orjson: the report is the one that reading the file line by line in one process with ``json`` gives.  A
file that turns out to need the slow way (a torn last line) has each of its rows seen once.  A forked call
(``report.forked``) answers from its child, raises its child's error, and is redone here if its child dies."""

import json
import os
import re
import time
from itertools import cycle, islice

import orjson
import pytest

from harness.cli import main as cli
from harness.errors import InputError
from harness.report import rows, split_read, write_report
from harness.report.forked import Forked

BENCH = {"timed": False, "why": "no GPU here"}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The smoke suite on torch and two mutants: passes, failures over the bound, NaN rows with diagnostics."""
    path = tmp_path_factory.mktemp("large") / "source.jsonl"
    assert cli(["run", "--suite", "smoke", "--backend", "torch,mutant:nan_empty_rows,mutant:lse_base2",
                "--workers", "0", "--no-progress", "--out", str(path)]) == 1
    return [json.loads(line) for line in path.read_text().splitlines()]


def many(source: list[dict], n: int) -> list[dict]:
    """``n`` rows: the source repeated under new case ids, what the parts must merge varying along the file
    (environments, shard labels, bench rows without one), the first rows run again at the end (superseding
    earlier ones), and one wall time spelled NaN (json reads it, orjson does not)."""
    out = []
    for k, row in enumerate(islice(cycle(source), n)):
        copy = k // len(source)
        row = dict(row, case_id=f"{row['case_id']}#{copy}", shard=f"{copy % 3 + 1}/4", shard_of=n)
        if copy % 4 == 3:
            row["env"] = {**row["env"], "commit": f"other-{copy % 8}"}
        if k % 997 == 500:
            row["bench"] = BENCH
            del row["shard"]
        out.append(row)
    out[len(out) // 2]["wall_s"] = float("nan")
    return out + [dict(r, status="pass", shard="3/4") for r in out[:40]]


def report(paths, out, monkeypatch, parts: int, loads):
    """The report's page (its time stamp blanked) and data, the files read in ``parts`` byte ranges."""
    with monkeypatch.context() as m:
        m.setattr(rows, "_loads", loads)
        m.setattr(split_read, "MIN_BYTES", 1)
        m.setattr(split_read, "usable_cores", lambda: parts)
        _, data = write_report(paths, out)
    return re.sub(r"generated [-0-9: ]+ from", "generated from", out.read_text(encoding="utf-8")), data


def test_a_file_read_on_several_cores_gives_the_report_read_line_by_line(source, tmp_path, monkeypatch):
    path = tmp_path / "large.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in many(source, 2500)))
    assert len(split_read.ranges(path, 3)) == 3
    one, serial = report([path], tmp_path / "one.html", monkeypatch, 1, rows.json_loads)
    three, parallel = report([path], tmp_path / "three.html", monkeypatch, 3, orjson.loads)
    assert serial.superseded == parallel.superseded == 40
    assert len(serial.extras.bench) == len(parallel.extras.bench) == 3
    assert len(serial.extras.env_values) == len(parallel.extras.env_values) == 3 * 3     # backends x commits
    assert serial.shard_problems == parallel.shard_problems
    assert {"shard 4 of 4 absent", "3 row(s) carry no shard, beside sharded ones"} <= set(serial.shard_problems)
    assert one == three
    assert "commit" in one and "other-3" in one and 'id="matrix"' in one


@pytest.mark.parametrize("parts", [1, 3])
def test_a_file_that_needs_the_slow_way_has_each_row_seen_once(source, tmp_path, monkeypatch, parts):
    lines = [dict(r, bench=BENCH) if k == 3 else r for k, r in enumerate(source[:10])]
    path = tmp_path / "torn.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + json.dumps(source[10])[:60])
    _, data = report([path], tmp_path / "torn.html", monkeypatch, parts, orjson.loads)
    assert len(split_read.ranges(path, parts)) == parts
    assert data.sources == [(str(path), 10)]
    assert len(data.extras.bench) == 1
    assert sum(sum(names.values()) for names in data.extras.kernels.values()) == 10


def test_a_forked_call_answers_from_its_child_raises_its_error_and_is_redone_here_if_it_dies():
    parent = os.getpid()
    assert Forked(os.getpid).result() != parent
    assert Forked(os.getpid, fork=False).result() == parent
    with pytest.raises(InputError, match="bad row"):
        Forked(raise_input_error, "bad row").result()
    assert Forked(lambda: os.getpid() if os.getpid() == parent else os._exit(3)).result() == parent
    child = Forked(time.sleep, 60)
    child.cancel()
    assert child.pid is None


def raise_input_error(message: str):
    raise InputError(message)
