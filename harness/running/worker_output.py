"""What a worker process leaves behind: what it wrote to stderr, and the named resources it registered.

A worker's stderr (Python's warnings and C-level writes to fd 2 alike, as a kernel library's CUDA
warnings are) goes to a file of its own, not to the console: the parent reads what arrived during a
chunk into that chunk's rows (``worker_stderr``), or into the row of the case its worker died in.

Named semaphores and shared memory are registered with multiprocessing's resource tracker, which
unlinks at exit what nobody did, and says so ("There appear to be 201 leaked semaphore objects").
A worker that is killed (a crash, a timeout, a spare not needed) unlinks nothing.  So a worker also
notes in a ledger what it registers and unregisters; once it is gone, the parent unlinks what it
left and tells the tracker, which then has nothing to clean up or warn about.  Nothing heavy here:
a spare worker starts before the parent imports torch.
"""

import os
import sys
from dataclasses import dataclass

STDERR_CHARS = 4000       # of what a worker wrote during one chunk, the end is kept on its rows


@dataclass
class WorkerOutput:
    """A worker's stderr file and resource ledger (the parent's side reads them; ``capture`` the worker's)."""

    stderr_path: str
    ledger_path: str
    read_to: int = 0              # bytes of stderr already handed out
    released: bool = False

    @classmethod
    def in_folder(cls, folder: str, n: int) -> "WorkerOutput":
        """The files of the ``n``-th worker of a pool, in the pool's folder (created empty now)."""
        out = cls(os.path.join(folder, f"worker-{n}.stderr"), os.path.join(folder, f"worker-{n}.ledger"))
        for path in (out.stderr_path, out.ledger_path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        return out

    def new_text(self) -> str:
        """What the worker wrote since the last call, its last ``STDERR_CHARS`` characters."""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(self.read_to)
                data = f.read()
        except OSError:
            return ""
        self.read_to += len(data)
        text = data.decode("utf-8", errors="replace")
        if len(text) > STDERR_CHARS:
            text = f"[{len(text) - STDERR_CHARS} earlier characters not kept]\n" + text[-STDERR_CHARS:]
        return text

    def release(self):
        """Unlink the named resources the worker registered and did not unregister, and have the tracker
        forget them.  Only once the worker is gone: a live one may still use them.  Once only."""
        if self.released:
            return
        self.released = True
        from multiprocessing import resource_tracker
        left, last = read_ledger(self.ledger_path)
        for name, rtype in left:
            cleanup = resource_tracker._CLEANUP_FUNCS.get(rtype)     # the tracker's own unlink, per kind
            try:
                if cleanup is not None:
                    cleanup(name)
            except OSError:       # unlinked already
                pass
            _forget(name, rtype)
        if last is not None:      # noted, but a kill may have come before it was sent (``_note_resources``)
            _forget(*last)


def _forget(name: str, rtype: str):
    """Have the tracker forget a resource whether it knows it or not: a REGISTER adds to its set (twice is
    once), then an UNREGISTER takes it out (of a name it does not know, it would print a traceback)."""
    from multiprocessing import resource_tracker
    resource_tracker.register(name, rtype)
    resource_tracker.unregister(name, rtype)


def read_ledger(ledger_path: str) -> tuple[list[tuple[str, str]], tuple[str, str] | None]:
    """(name, kind) of each resource the ledger has registered and not unregistered, in order; and the
    last one it unregistered, where that was its last line: the one message a kill may have cut off."""
    try:
        with open(ledger_path, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return [], None
    left: dict[tuple[str, str], None] = {}
    last = None
    for line in lines:
        cmd, _, rest = line.partition(":")
        name, _, rtype = rest.rpartition(":")
        last = (name, rtype) if cmd == "UNREGISTER" else None
        if cmd == "REGISTER":
            left[(name, rtype)] = None
        elif cmd == "UNREGISTER":
            left.pop((name, rtype), None)
    return list(left), last


def attach(row: dict, text: str) -> dict:
    """``row`` with what its worker wrote to stderr, if anything."""
    if text.strip():
        row["worker_stderr"] = text
    return row


def capture(output: WorkerOutput):
    """In the worker, first thing: fd 2 to its stderr file, and the resource tracker's messages noted."""
    sys.stderr.flush()
    fd = os.open(output.stderr_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)          # sys.stderr writes to fd 2 too: one file for Python and C alike
    os.close(fd)
    _note_resources(output.ledger_path)


def _note_resources(ledger_path: str):
    """Every message this process sends the resource tracker, noted in the ledger first.  A kill between the
    two leaves a message noted and not sent; the parent has the tracker forget that resource either way
    (``WorkerOutput.release``), so the tracker neither warns of it nor hears of it twice."""
    from multiprocessing import resource_tracker
    tracker = resource_tracker._resource_tracker
    send = getattr(tracker, "_send", None)
    if send is None:        # a Python whose tracker works otherwise: it keeps its own account, and warns
        return
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND)

    def noted(cmd, name, rtype):
        os.write(ledger, f"{cmd}:{name}:{rtype}\n".encode("ascii", errors="replace"))
        send(cmd, name, rtype)

    tracker._send = noted
