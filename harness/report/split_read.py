"""A large results file read on several cores: cut at line starts into byte ranges, one range read in
this process and each other one in a forked worker at the same time, the parts handed back in file order.

Parsing rows and reducing them to lean records is most of a report's time on a large file (100,000
rows, 680 MB: about 4.5 s on one core of the 2-core CI box).  A worker hands its records back pickled,
which costs this process a tenth of what the worker saved it, so a file under ``MIN_BYTES`` is read
here alone.  Forking is Linux's: elsewhere every file is read in one process.
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

from ..cores import usable_cores

MIN_BYTES = 64 << 20      # a smaller file is read in one process: a fork and the records' return cost more
MAX_PARTS = 8             # every part comes back to this one process, which unpickles them in turn


def part_count(path, cores: int | None = None) -> int:
    """How many ranges to read ``path`` in: one per usable core, one where the file is small or
    there is no fork."""
    if not sys.platform.startswith("linux"):
        return 1
    try:
        size = os.path.getsize(path)
    except OSError:
        return 1                  # the reader says what is wrong with the path
    return max(1, min(usable_cores() if cores is None else cores, MAX_PARTS, size // MIN_BYTES))


def ranges(path, parts: int) -> list[tuple[int, int]]:
    """Byte ranges (start, end) that cover the file, each starting at a line start: ``parts`` of about
    equal size, or fewer where a line is longer than a part."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            f.seek(max(size * k // parts, cuts[-1]))
            f.readline()                          # on to the start of the next line
            cuts.append(f.tell())
    cuts.append(size)
    return [(start, end) for start, end in zip(cuts, cuts[1:]) if end > start]


def run_parts(calls: list[tuple], here, there) -> list:
    """``here(*calls[0])`` in this process and ``there(*args)`` for each other call in a forked worker,
    meanwhile; their results in order.  A worker's exception is raised here as the worker raised it;
    a worker that died (killed for memory) leaves its call to this process."""
    if len(calls) < 2:
        return [here(*args) for args in calls]
    with ProcessPoolExecutor(len(calls) - 1, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(there, *args) for args in calls[1:]]
        results = [here(*calls[0])]
        for future, args in zip(futures, calls[1:]):
            try:
                results.append(future.result())
            except BrokenProcessPool:
                results.append(there(*args))
    return results
