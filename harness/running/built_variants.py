"""The kernel variants a cache root holds built, so that a later run on it skips their warm-up.

The warm-up (``warm_up``) runs the first case of each variant alone and holds the variant's other cases until it
is done, so that a JIT builds each variant once.  With everything built that costs time for nothing: in the
second ``make verify`` on a fresh H200 the warm-up of 252 variants took 9.6 s of the 15.5 s of cases, in chunks
of one case (docs/gpu-runs.md).  So a run notes, beside the JITs' folders in the cache root (``jit_cache``), each
variant whose first case ran its kernel to an answer, under the backend's name and what it records of its package
(``Backend.info``: a new wheel is a new entry); a later run on that root hands those variants' cases out with
the rest.  Should a JIT's folder have been emptied meanwhile, its kernels are built again by whichever workers
meet them first: slower, never other rows (rows do not depend on their chunk, docs/speed.md).  A fresh root is
a cold start.
"""

import json
import os
import threading
from pathlib import Path

FILE = "built-variants.json"
BUILT_FROM = ("package", "version", "triton")    # what of ``Backend.info`` names the code built (not its timings)
_LOCK = threading.Lock()          # backends side by side note theirs from their own threads (``overlap``)


def identity(backend) -> str:
    """The entry a backend's variants go under: its name and the package, version and Triton its ``info()``
    records (FlashInfer's also holds its build times and cache folder, which name no other code)."""
    info = backend.info()
    return f"{backend.name} {json.dumps({k: info.get(k) for k in BUILT_FROM}, default=str)}"


class Memo:
    """The file ``FILE`` under a cache root: ``{identity: [variant key, ...]}`` (``warm_up.variant_key``)."""

    def __init__(self, root):
        self.path = Path(root) / FILE

    def built(self, backend) -> set[str]:
        """The keys of ``backend``'s variants built under this root (none where the file is missing or unreadable:
        the warm-up then runs as on a cold root)."""
        return set(self._read().get(identity(backend), ()))

    def note(self, backend, keys: set[str]):
        """Add ``keys`` to ``backend``'s entry, written whole to a temporary file and moved into place, so a
        reader sees the old file or the new one."""
        if not keys:
            return
        with _LOCK:
            notes = self._read()
            mine = identity(backend)
            notes[mine] = sorted(set(notes.get(mine, ())) | keys)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f"{FILE}.{os.getpid()}.{threading.get_ident()}")
            partial.write_text(json.dumps(notes, indent=1, sort_keys=True))
            os.replace(partial, self.path)

    def _read(self) -> dict:
        try:
            notes = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return notes if isinstance(notes, dict) else {}
