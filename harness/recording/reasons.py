"""Reasons grouped for a short list: the console summary's unsupported lines and the report's table.

A reason often carries the case's own numbers ("too large for a CPU run: 1.89e+08 cached KV
elements, ..."), so counting reasons as written makes every case its own line, and a list cut at
five said nothing of the rest.  Here reasons that differ only in their numbers are one group: the
numbers the group's reasons share are kept, the ones that vary read "N".  A cut list ends with
``more_text``: how many groups and cases it left out, in the words every cut list of the
console ends with (``and_more``).  Pure Python, so ``report`` stays light.
"""

import re
from collections import Counter
from dataclasses import dataclass

# A number as reasons write them: 7, 1.5, 1,024, 1.89e+08, 0x7f, both sides of 4x128.  Digits glued to a
# name (fp8_e4m3, sm_90, bf16) are part of the name: a dtype or an architecture is not a size.
NUMBER = re.compile(r"(?:(?<![\w.])|(?<=\dx))(?:0x[0-9a-fA-F]+|\d+(?:[.,]\d+)*(?:[eE][+-]?\d+)?)")
NO_REASON = "no reason recorded"


def blank_numbers(text: str, blank: str = "N") -> str:
    """The text with every number replaced by ``blank``."""
    return NUMBER.sub(blank, text)


@dataclass(frozen=True)
class ReasonGroup:
    text: str          # the reasons' common form: numbers that differ between them read "N"
    cases: int         # rows that gave one of these reasons
    variants: int      # distinct reasons as written (1: every case said exactly this)


@dataclass(frozen=True)
class Grouped:
    shown: list        # ReasonGroup, most cases first
    more_groups: int   # groups left out of ``shown``
    more_cases: int    # the cases those groups cover
    cases: int         # every case counted

    def more_text(self, where: str = "") -> str | None:
        """'... and 3 more reason(s) (12 cases)' for a cut list, None when nothing was left out."""
        return and_more(self.more_groups, "reason", self.more_cases, where)


def and_more(left_out: int, noun: str, cases: int | None = None, where: str = "") -> str | None:
    """The line that ends a cut list: '... and 3 more reason(s) (12 cases) in r.jsonl'; None when
    nothing was left out.  ``cases``: the cases the left-out entries cover, where each covers several."""
    if not left_out:
        return None
    covered = "" if cases is None else f" ({cases} case{'s' if cases != 1 else ''})"
    return f"... and {left_out} more {noun}(s){covered}" + (f" {where}" if where else "")


def _common_form(texts: list[str], numbers: list[list[str]]) -> str:
    """The group's text: each number kept where every reason has the same one, else "N"."""
    out = []
    for k, part in enumerate(texts):
        out.append(part)
        if k < len(numbers[0]):
            values = {row[k] for row in numbers}
            out.append(values.pop() if len(values) == 1 else "N")
    return "".join(out)


def group_reasons(reasons, top: int) -> Grouped:
    """Reasons (a string or None per case) grouped by their text with the numbers set aside; the ``top``
    largest groups, and a count of what is left out."""
    counts = Counter((r or "").strip() or NO_REASON for r in reasons)
    groups: dict[tuple, list[tuple[str, int]]] = {}
    for reason, n in counts.items():
        groups.setdefault(tuple(NUMBER.split(reason)), []).append((reason, n))
    made = []
    for texts, members in groups.items():
        numbers = [NUMBER.findall(reason) for reason, _ in members]
        made.append(ReasonGroup(_common_form(list(texts), numbers), sum(n for _, n in members), len(members)))
    made.sort(key=lambda g: (-g.cases, g.text))
    shown, rest = made[:max(top, 0)], made[max(top, 0):]
    return Grouped(shown, len(rest), sum(g.cases for g in rest), sum(counts.values()))
