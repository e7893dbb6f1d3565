"""Result rows read for the report: streamed line by line, one lean record kept per row.

A row is a few KB of JSON (its metrics, an out sample, diagnostics when it failed); 100,000 of
them as dicts took 2.5 GB.  So each line is parsed, reduced to the scalars the page needs
(``lean``), and dropped; the few whole rows the page draws from (drill-downs, bench rows)
are read again by their byte offset.  A large file is read in byte ranges on several cores
(``split_read``), its records kept as columns (``columns``).  A file with a line this fast
path cannot take (a torn line, a fragment glued to a row, a line that is no result row) is
read whole by ``results.read_rows``, which warns or names the line, by the rule resume reads
rows by.
"""

import json
import mmap
import os
import stat
import sys
from array import array
from dataclasses import dataclass, field

from ..errors import InputError
from ..judging.checks import float_or_nan
from ..planning.fixed_params import describe_fixed
from ..recording.findings import max_seqlen, scores
from ..recording.results import read_rows, row_problem
from . import split_read
from .columns import columns_of, extend, length, take
from .gc_pause import uncollected


def json_loads(line):
    return json.loads(bytes(line))


try:        # orjson parses result rows three times as fast as json (docs/reports.md)
    from orjson import loads as _loads
except ImportError:         # a checkout run without its install: json alone
    _loads = json_loads


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
        "warm_up": bool(row.get("warm_up")),      # a kernel variant's first case: its kernel time holds the build
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
    records: dict = field(default_factory=dict)     # lean(row) plus "where" and what ``keep`` added, as columns
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


def _parse(line):
    """One line's JSON, by orjson and, for what orjson refuses and json takes (NaN, 1e400, a lone
    surrogate, a byte order mark), by json; raises ``_Slow`` for a line that is not JSON."""
    try:
        return _loads(line)
    except ValueError:
        try:
            return json_loads(line)
        except ValueError:          # JSONDecodeError and UnicodeDecodeError
            raise _Slow from None


WHITESPACE = b" \t\n\r\x0b\x0c"
DROP_BYTES = 32 << 20 if hasattr(mmap, "MADV_DONTNEED") else 1 << 62    # a mapped file's pages, let go as read


def _fast(path, start: int = 0, end: int | None = None):
    """(offset, row) per line from byte ``start`` (a line start) to ``end``, streamed; raises ``_Slow`` at
    a line that is not a whole result row."""
    for at, line, whole in _lines(path, start, end):
        if line[0] in WHITESPACE and bytes(line).isspace():
            continue
        if not whole:                   # a last line without its newline: read_rows judges it
            raise _Slow
        row = _parse(line)
        if row_problem(row) is not None:    # read_rows names the line and why, as resume does
            raise _Slow
        yield at, row


def _lines(path, start: int, end: int | None):
    """(offset, line, whether it ends in a newline) per line from byte ``start`` to ``end``.  A regular
    file's lines are views of the file mapped in memory, parsed where they lie (copying each one out
    first was a tenth of the parse); a pipe's are read as they come."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            for line in f:
                yield start, line, line.endswith(b"\n")
                start += len(line)
            return
        if not info.st_size:
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)     # closed when its last view goes
    view, stop, read = memoryview(mapped), info.st_size if end is None else end, start - start % mmap.PAGESIZE
    while start < stop:
        newline = mapped.find(b"\n", start, stop)
        line_end = stop if newline < 0 else newline + 1
        yield start, view[start:line_end], newline >= 0
        start = line_end
        if start - read > DROP_BYTES:       # the pages read go from this process's memory (not from the cache)
            mapped.madvise(mmap.MADV_DONTNEED, read, start - start % mmap.PAGESIZE - read)
            read = start - start % mmap.PAGESIZE


class _Slow(Exception):
    """A line the streaming reader leaves to ``results.read_rows`` (torn, glued, not JSON)."""


def _record(row: dict, where: tuple, keep) -> dict:
    rec = lean(row)
    rec["where"] = where
    if keep is not None:
        keep(row, rec)
    return rec


def _read_range(path, start: int, end: int | None, keep) -> tuple[dict, object]:
    """The lean records of the lines in a byte range, as columns, and the ``keep`` that saw their rows."""
    return columns_of([_record(row, (path, offset), keep) for offset, row in _fast(path, start, end)]), keep


def _streamed(path, keep) -> dict[str, list]:
    """Every line's lean record.  The file is read in byte ranges, on several cores where it is large
    (``split_read``); ``keep`` sees each range apart (``keep.part()``) and merges the parts once all are
    read, so a file that turns out to need the slow way is not seen twice."""
    parts = split_read.part_count(path)
    spans = split_read.ranges(path, parts) if parts > 1 else [(0, None)]
    calls = [(path, start, end, None if keep is None else keep.part()) for start, end in spans]
    records: dict[str, list] = {}
    for part, part_keep in split_read.run_parts(calls, _read_range, _read_range):
        if keep is not None:
            keep.merge(part_keep, part)
        extend(records, part)
    return records


def _reduce(path, keep, loaded: "Loaded") -> dict[str, list]:
    """Lean records of one file: streamed, or read whole where a line needs ``read_rows``'s judgement."""
    try:
        return _streamed(path, keep)
    except _Slow:
        pass
    except OSError as e:
        raise InputError(f"cannot read results file {path}: {e.strerror or e}") from None
    records = []
    for n, row in enumerate(read_rows(path), 1):      # warns on a torn line, raises on a bad one
        rec = _record(row, (path, -n), keep)
        loaded._whole[rec["where"]] = row
        records.append(rec)
    return columns_of(records)


def load(paths, keep=None) -> Loaded:
    """Read results files into lean records, the latest row of each case and backend (and GPU model, where
    the rows come from several).

    ``keep(row, rec)`` may add more to a record while its whole row is at hand; it gathers a range of
    the file apart (``keep.part()`` gives an empty one) and ``keep.merge(part, records)`` folds a
    range's records (columns) in, in file order (``build.Extras``).
    """
    loaded, records = Loaded(), {}
    with uncollected():
        for path in map(str, paths):
            part = _reduce(path, keep, loaded)
            loaded.sources.append((path, length(part)))
            extend(records, part)
        standing = _latest(records)
        loaded.superseded = length(records) - len(standing)
        loaded.records = records if loaded.superseded == 0 else take(records, standing)
    return loaded


def _latest(records: dict[str, list]) -> list[int]:
    """The records that stand, in the order of each one's latest row: the latest of each case and backend.
    With one GPU model a later row supersedes an earlier one whatever ran it (a CPU row by a GPU row); with
    several, each model keeps its own row: the report sets them side by side."""
    if not records:
        return []
    several = len({gpu for gpu in records["gpu"] if gpu}) > 1
    keys = zip(records["case_id"], records["backend"], *([records["gpu"]] if several else []))
    return sorted({key: i for i, key in enumerate(keys)}.values())
