"""The one exception type for bad input: a case file, a flag, an impossible shape.

The CLI turns it into a single ``mla-verify: error: ...`` line and exit code 2,
so every message must name what is wrong and where.
"""


class InputError(Exception):
    """Bad input from the user; never a bug in mla-verify or in a kernel."""


class Unsupported(Exception):
    """Raised from a backend's ``run`` when the kernel's own API refuses the input (a plan-time
    ``ValueError``, a kernel returning False for a shape it declines).  The message quotes the
    kernel's reason; the harness records the case as ``unsupported``."""


class RejectedOutput(Exception):
    """A kernel's answer that cannot be compared at all: not a tensor, or on another device.  It fails
    the kernel's ``check`` (``out.type``, ``lse.device``, ...); the harness never handles it as its own."""

    def __init__(self, check: str, message: str):
        super().__init__(message)
        self.check = check
