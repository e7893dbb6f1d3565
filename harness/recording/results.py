"""The results file: JSON Lines, one row per case, appended and flushed as it goes.

A row carries everything a report needs, so reports are rebuilt from the file
without rerunning anything.  ``load`` returns a pandas DataFrame.

Reading and what a row is: ``results_read``; writing, its lock and the output paths: ``results_write``.
Here: when a kept row may stand for a case (``why_run_again``), for ``run --resume``.  The names
readers and writers import from ``results`` are re-exported here (``read_rows``, ``row_problem``,
``scan``, ``ResultsWriter``, ``check_output_path``, ``check_distinct_outputs``, ``STATUSES``).
"""

import hashlib
import json

from .results_read import ROW_KEYS, Scan, json_safe, read_rows, row_problem, scan  # noqa: F401  (re-exported)
from .results_write import ResultsWriter, check_distinct_outputs, check_output_path  # noqa: F401
from .status import STATUSES  # noqa: F401  (re-exported: readers of results know the vocabulary here)

KERNEL_KEYS = ("package", "version", "api")     # of a backend's info(): what identifies the kernel


def case_hash(case_definition: dict) -> str:
    """A stable hash of a case's resolved definition (``Case.to_dict()``, seed included); where its
    suite file lies is no part of it."""
    definition = {k: v for k, v in case_definition.items() if k != "suite_file"}
    text = json.dumps(json_safe(definition), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def kernel_identity(info) -> dict:
    """The part of a backend's ``info()`` that says which kernel ran (other keys, timings, may vary)."""
    info = info if isinstance(info, dict) else {}
    return {k: json_safe(info.get(k)) for k in KERNEL_KEYS}


def why_run_again(row: dict, backend_info: dict, case_digest: str, version: str) -> str | None:
    """None when a kept row was made by this kernel, on this case definition, by this mla-verify;
    otherwise the reason its case runs again, as the resume line says it."""
    if not all(key in row for key in ("backend_info", "case_hash", "mla_verify_version")):
        return "row has no identity"
    old, new = kernel_identity(row["backend_info"]), kernel_identity(backend_info)
    if old != new:
        changed = [k for k in KERNEL_KEYS if old[k] != new[k]]
        key = "version" if "version" in changed else changed[0]
        return f"kernel changed: {old[key]} -> {new[key]}" + ("" if key == "version" else f" ({key})")
    if row["mla_verify_version"] != version:
        return f"mla-verify changed: {row['mla_verify_version']} -> {version}"
    if row["case_hash"] != case_digest:
        return "case definition changed"
    return None


def failure_lines(row: dict) -> list[str]:
    """A row's one-line failure messages, or for a row without any (a raise, a crash) its status and reason."""
    return row.get("messages") or [f"{row['case_id']}: {row['status']}: {row.get('reason')}"]


def load(*paths):
    """All rows of the given files as one pandas DataFrame, flattened (``metrics.out.cos_diff``)."""
    import pandas as pd
    rows = [r for p in paths for r in read_rows(p)]
    return pd.json_normalize(rows)
