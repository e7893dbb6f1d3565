"""Which phase of a case raised: the kernel's fault or the harness's.

A case runs in phases: ``inputs`` (build q, the pool and the tables), ``kernel``
(the backend's call), ``oracle`` (the float64 reference) and ``compare``.  An
exception in ``kernel`` is the kernel's ``error``; one anywhere else is a
``harness_error``, never blamed on the kernel.

A device fault is asynchronous: it surfaces at the next wait.  A case run alone
waits for the device before and after its kernel call (``settle(device, waits=True)``),
not at every phase's end: a fault in the harness's own work surfaces at the wait before
the next launch or at the comparison's transfer, outside the kernel phase, so it
is still the harness's; one in the kernel surfaces in the kernel phase.  A case
in a chunk of several does not wait around its kernel: each wait lets the GPU
switch to another worker's context, and with several workers that cost more than
the waits themselves (docs/archive/gpu-runs-history.md).  Should such a chunk lose its device,
its faults cannot be placed, so none is: each of its cases runs again alone
(``chunk.run_chunk``, ``isolation``).  Whether a case waits is an argument, ``waits``,
handed from ``chunk.run_chunk`` through ``scenarios.start`` to each launch; the phase
clock (a context variable) only says which phase time is charged to.
"""

import contextvars
import time
import traceback
from contextlib import contextmanager

from .errors import InputError, Unsupported
from .interrupts import is_the_codes_own

KERNEL = "kernel"


class PhaseError(Exception):
    """An exception raised inside a phase, with the phase's name."""

    def __init__(self, phase: str, error: BaseException):
        super().__init__(f"{phase}: {type(error).__name__}: {error}")
        self.phase, self.error = phase, error


class PhaseClock:
    """Milliseconds spent in each phase of the case run inside ``with clock:`` (summed over repeats).

    Where CUDA is in use a phase is timed with CUDA events, on the device's timeline: from when the
    device reached the phase's start to when it finished the phase's work.  Nothing waits for that:
    the host runs ahead, queueing the next case's work while the device works, and the times are
    read once the device is done with them (``read``).  Without CUDA, host wall-clock time.
    """

    def __init__(self):
        self.ms: dict[str, float] = {}
        self._pending = []        # (name, start mark, end mark): read by ``read``
        self._token = None
        self.stream = None        # the CUDA stream events are recorded on, looked up once

    def __enter__(self):
        self._token = _CLOCK.set(self)
        return self

    def __exit__(self, *exc):
        _CLOCK.reset(self._token)

    def add(self, name: str, ms: float):
        self.ms[name] = self.ms.get(name, 0.0) + ms

    def mark(self) -> "_Mark":
        import torch
        if self.stream is None and torch.cuda.is_initialized():
            try:
                self.stream = torch.cuda.current_stream()
            except Exception:     # a context lost to a sticky error: host time only
                pass
        return _Mark.now(self.stream)

    def close(self, name: str, start: "_Mark"):
        self._pending.append((name, start, self.mark()))

    def read(self) -> dict:
        """Every phase's milliseconds, once the device has finished them (host time for a phase whose
        events cannot be read: a context lost to a sticky CUDA error)."""
        for name, start, end in self._pending:
            self.add(name, end.ms_since(start))
        self._pending.clear()
        return dict(self.ms)


class _Mark:
    """A point in time: on the host, and as a CUDA event on ``stream`` when one is given."""

    def __init__(self, seconds: float, event):
        self.seconds, self.event = seconds, event

    @classmethod
    def now(cls, stream=None) -> "_Mark":
        import torch
        event = None
        if stream is not None:
            try:
                event = torch.cuda.Event(enable_timing=True)
                event.record(stream)
            except Exception:     # a context lost to a sticky error: host time only
                event = None
        return cls(time.perf_counter(), event)

    def ms_since(self, start: "_Mark") -> float:
        """Milliseconds from ``start`` to here: on the device's timeline once it has got here, where both
        have events that can be read; host time otherwise."""
        if start.event is not None and self.event is not None:
            try:
                self.event.synchronize()
                return start.event.elapsed_time(self.event)
            except Exception:
                pass
        return (self.seconds - start.seconds) * 1e3


_CLOCK: contextvars.ContextVar = contextvars.ContextVar("phase_clock", default=None)   # timing only


def settle(device, waits: bool):
    """With ``waits`` (a case run alone), wait for the device, so that a fault of the work queued so far
    surfaces here, in the phase that queued it.  A case in a chunk of several does not (the module's note)."""
    import torch
    if waits and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class KernelTime:
    """The milliseconds of one kernel call, read with ``float()`` once the call is done.  On a GPU, CUDA
    events around the call on the device's timeline, so timing it needs no wait; host time otherwise,
    and where the events cannot be read (a context lost to a sticky error)."""

    def __init__(self, device):
        import torch
        self._stream = torch.cuda.current_stream() if torch.device(device).type == "cuda" else None
        self._start = _Mark.now(self._stream)
        self._end = self._start

    def stop(self) -> "KernelTime":
        self._end = _Mark.now(self._stream)
        return self

    def __float__(self) -> float:
        return self._end.ms_since(self._start)


@contextmanager
def phase(name: str):
    clock = _CLOCK.get()
    start = clock.mark() if clock is not None else None
    try:
        yield
    except (InputError, Unsupported, PhaseError):   # bad input, and a kernel's refusal, are not faults
        raise
    except BaseException as e:    # a kernel's own KeyboardInterrupt too; a user's Ctrl-C stops the run
        if not is_the_codes_own(e):
            raise
        raise PhaseError(name, e).with_traceback(e.__traceback__) from e
    finally:
        if clock is not None:
            clock.close(name, start)


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" \
        or "out of memory" in str(error).lower()


def last_frames(error: BaseException, n: int = 4) -> list[str]:
    """The last ``n`` frames of the traceback as ``file:line in function``, so a plug-in author finds the line."""
    frames = traceback.extract_tb(error.__traceback__)[-n:]
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in frames]
