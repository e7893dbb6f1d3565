"""Result rows read for the report: streamed line by line, one lean record kept per row.

A row is a few KB of JSON (its metrics, an out sample, diagnostics when it failed); 100,000 of
them as dicts took 2.5 GB.  So each line is parsed, reduced to the scalars the page needs
(``lean``), and dropped; the few whole rows the page draws from (drill-downs, bench rows)
are read again by their byte offset.  A file with a line this fast path cannot take (a torn
line, a fragment glued to a row, a line that is no result row) is read whole by
``results.read_rows``, which warns or names the line, by the rule resume reads rows by.
"""

import gc
import json
import sys
from array import array
from dataclasses import dataclass, field

from ..errors import InputError
from ..judging.checks import float_or_nan
from ..planning.fixed_params import describe_fixed
from ..recording.findings import max_seqlen, scores
from ..recording.results import read_rows, row_problem


def row_key(row: dict) -> tuple:
    """Rows match across files by case id and backend name (a plug-in's path may move)."""
    return row["case_id"], row.get("backend") or row.get("backend_spec") or "?"


def gpu_model(row: dict) -> str:
    """The GPU model a row ran on: its ``placement`` name, or for rows written before placement existed,
    its environment's GPU; "" for a row run without a GPU."""
    place = row.get("placement")
    if isinstance(place, dict) and place.get("name"):
        return str(place["name"])
    env = row.get("env") if isinstance(row.get("env"), dict) else {}
    return str(env.get("gpu") or "")


def _text(value) -> str:
    return sys.intern(str(value)) if value is not None else "?"


def lean(row: dict) -> dict:
    """The scalars of one row that the summary, scoreboard, findings, table and baseline diff read."""
    backend = row_key(row)[1]
    rec = {
        "case_id": row["case_id"], "backend": _text(backend), "status": _text(row["status"]),
        "gpu": sys.intern(gpu_model(row)),
        "suite": _text(row.get("suite") or row["case_id"].split("/")[0]), "group": row.get("group"),
        "mode": _text(row.get("mode") or "?"), "dtype": _text(row.get("dtype") or "?"),
        "batch_size": row.get("batch_size"), "heads": row.get("heads"), "s_q": row.get("s_q"),
        "page_size": row.get("page_size"), "max_seqlen": max_seqlen(row),
        "reason": row.get("reason") or "", "rerun": row.get("rerun") or "",
        "wall_s": float_or_nan(row.get("wall_s")), "kernel_ms": float_or_nan(row.get("kernel_ms")),
        "has_diag": bool(row.get("diagnostics")), "cannot_hold": bool(row.get("cannot_hold")),
        "fixed": "; ".join(describe_fixed(row.get("fixed_by_kernel"))),     # parameters the kernel fixes
        # when the case started and ended (Unix seconds), where the row records it
        "started_at": float_or_nan(row.get("started_at")), "finished_at": float_or_nan(row.get("finished_at")),
    }
    rec.update(scores(row))          # each check's error over bound, and the worst of them
    return rec


def sample(row: dict):
    """The row's out sample as (positions key, values), compact: only pass/fail rows have one worth keeping,
    and only those that ran the case as written (one at a scale the kernel fixes computes something else)."""
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    s = metrics.get("out_sample")
    if row.get("status") not in ("pass", "fail") or not isinstance(s, dict) or not s.get("values") \
            or row.get("fixed_by_kernel"):
        return None
    try:
        values = array("d", s["values"])                 # all numbers: the common case, in C
    except TypeError:                                    # "nan"/"inf" spelled as strings
        values = array("d", (float_or_nan(v) for v in s["values"]))
    return hash(tuple(s.get("positions") or ())), values


@dataclass
class Loaded:
    """Every file's rows, reduced: records in the order of the latest row per case and backend."""

    sources: list = field(default_factory=list)     # (path, rows read)
    records: list = field(default_factory=list)     # lean(row) plus "where" and whatever ``keep`` added
    superseded: int = 0
    _whole: dict = field(default_factory=dict)      # (file, line) -> a row read whole (the slow path)

    def row(self, where: tuple) -> dict:
        """The whole row at ``where`` (a record's), read again from its file."""
        if where in self._whole:
            return self._whole[where]
        path, offset = where
        with open(path, "rb") as f:
            f.seek(offset)
            return json.loads(f.readline())


def _fast(path):
    """(offset, row) per line, streamed; raises ``_Slow`` at a line that is not a whole result row."""
    offset = 0
    with open(path, "rb") as f:
        for line in f:
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            if not line.endswith(b"\n"):       # a last line without its newline: read_rows judges it
                raise _Slow
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise _Slow from None
            if row_problem(row) is not None:    # read_rows names the line and why, as resume does
                raise _Slow
            yield start, row


class _Slow(Exception):
    """A line the streaming reader leaves to ``results.read_rows`` (torn, glued, not JSON)."""


def _reduce(path, keep, loaded: "Loaded") -> list[dict]:
    """Lean records of one file: streamed, or read whole where a line needs ``read_rows``'s judgement."""
    def record(row, where):
        rec = lean(row)
        rec["where"] = where
        if keep is not None:
            keep(row, rec)
        return rec
    try:
        return [record(row, (path, offset)) for offset, row in _fast(path)]
    except _Slow:
        pass
    except OSError as e:
        raise InputError(f"cannot read results file {path}: {e.strerror or e}") from None
    records = []
    for n, row in enumerate(read_rows(path), 1):      # warns on a torn line, raises on a bad one
        rec = record(row, (path, -n))
        loaded._whole[rec["where"]] = row
        records.append(rec)
    return records


def load(paths, keep=None) -> Loaded:
    """Read results files into lean records, the latest row of each case and backend (and GPU model, where
    the rows come from several).

    ``keep(row, rec)`` may add more to a record while its whole row is at hand.
    """
    loaded, by_key = Loaded(), {}
    for path in map(str, paths):
        collecting = gc.isenabled()
        gc.disable()        # 100,000 records hold no cycles: collecting while they pile up was 15% of the read
        try:
            records = _reduce(path, keep, loaded)
        finally:
            if collecting:
                gc.enable()
        loaded.sources.append((path, len(records)))
        for rec in records:
            key = (rec["case_id"], rec["backend"], rec["gpu"])
            loaded.superseded += by_key.pop(key, None) is not None    # re-insert: order follows the latest row
            by_key[key] = rec
    loaded.records = list(by_key.values())
    if len({rec["gpu"] for rec in loaded.records if rec["gpu"]}) <= 1:
        _one_row_per_case(loaded)
    return loaded


def _one_row_per_case(loaded: Loaded):
    """With one GPU model, a later row of a case and backend supersedes an earlier one whatever ran it (a
    CPU row by a GPU row).  With several, each model keeps its own row: the report sets them side by side."""
    by_key = {}
    for rec in loaded.records:                    # in the order of each one's latest row
        key = (rec["case_id"], rec["backend"])
        loaded.superseded += by_key.pop(key, None) is not None
        by_key[key] = rec
    loaded.records = list(by_key.values())
