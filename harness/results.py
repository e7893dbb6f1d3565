"""The results file: JSON Lines, one row per case, appended and flushed as it goes.

A row carries everything a report needs, so reports are rebuilt from the file
without rerunning anything.  ``load`` returns a pandas DataFrame.
"""

import json
import math
import os
import re
import sys
from pathlib import Path

from .errors import InputError
from .status import STATUSES  # noqa: F401  (re-exported: readers of results know the vocabulary here)


def _clean(value):
    """JSON has no inf or NaN: write them as strings so rows stay standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class ResultsWriter:
    """Appends rows to a JSONL file; each row is on disk before the next case starts."""

    def __init__(self, path: str | Path, append: bool = False):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if append:
                repair_torn_tail(self.path)
            self._f = open(self.path, "a" if append else "w", encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write results file {self.path}: {e.strerror or e}") from None

    def write(self, row: dict):
        # flushed to the OS per row: a crash of this process or a worker loses nothing.  An fsync
        # per row cost milliseconds a case on the GPU box; the file is synced once on close.
        self._f.write(json.dumps(_clean(row), sort_keys=True) + "\n")
        self._f.flush()

    def close(self):
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_CASE_ID = re.compile(r'"case_id": "([^"]*)"')


def _warn(message: str):
    print(f"mla-verify: warning: {message}", file=sys.stderr)


def _fragment_name(fragment: str) -> str:
    found = _CASE_ID.search(fragment)
    return f"the row of case {found.group(1)}" if found else "a row whose case id was cut off"


def repair_torn_tail(path: Path):
    """Drop a last line cut in half (a killed process, a full disk) before appending to ``path``.

    Without this the next row would be glued onto the fragment and both lost.
    """
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if not size:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # find the start of the last line, reading backwards in blocks
        start, block = size, 1 << 16
        while start > 0:
            step = min(block, start)
            f.seek(start - step)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                start = start - step + cut + 1
                break
            start -= step
        f.seek(start)
        fragment = f.read().decode("utf-8", errors="replace")
        f.truncate(start)
    _warn(f"{path}: dropped a torn last line ({len(fragment)} bytes, {_fragment_name(fragment)}); "
          f"that case runs again")


def _recover(line: str):
    """A whole row glued after a fragment (a torn line appended to by an older version), or None."""
    at = line.find("{", 1)
    while at > 0:
        try:
            row = json.loads(line[at:])
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and "case_id" in row:
            return row, line[:at]
        at = line.find("{", at + 1)
    return None


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a results file.

    A torn last line (a killed run) is skipped with a warning; a whole row glued
    after a torn fragment is recovered with a warning.  No complete row is lost
    silently; anything else unreadable is bad input.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read results file {path}: {getattr(e, 'strerror', None) or e}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
            continue
        except json.JSONDecodeError:
            pass
        recovered = _recover(line)
        if recovered is not None:
            row, fragment = recovered
            _warn(f"{path}:{n}: dropped a torn fragment ({_fragment_name(fragment)}) glued before "
                  f"the row of case {row['case_id']}")
            rows.append(row)
        elif n == len(lines):
            _warn(f"{path}:{n}: skipped a torn last line ({_fragment_name(line)})")
        else:
            raise InputError(f"{path}:{n}: not a JSON results row") from None
    return rows


def failure_lines(row: dict) -> list[str]:
    """A row's one-line failure messages, or for a row without any (a raise, a crash) its status and reason."""
    return row.get("messages") or [f"{row['case_id']}: {row['status']}: {row.get('reason')}"]


def load(*paths):
    """All rows of the given files as one pandas DataFrame, flattened (``metrics.out.cos_diff``)."""
    import pandas as pd
    rows = [r for p in paths for r in read_rows(p)]
    return pd.json_normalize(rows)
