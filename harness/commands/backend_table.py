"""One backend as ``mla-verify list`` shows it: a table of labelled rows, wrapped to ``WIDTH`` columns.

Rows: its package and version, or why it does not import and the command that installs it; whether it
can run here (a CUDA device or not, apart from the package); what it runs, its limits and conventions in
words (``capability_words``), the sparse entry point's likewise; last, the backend's own availability note.
"""

import textwrap

from .capability_words import DENSE, DEVICES, QUOTED, SPARSE, in_words
from .kernel_packages import package_state

WIDTH = 100
LABEL = 22          # "  sparse conventions  ": the widest label, with its indent


def wrapped(first: str, text: str, rest: str, width: int = WIDTH) -> list[str]:
    """``text`` after ``first``, continued after ``rest``, no line over ``width`` (long words are cut)."""
    lines = textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest,
                          break_on_hyphens=False)
    return lines or [first.rstrip()]


def row(label: str, text: str) -> list[str]:
    return wrapped(f"  {label:<{LABEL - 2}}", text, " " * LABEL)


def device_here() -> tuple[str, str]:
    """The device a run here uses, and how to say it."""
    import torch
    if torch.cuda.is_available():
        return "cuda", f"CUDA device {torch.cuda.get_device_name()}"
    return "cpu", "no CUDA device"


def device_row(devices, here: tuple[str, str]) -> str:
    device, said = here
    return f"runs here on {device} ({said})" if device in devices else f"cannot run here: {said}"


def capability_rows(described: dict, words: dict, prefix: str, here) -> list[str]:
    lines = []
    for heading, phrases in in_words(described, words).items():
        if heading == DEVICES:
            phrases = [f"{phrases[0]}; {device_row(described['devices'], here)}"]
        if heading == QUOTED:     # each quote on rows of its own: they are long
            lines += [line for quote in phrases for line in row(prefix + heading, quote)]
        else:
            lines += row(prefix + heading, "; ".join(phrases))
    return lines


def package_rows(backend, builtin: bool) -> list[str]:
    state = package_state(backend) if builtin else None
    if state is None:      # a plug-in or a mutant: what it says of itself
        info = backend.info()
        return row("package", f"{info.get('package')} {info.get('version') or ''} (as the backend says)".strip())
    lines = row("package", state.text)
    if not state.imports:
        lines += row("install", state.install)
    return lines


def backend_block(title: str, backend, builtin: bool, here) -> list[str]:
    """The rows for one loaded backend; ``builtin``: one of ``backends.BUILTIN``, whose package and install
    command its class declares (a plug-in's inherited declarations would name another's package)."""
    from ..backends.base import Feature  # torch: not at import (list_cmd is light at import)
    lines = [title, *package_rows(backend, builtin)]
    lines += capability_rows(backend.capabilities.describe(), DENSE, "", here)
    if backend.supports(Feature.SPARSE):        # a sparse entry point (run_sparse): docs/sparse.md
        lines += capability_rows(backend.capabilities.sparse.describe(), SPARSE, "sparse ", here)
    note = backend.availability()
    if note is not None:
        lines += row("backend says", note)
    return lines


def unloadable_block(name: str, error: Exception) -> list[str]:
    """A built-in backend whose module raised on import: its class, and so its install command, is unread."""
    return [name, *row("cannot load", f"{type(error).__name__}: {error}")]
