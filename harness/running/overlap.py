"""Backends one after another, overlapping at the seams: each starts once the one before has handed out every
chunk that may start.

Run strictly one after the other, every backend's tail (its last chunks, a warm-up case that runs for
seconds, its workers settling) left the other workers idle: in a warm `make verify` on a fresh H200 the
workers were busy 32% of the time spent running cases (docs/gpu-runs.md).  Here each backend runs its own
event loop (``isolation``) in a thread of its own, started as soon as the one before has no chunk left that may
start: chunks held back for a build (``warm_up``) do not hold it back, and a worker with nothing to do while they
wait goes to the next backend.  The workers the one before frees are kept (``WorkerPool.keep``) and the next
takes them up to the run's worker count (``WorkerPool.limit``); a held chunk, once free to start, takes the next
place that frees.  Every worker at work counts in every backend's memory gate, so
backends side by side hold no more than one would.  Each backend keeps its own rows, breaker, warm-up and
progress; rows are written as they come, so the results file interleaves backends at the seams.  A kernel with a
long first build goes first (``backends.launch_order``).
"""

import threading


def one_after_another(tasks: list):
    """Run ``tasks`` in order, each as ``task(drained, halt)`` in a thread of its own, the next started once
    the one before calls ``drained()`` (or returns).  An error in one (or a Ctrl-C here) sets ``halt``: no
    task starts after it and those running end as a Ctrl-C ends them.  Returns once every started task has;
    raises the first task's error, or the Ctrl-C."""
    halt, lock = threading.Event(), threading.Lock()
    go = [threading.Event() for _ in tasks] + [threading.Event()]
    go[0].set()
    errors = []           # the error that set ``halt``; the tasks it stopped raise nothing worth telling

    def body(i):
        try:
            tasks[i](go[i + 1].set, halt)
        except BaseException as e:      # re-raised below, in the main thread
            with lock:
                if not halt.is_set():
                    errors.append(e)
                halt.set()
        finally:
            go[i + 1].set()

    threads = []
    try:
        for i in range(len(tasks)):
            while not go[i].wait(0.1):
                pass
            if halt.is_set():
                break
            threads.append(threading.Thread(target=body, args=(i,), name=f"backend-{i}", daemon=True))
            threads[-1].start()
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    except KeyboardInterrupt:
        halt.set()
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]
