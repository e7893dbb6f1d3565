"""The HTML report: one self-contained file built from results files alone.

``rows`` streams result rows into lean records; ``build`` makes them one pandas
frame and aggregates, with ``findings`` (failing rows clustered by signature) and
``scoreboard`` (one line per backend); ``baseline`` marks what changed against older
results; ``page``, ``matrix`` and ``drilldown`` render, drawing charts with ``svg``.
``write_report`` is the one entry point.
"""

import os
from pathlib import Path

from ..errors import InputError
from . import baseline as baseline_mod
from .build import choose_drilldowns, collect, frame
from .page import render
from .rows import load

MAX_DRILLDOWNS = 50   # each is ~10-40 KB; the table lists every case regardless


def build(results, baselines=(), max_drilldowns: int = MAX_DRILLDOWNS,
          factor: float = baseline_mod.FACTOR, floor: float = baseline_mod.FLOOR):
    """The report's data from results files (and optional baseline files)."""
    data = collect(results)
    if baselines:
        base, _ = frame(load(baselines).records)
        data.baseline = baseline_mod.diff_against(data.df, base, factor, floor)
        data.baseline["sources"] = [str(p) for p in baselines]
    data.drill, data.drill_total = choose_drilldowns(data.df, max_drilldowns)
    return data


def write_report(results, out, baselines=(), max_drilldowns: int = MAX_DRILLDOWNS,
                 title: str = "mla-verify report", factor: float = baseline_mod.FACTOR,
                 floor: float = baseline_mod.FLOOR) -> Path:
    """Build and write the report; returns its path and data.  Bad paths raise ``InputError``."""
    data = build(results, baselines, max_drilldowns, factor, floor)
    html = render(data, title)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)       # a reader never sees half a report
    except OSError as e:
        try:                        # a read-only filesystem refuses the cleanup too
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise InputError(f"cannot write report {out}: {e.strerror or e}") from None
    return out, data


__all__ = ["MAX_DRILLDOWNS", "build", "write_report"]
