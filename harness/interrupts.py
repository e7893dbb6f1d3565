"""Whether a ``KeyboardInterrupt`` came from outside the process (a signal) or from code it ran.

A user's Ctrl-C stops the run, and so do SIGTERM and SIGHUP.  A kernel that raises ``KeyboardInterrupt``
itself (or any other ``BaseException``) is that case's ``error``, like any exception it raises.  Both look
the same to an ``except`` clause, so the CLI's handler notes that a signal came before raising.  A worker
ignores SIGINT (``worker_process``): there every ``KeyboardInterrupt`` is the code's own.
"""

import signal
import threading

_received = threading.Event()


def _on_sigint(signum, frame):
    _received.set()
    raise KeyboardInterrupt


# Ended as Ctrl-C ends a run: SIGTERM (``timeout``, ``kill``) and SIGHUP (the terminal gone) would otherwise end
# this process alone, and the workers, each leading a process group of its own, would run on
STOPPING = (signal.SIGTERM, signal.SIGHUP)


def watch_sigint():
    """Note SIGINT before raising, where Python's own handler is in place (an ignored SIGINT, as under
    ``nohup``, stays ignored), and SIGTERM and SIGHUP where their default would end the process.  Only the
    main thread may set a handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    for signum in STOPPING:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _on_sigint)


def from_outside() -> bool:
    """Whether a SIGINT has reached this process since it started watching."""
    return _received.is_set()


def is_the_codes_own(error: BaseException) -> bool:
    """Whether ``error``, caught around a case, is something the case's code raised, to be recorded as
    that case's outcome, rather than a user's interrupt or the interpreter winding down."""
    if isinstance(error, Exception):
        return True
    if isinstance(error, KeyboardInterrupt):
        return not from_outside()
    return not isinstance(error, GeneratorExit)
