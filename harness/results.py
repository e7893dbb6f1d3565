"""The results file: JSON Lines, one row per case, appended and flushed as it goes.

A row carries everything a report needs, so reports are rebuilt from the file
without rerunning anything.  ``load`` returns a pandas DataFrame.
"""

import json
import math
import os
from pathlib import Path

from .errors import InputError

STATUSES = ("pass", "fail", "unsupported", "error", "crash", "timeout")


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


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a results file; a truncated last line (a killed run) is skipped."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"cannot read results file {path}: {e.strerror or e}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise InputError(f"{path}:{n}: not a JSON results row") from None
    return rows


def load(*paths):
    """All rows of the given files as one pandas DataFrame, flattened (``metrics.out.cos_diff``)."""
    import pandas as pd
    rows = [r for p in paths for r in read_rows(p)]
    return pd.json_normalize(rows)
