"""Escaping and number formats shared by the page and its charts."""

import html
import math

from ..recording.findings import ratio  # noqa: F401  (re-exported: defined with the findings that quote it)


def esc(value) -> str:
    """HTML-escaped text.  '://' is written as entities so that no URL appears in the file's
    source, even inside an error message: the page must not look like it fetches anything."""
    return html.escape(str(value), quote=True).replace("://", ":&#47;&#47;")


def sci(v) -> str:
    """A raw value (an element, an error): three significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.4g}"


def short(v) -> str:
    """The shortest text that keeps a heatmap cell's value readable in its tooltip."""
    if isinstance(v, str):
        return v
    if v is None or math.isnan(v):
        return "nan"
    return "inf" if math.isinf(v) else f"{v:.3g}"


def seconds(s: float) -> str:
    if s is None or math.isnan(s):
        return "–"
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(s, 60)
    return f"{int(m)} min {s:.0f} s" if m < 60 else f"{int(m // 60)} h {int(m % 60)} min"


def int_text(value) -> str:
    """A count read from a row as text: its integer, or "?" where the row has none."""
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return "?"
