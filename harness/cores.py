"""Sharing this machine's cores: how many threads a CPU worker gets, and OpenMP told not to spin.

Nothing here imports torch: ``passive_openmp`` must run before torch loads its OpenMP runtime, which
reads ``OMP_WAIT_POLICY`` once, when it loads.
"""

import os

# OpenMP's threads spin at a barrier, waiting for the slowest.  When another process holds a core the
# thread they wait for is descheduled and the spinning takes the time it needs: on the 2-core CI machine,
# with other work on the cores, smoke+decode took 23.0 s with one worker and 8.8 s with OMP_WAIT_POLICY
# set to PASSIVE (docs/speed.md).
WAIT_POLICY = ("OMP_WAIT_POLICY", "PASSIVE")


def passive_openmp():
    """OpenMP's threads sleep when they wait, unless the user's environment already says otherwise.
    Called before torch is imported, in the CLI and in every worker (their children inherit it)."""
    os.environ.setdefault(*WAIT_POLICY)


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's or ``taskset``'s share), not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # no affinity call on this platform
        return os.cpu_count() or 1


def cpu_threads(parent_threads: int, workers: int, cores: int) -> int:
    """A CPU worker's torch threads: the parent's count (a float64 reduction splits its work over the
    threads, so the same count gives the same last bits as a run in this process), cut to its share of
    the cores, so that workers x threads stays within them.  Threads beyond the cores wait on each
    other: on 2 cores, 2 workers of 2 threads each ran ``make verify``'s suites 13x slower than one."""
    return max(1, min(parent_threads, cores // max(workers, 1)))


def cpu_workers(asked: int, cores: int) -> tuple[int, str | None]:
    """CPU workers for ``--workers asked``, and a note when that is cut: at most one per core.  Each
    computes flat out, so more only share the same cores, and each imports torch first (on 2 cores
    ``--workers 64`` took 55-103 s for a suite of 2 s)."""
    if asked <= cores:
        return asked, None
    return cores, (f"--workers {asked}: this machine has {cores} core(s) to run on, and a CPU worker keeps one "
                   f"busy; running {cores} worker process(es)")
