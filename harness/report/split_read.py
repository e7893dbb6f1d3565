"""A large results file read on several cores: cut at line starts into byte ranges, one range read in
this process and each other one in a forked child at the same time, the parts handed back in file order.

Parsing rows and reducing them to lean records is most of a report's time on a large file (100,000
rows, 680 MB: about 4.3 s of CPU on the 2-core CI box).  A child hands its records back pickled,
which costs a tenth of what it saved, so a file under ``MIN_BYTES`` is read here alone.  Forking is
Linux's: elsewhere every file is read in one process.
"""

import os

from ..cores import usable_cores
from .forked import CAN_FORK, Forked

MIN_BYTES = 64 << 20      # a smaller file is read in one process: a fork and the records' return cost more
MAX_PARTS = 8             # every part comes back to this one process, which unpickles them in turn
FIRST_SHARE = 1.15        # how much larger the range read here is than a worker's


def part_count(path, cores: int | None = None) -> int:
    """How many ranges to read ``path`` in: one per usable core, one where the file is small or
    there is no fork."""
    if not CAN_FORK:
        return 1
    try:
        size = os.path.getsize(path)
    except OSError:
        return 1                  # the reader says what is wrong with the path
    return max(1, min(usable_cores() if cores is None else cores, MAX_PARTS, size // MIN_BYTES))


def ranges(path, parts: int) -> list[tuple[int, int]]:
    """Byte ranges (start, end) that cover the file, each starting at a line start: ``parts`` of them, the
    first (read in this process) ``FIRST_SHARE`` times the size of the others (read in workers, which
    also pickle their records back: 0.3 s of 2.5 s), or fewer where a line is longer than a range."""
    size = os.path.getsize(path)
    shares = [FIRST_SHARE] + [1.0] * (parts - 1)
    cuts, taken = [0], 0.0
    with open(path, "rb") as f:
        for share in shares[:-1]:
            taken += share
            f.seek(max(int(size * taken / sum(shares)), cuts[-1]))
            f.readline()                          # on to the start of the next line
            cuts.append(f.tell())
    cuts.append(size)
    return [(start, end) for start, end in zip(cuts, cuts[1:]) if end > start]


def run_parts(calls: list[tuple], here, there) -> list:
    """``here(*calls[0])`` in this process and ``there(*args)`` for each other call in a forked child
    (``forked``), meanwhile; their results in order.  A child's exception is raised here."""
    children = [Forked(there, *args) for args in calls[1:]]
    try:
        return [here(*args) for args in calls[:1]] + [child.result() for child in children]
    finally:
        for child in children:      # any not answered: the file went the slow way, or the user interrupted
            child.cancel()
