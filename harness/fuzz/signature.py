"""How a case failed, as one comparable value: the row's status and what failed, read by the report's own
``findings.signature`` (so a campaign's failure and the report's finding are named alike)."""

import re

from ..recording.findings import signature as finding_signature
from ..recording.status import gates


def signature(row: dict) -> tuple[str, str, str, str] | None:
    """(status, what failed, kind, the raise's reason) of a row that fails the run; None for one that does
    not.  Where a NaN lands is left out: shrinking the batch moves it (every request, then some)."""
    if not gates(row["status"]):
        return None
    what, where, kind = finding_signature(row)
    return str(row["status"]), what, kind, where if kind == "raise" else ""


def describe(sig: tuple) -> str:
    """One line: ``fail: LSE over its bound``, ``error: IndexError: index N is out of bounds ...``."""
    status, what, kind, reason = sig
    if kind == "raise":
        return f"{status}: {reason}"
    told = {"bound": "over its bound", "nonfinite": "NaN/inf", "hidden": "finite where the reference is NaN/inf",
            "scenario": "failed"}[kind]
    return f"{status}: {what} {told}" if kind != "scenario" else f"{status}: {told} {what}"


def slug(sig: tuple, limit: int = 48) -> str:
    """The signature as a file name's first part: ``fail-lse-bound``, ``error-indexerror-index-n-is-out-of``."""
    status, what, kind, reason = sig
    parts = [status] + ([reason] if kind == "raise" else [what, kind])
    text = re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")
    return text[:limit].rstrip("-")
