"""The results file: JSON Lines, one row per case, appended and flushed as it goes.

A row carries everything a report needs, so reports are rebuilt from the file
without rerunning anything.  ``load`` returns a pandas DataFrame.

One writer at a time: ``ResultsWriter`` holds an exclusive lock on the file while
it writes.  What a row is (``row_problem``) is decided here once, for ``run
--resume`` and ``report`` alike; so is when a kept row may stand for a case
(``why_run_again``), and which paths an output may be written to (``check_output_path``).
"""

import fcntl
import hashlib
import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass
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


def _warn(message: str):
    print(f"mla-verify: warning: {message}", file=sys.stderr)


# ---- output paths ---------------------------------------------------------------------------------

def check_output_path(flag: str, path) -> None:
    """Refuse an output path that is not, or would not become, a regular file: writing to a device or
    through a link to one (``/dev/full``, ``/dev/null``) or to a directory loses the output, or worse."""
    try:
        mode = os.stat(path).st_mode        # follows links: a link to a device is the device
    except OSError:
        return      # a new file, or one the writer will say it cannot write
    if stat.S_ISDIR(mode):
        raise InputError(f"{flag} {path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{flag} {path}: is a device or other special file, not a regular file")


def check_distinct_outputs(outputs: dict) -> None:
    """``{flag: path}`` (None for an output not asked for): no two may be one file, whatever the
    spelling, links included, or one output overwrites the other."""
    seen = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        key = _file_key(path)
        if key in seen:
            raise InputError(f"{seen[key]} and {flag} both name {path}; each output needs a file of its own")
        seen[key] = flag


def _file_key(path):
    """One key per file: device and inode where it exists (hard links too), else its resolved path."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return os.path.realpath(path)


# ---- writing --------------------------------------------------------------------------------------

class ResultsWriter:
    """Appends rows to a JSONL file; each row is on disk before the next case starts.

    The file is locked (``flock``, exclusive) from opening to closing, so a second writer is refused
    before it runs anything.  With ``append`` the file is validated whole before anything is written
    (``rows_before`` are its rows), and only then is a torn last line dropped.
    """

    def __init__(self, path: str | Path, append: bool = False):
        self.path = Path(path)
        self.rows_before: list[dict] = []
        self._failed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # "a" never truncates: the file is emptied only once the lock is ours
            self._f = open(self.path, "a", encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write results file {self.path}: {e.strerror or e}") from None
        try:
            self._lock()
            if append:
                self.rows_before = self._take_over()
            else:
                self._f.truncate(0)
        except OSError as e:
            self._f.close()
            raise InputError(f"cannot write results file {self.path}: {e.strerror or e}") from None
        except BaseException:
            self._f.close()
            raise

    def _lock(self):
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{self.path} is being written by another mla-verify run; wait for it to "
                             f"finish or write to another file") from None
        except OSError as e:     # a file system without locks: still usable, unguarded
            _warn(f"{self.path}: cannot lock it ({e.strerror or e}); another run could write it at the same time")

    def _take_over(self) -> list[dict]:
        """Validate the whole file, then make it end cleanly: drop a torn last line, or end a whole one."""
        found = scan(self.path)
        if found.torn is not None:
            start, _, fragment = found.torn
            self._f.truncate(start)
            _warn(f"{self.path}: dropped a torn last line ({len(fragment)} bytes, {_fragment_name(fragment)}); "
                  f"that case runs again")
        elif found.unterminated:
            self.write_text("\n")
        return found.rows

    def write(self, row: dict):
        # flushed to the OS per row: a crash of this process or a worker loses nothing.  An fsync
        # per row cost milliseconds a case on the GPU box; the file is synced once on close.
        self.write_text(json.dumps(_clean(row), sort_keys=True) + "\n")

    def write_text(self, text: str):
        try:
            self._f.write(text)
            self._f.flush()
        except OSError as e:
            self._failed = True
            raise InputError(f"cannot write results file {self.path}: {e.strerror or e}; the rows written "
                             f"before are kept (--resume {self.path} runs the rest)") from None

    def close(self):
        """Sync and close.  After a failed write (already reported) the file is only closed."""
        if self._f.closed:
            return
        if self._failed:
            self._abandon()
            return
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            self._abandon()
            raise InputError(f"cannot write results file {self.path}: {e.strerror or e}") from None
        self._f.close()

    def _abandon(self):
        """Close without raising: the buffer that could not be written is given up, not written twice."""
        try:
            self._f.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:       # an error is on its way out: closing must not add a second one to it
            self._abandon()


# ---- reading --------------------------------------------------------------------------------------

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


def _fragment_name(fragment: str) -> str:
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
            _warn(f"{path}:{n}: dropped a torn fragment ({_fragment_name(fragment)}) glued before "
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
        _warn(f"{path}:{line}: skipped a torn last line ({_fragment_name(fragment)})")
    return found.rows


# ---- resume: may a kept row stand for its case? ---------------------------------------------------

KERNEL_KEYS = ("package", "version", "api")     # of a backend's info(): what identifies the kernel


def case_hash(case_definition: dict) -> str:
    """A stable hash of a case's resolved definition (``Case.to_dict()``, seed included); where its
    suite file lies is no part of it."""
    definition = {k: v for k, v in case_definition.items() if k != "suite_file"}
    text = json.dumps(_clean(definition), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def kernel_identity(info) -> dict:
    """The part of a backend's ``info()`` that says which kernel ran (other keys, timings, may vary)."""
    info = info if isinstance(info, dict) else {}
    return {k: _clean(info.get(k)) for k in KERNEL_KEYS}


def why_run_again(row: dict, backend_info: dict, case_digest: str, version: str) -> str | None:
    """None when a kept row was made by this kernel, on this case definition, by this mla-verify;
    otherwise the reason its case runs again, as the resume line says it."""
    if not all(key in row for key in ("backend_info", "case_hash", "mla_verify_version")):
        return "row has no identity"
    old, new = kernel_identity(row["backend_info"]), kernel_identity(backend_info)
    if old != new:
        changed = [k for k in KERNEL_KEYS if old[k] != new[k]]
        key = "version" if "version" in changed else changed[0]
        return f"kernel changed: {old[key]} -> {new[key]}" + ("" if key == "version" else f" ({key})")
    if row["mla_verify_version"] != version:
        return f"mla-verify changed: {row['mla_verify_version']} -> {version}"
    if row["case_hash"] != case_digest:
        return "case definition changed"
    return None


def failure_lines(row: dict) -> list[str]:
    """A row's one-line failure messages, or for a row without any (a raise, a crash) its status and reason."""
    return row.get("messages") or [f"{row['case_id']}: {row['status']}: {row.get('reason')}"]


def load(*paths):
    """All rows of the given files as one pandas DataFrame, flattened (``metrics.out.cos_diff``)."""
    import pandas as pd
    rows = [r for p in paths for r in read_rows(p)]
    return pd.json_normalize(rows)
