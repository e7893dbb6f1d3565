"""Worker processes started before this process imports torch, so that their start overlaps it.

A worker spends most of its start importing torch (seconds on a GPU box) and the parent does the
same.  ``start`` spawns a worker that imports torch and the harness, then waits to be told which
backend to load; ``take`` hands it to ``isolation.run_isolated``.  This module imports nothing heavy
itself: ``cli`` calls ``start`` before the subcommand's imports.  Spares nobody took are stopped at exit.
"""

import atexit
import multiprocessing as mp

_spares = []


def _child(conn, progress):
    from .isolation import serve  # the slow imports happen here, in the child
    serve(conn, progress)


def context():
    return mp.get_context("spawn")      # never fork a process that may hold a CUDA context


def spawn():
    """A new worker process: ``(process, connection, progress counter)``, not yet told what to run."""
    ctx = context()
    conn, child_conn = ctx.Pipe()
    progress = ctx.Value("i", -1, lock=False)      # index of the case in hand (see chunk.run_chunk's on_start)
    proc = ctx.Process(target=_child, args=(child_conn, progress), daemon=True)
    proc.start()
    child_conn.close()
    return proc, conn, progress


_registered = []


def start():
    """Start a spare worker now, unless one is already waiting (one left by a run that stopped early)."""
    if not _registered:
        _registered.append(atexit.register(stop_all))
    if not any(proc.is_alive() for proc, _, _ in _spares):
        _spares.append(spawn())


def take():
    """A spare worker that is still alive, or None."""
    while _spares:
        proc, conn, progress = _spares.pop(0)
        if proc.is_alive():
            return proc, conn, progress
        conn.close()
    return None


def stop_all():
    while _spares:
        proc, conn, _ = _spares.pop()
        try:
            conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
