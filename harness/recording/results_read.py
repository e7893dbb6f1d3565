"""Reading a results file: what a row is (``row_problem``), decided here once for ``run --resume``
and ``report`` alike, and a whole file read and validated (``scan``, ``read_rows``)."""

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


def json_safe(value):
    """JSON has no inf or NaN: write them as strings so rows stay standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def warn(message: str):
    print(f"mla-verify: warning: {message}", file=sys.stderr)


ROW_KEYS = ("case_id", "status")       # what every result row has, as strings


def row_problem(row) -> str | None:
    """Why a parsed JSON line is not a result row, or None when it is one.  The one rule: a JSON
    object with a string ``case_id`` and ``status``.  Resume and report both read rows by it."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__ if row is not None else 'null'}, not an object"
    missing = [key for key in ROW_KEYS if not isinstance(row.get(key), str)]
    if missing:
        return f"an object without {' or '.join(missing)}"
    return None


@dataclass
class Scan:
    """A results file read whole and found valid."""

    rows: list
    torn: tuple[int, int, str] | None = None     # a last line cut in half: (byte offset, line number, text)
    unterminated: bool = False               # the last line is a whole row lacking its newline


_CASE_ID = re.compile(r'"case_id": "([^"]*)"')


def fragment_name(fragment: str) -> str:
    found = _CASE_ID.search(fragment)
    return f"the row of case {found.group(1)}" if found else "a row whose case id was cut off"


def _parse(raw: bytes):
    """(row, None) for a result row; (None, why) for anything else, why None when it is not JSON."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    problem = row_problem(value)
    return (value, None) if problem is None else (None, problem)


def _recover(line: str):
    """A whole row glued after a fragment (a torn line appended to by an older version), or None."""
    at = line.find("{", 1)
    while at > 0:
        try:
            row = json.loads(line[at:])
        except json.JSONDecodeError:
            row = None
        if row_problem(row) is None:
            return row, line[:at]
        at = line.find("{", at + 1)
    return None


def scan(path: str | Path) -> Scan:
    """Read and validate every line of a results file; any line that is not a row is bad input.

    Only a last line without its newline that is not JSON is let through, as torn (a killed run, a
    full disk); a whole row glued after a torn fragment (an older writer) is recovered with a warning.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read results file {path}: {e.strerror or e}") from None
    lines = data.split(b"\n")              # the last item is what follows the last newline
    found, offset = Scan(rows=[]), 0
    for n, raw in enumerate(lines, 1):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            continue
        row, problem = _parse(raw)
        last = n == len(lines)             # only the last item can lack a newline
        if row is not None:
            found.rows.append(row)
            found.unterminated = last
            continue
        text = raw.decode("utf-8", errors="replace")
        recovered = _recover(text) if problem is None else None
        if recovered is not None:
            row, fragment = recovered
            warn(f"{path}:{n}: dropped a torn fragment ({fragment_name(fragment)}) glued before "
                  f"the row of case {row['case_id']}")
            found.rows.append(row)
            found.unterminated = last
        elif problem is None and last:
            found.torn = (start, n, text)
        else:
            raise InputError(f"{path}:{n}: not an mla-verify result row ({problem or 'not JSON'})")
    return found


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a results file, validated whole (``scan``); a torn last line is skipped with a warning."""
    found = scan(path)
    if found.torn is not None:
        _, line, fragment = found.torn
        warn(f"{path}:{line}: skipped a torn last line ({fragment_name(fragment)})")
    return found.rows

