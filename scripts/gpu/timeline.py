"""Where a run's wall time goes, seen from the parent: when each worker was ready, got each chunk and sent
its rows back.  The time-stamps are installed inside ``run_cmd.run``, after the spares have started, so the
run starts as the CLI starts it.

Usage: python scripts/gpu/timeline.py run --suite flashmla-upstream --backend flashmla --no-progress --out x.jsonl
(any ``run`` arguments).  After the run's own summary, one line per worker: ready, first chunk, chunks, busy
seconds (chunk sent to rows back), the gaps between its chunks, the parent's time taking its rows, and when
its last rows came; all in seconds from the start of ``run_cases`` (the run's clock).
"""
import collections
import sys
import time

events, run_started = [], []


def stamp():
    from harness.running import isolation, runner, worker
    send, take, run_cases = worker.Worker.send, isolation._Run.take, runner.run_cases

    def timed_send(self, chunk, holds):
        events.append((time.perf_counter(), id(self), "send", 0.0))
        return send(self, chunk, holds)

    def timed_take(self, w, kind, payload):
        t = time.perf_counter()
        take(self, w, kind, payload)
        events.append((t, id(w), kind, time.perf_counter() - t))

    def timed_run_cases(*args, **kwargs):
        run_started.append(time.perf_counter())
        return run_cases(*args, **kwargs)
    worker.Worker.send, isolation._Run.take, runner.run_cases = timed_send, timed_take, timed_run_cases


def report():
    t0 = run_started[0]
    by_worker = collections.defaultdict(list)
    for t, w, kind, took in events:
        by_worker[w].append((t - t0, kind, took))
    for n, seen in enumerate(by_worker.values()):
        sends = [t for t, kind, _ in seen if kind == "send"]
        rows = [(t, took) for t, kind, took in seen if kind == "rows"]
        ready = next((t for t, kind, _ in seen if kind == "ready"), float("nan"))
        busy = sum(r - s for s, (r, _) in zip(sends, rows))
        gaps = [s - r for s, (r, _) in zip(sends[1:], rows)]
        print(f"worker {n}: ready {ready:.3f} s, first chunk {sends[0]:.3f} s, {len(sends)} chunks, busy {busy:.2f} s, "
              f"gaps {sum(gaps):.3f} s (longest {max(gaps, default=0) * 1e3:.1f} ms), taking its rows "
              f"{sum(took for _, took in rows):.3f} s, last rows at {rows[-1][0] if rows else 0:.3f} s")


def main():
    import harness.commands.run_cmd as run_cmd
    from harness import cli
    run = run_cmd.run

    def stamped_run(*args, **kwargs):
        stamp()
        return run(*args, **kwargs)
    run_cmd.run = stamped_run
    code = cli.main(sys.argv[1:])
    if run_started:
        report()
    sys.exit(code)


if __name__ == "__main__":      # the workers are spawned: they import this module, and must not run it
    main()
