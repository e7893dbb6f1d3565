"""Cyclic garbage collection paused while the report is built: its records and frames hold no cycles.

Python collects each time 700 more objects are alive than before, walking the young ones.  Reading
100,000 rows piles up a million objects: collecting while they pile up was 15% of the read, and so
was the first collection after, which walked them all as young objects.  Here nothing is collected
inside, and after, every live object goes to the oldest generation at once (``gc.freeze``, then
``unfreeze``), whose collection waits until it has grown by a quarter.
"""

import gc
from contextlib import contextmanager


@contextmanager
def uncollected():
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
            gc.unfreeze()
