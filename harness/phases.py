"""Which phase of a case raised: the kernel's fault or the harness's.

A case runs in phases: ``inputs`` (build q, the pool and the tables), ``kernel``
(the backend's call), ``oracle`` (the float64 reference) and ``compare``.  An
exception in ``kernel`` is the kernel's ``error``; one anywhere else is a
``harness_error``, never blamed on the kernel.
"""

import contextvars
import time
import traceback
from contextlib import contextmanager

from .errors import InputError, Unsupported

KERNEL = "kernel"


class PhaseError(Exception):
    """An exception raised inside a phase, with the phase's name."""

    def __init__(self, phase: str, error: BaseException):
        super().__init__(f"{phase}: {type(error).__name__}: {error}")
        self.phase, self.error = phase, error


class PhaseClock:
    """Milliseconds spent in each phase of the case run inside ``with clock:`` (summed over repeats)."""

    def __init__(self):
        self.ms: dict[str, float] = {}
        self._token = None

    def __enter__(self):
        self._token = _CLOCK.set(self)
        return self

    def __exit__(self, *exc):
        _CLOCK.reset(self._token)

    def add(self, name: str, ms: float):
        self.ms[name] = self.ms.get(name, 0.0) + ms


_CLOCK: contextvars.ContextVar = contextvars.ContextVar("phase_clock", default=None)


def _settle():
    """Wait for queued GPU work, so a phase is charged for its own kernels and not the next phase's."""
    import torch
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def phase(name: str):
    clock = _CLOCK.get()
    started = time.perf_counter()
    try:
        yield
        if clock is not None:
            _settle()
    except (InputError, Unsupported, PhaseError):   # bad input, and a kernel's refusal, are not faults
        raise
    except Exception as e:
        raise PhaseError(name, e).with_traceback(e.__traceback__) from e
    finally:
        if clock is not None:
            clock.add(name, (time.perf_counter() - started) * 1e3)


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" \
        or "out of memory" in str(error).lower()


def last_frames(error: BaseException, n: int = 4) -> list[str]:
    """The last ``n`` frames of the traceback as ``file:line in function``, so a plug-in author finds the line."""
    frames = traceback.extract_tb(error.__traceback__)[-n:]
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in frames]
