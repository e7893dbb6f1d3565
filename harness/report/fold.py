"""Long tables fold: the first few dozen lines show, the rest are one click away.

The lines past ``keep`` carry ``hidden`` in the HTML itself, so the page opens folded before
any script runs; ``refold`` (assets.JS) unfolds them and re-applies a table's filter.
"""

from .text import esc


def fold(table_head: str, lines: list[str], keep: int, noun: str, note: str = "") -> str:
    """``table_head``: the ``<table ...><thead>...</thead>`` opening; ``lines``: whole ``<tr ...>`` strings."""
    shown = [line if k < keep or line.startswith("<tr hidden") else line.replace("<tr", "<tr hidden", 1)
             for k, line in enumerate(lines)]
    table = table_head.replace("<table", f'<table data-keep="{keep}"', 1) + f'<tbody>{"".join(shown)}</tbody></table>'
    if len(lines) <= keep:
        return table + note
    return (table + f'<p class="fold"><button type="button" class="chip" onclick="unfold(this)" '
            f'data-all="show all {len(lines):,} {esc(noun)}" data-less="show the first {keep}">show all '
            f'{len(lines):,} {esc(noun)}</button> {note}</p>')
