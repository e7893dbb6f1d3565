"""A worker is killed with its process group, the compilers it started included, but only while its number is
its own: once it has been waited for, that number may lead a stranger's group (``worker_process.kill_worker``)."""

import multiprocessing as mp
import os
import signal
import time

from harness.running import worker_process


def _lead_and_sleep():
    worker_process.lead_own_group()
    time.sleep(60)


def _exit_at_once():
    os._exit(0)


def test_a_worker_is_its_groups_until_it_is_reaped():
    ctx = mp.get_context("spawn")
    alive = ctx.Process(target=_lead_and_sleep, daemon=True)
    alive.start()
    deadline = time.monotonic() + 30
    while os.getpgid(alive.pid) != alive.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getpgid(alive.pid) == alive.pid                   # it leads a group of its own
    assert worker_process._unreaped(alive)
    worker_process.kill_worker(alive)
    alive.join(timeout=30)
    assert alive.exitcode == -signal.SIGKILL
    assert not worker_process._unreaped(alive)                  # waited for: its number is no longer its own

    dead = ctx.Process(target=_exit_at_once, daemon=True)
    dead.start()
    time.sleep(0.5)                                              # exited, not yet waited for: a zombie
    assert worker_process._unreaped(dead)                        # asking does not reap it
    assert worker_process._unreaped(dead)
    dead.join()
    assert dead.exitcode == 0 and not worker_process._unreaped(dead)
    worker_process.kill_worker(dead)                             # no group signal now: nothing raised
