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
        for name, rtype in left_registered(self.ledger_path):
            cleanup = resource_tracker._CLEANUP_FUNCS.get(rtype)     # the tracker's own unlink, per kind
            try:
                if cleanup is not None:
                    cleanup(name)
            except OSError:       # unlinked already
                pass
            resource_tracker.unregister(name, rtype)


def left_registered(ledger_path: str) -> list[tuple[str, str]]:
    """(name, kind) of each resource the ledger has registered and not unregistered, in order."""
    try:
        with open(ledger_path, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    left: dict[tuple[str, str], None] = {}
    for line in lines:
        cmd, _, rest = line.partition(":")
        name, _, rtype = rest.rpartition(":")
        if cmd == "REGISTER":
            left[(name, rtype)] = None
        elif cmd == "UNREGISTER":
            left.pop((name, rtype), None)
    return list(left)


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
    """Every message this process sends the resource tracker, noted in the ledger too.  A REGISTER is sent
    before it is noted and an UNREGISTER noted before it is sent: a kill between the two leaves a resource
    the tracker still cleans up (with its warning), never one the parent would unregister twice."""
    from multiprocessing import resource_tracker
    tracker = resource_tracker._resource_tracker
    send = getattr(tracker, "_send", None)
    if send is None:        # a Python whose tracker works otherwise: it keeps its own account, and warns
        return
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_APPEND)

    def noted(cmd, name, rtype):
        line = f"{cmd}:{name}:{rtype}\n".encode("ascii", errors="replace")
        if cmd == "REGISTER":
            send(cmd, name, rtype)
            os.write(ledger, line)
        else:
            os.write(ledger, line)
            send(cmd, name, rtype)

    tracker._send = noted
