"""Writing a results file: one writer at a time (``ResultsWriter`` holds an exclusive lock on the file
while it writes), each row on disk before the next case starts; and which paths an output may be
written to (``check_output_path``, ``check_distinct_outputs``)."""

import fcntl
import json
import os
import stat
import threading
from pathlib import Path

from ..errors import InputError
from .results_read import fragment_name, json_safe, scan, warn


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
        self._writing = threading.Lock()
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
            warn(f"{self.path}: cannot lock it ({e.strerror or e}); another run could write it at the same time")

    def _take_over(self) -> list[dict]:
        """Validate the whole file, then make it end cleanly: drop a torn last line, or end a whole one."""
        found = scan(self.path)
        if found.torn is not None:
            start, _, fragment = found.torn
            self._f.truncate(start)
            warn(f"{self.path}: dropped a torn last line ({len(fragment)} bytes, {fragment_name(fragment)}); "
                  f"that case runs again")
        elif found.unterminated:
            self.write_text("\n")
        return found.rows

    def write(self, row: dict):
        # flushed to the OS per row: a crash of this process or a worker loses nothing.  An fsync
        # per row cost milliseconds a case on the GPU box; the file is synced once on close.
        self.write_text(json.dumps(json_safe(row), sort_keys=True) + "\n")

    def write_text(self, text: str):
        try:
            with self._writing:       # backends side by side write from their own threads
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

