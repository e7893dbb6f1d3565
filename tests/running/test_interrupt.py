"""Ctrl-C (or SIGTERM, SIGHUP): the run stops, the rows written so far stay, and the user sees one line and
exit 130.

A terminal sends SIGINT to every process of its foreground group: the run, and a worker still starting (a
started worker leads a group of its own, and the run stops it with whatever it started); the subprocess
runs below are started in a session of their own and interrupted the same way.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import BUILDING_PLUGIN, REPO, process_gone

from harness.recording.status import EXIT_INTERRUPTED
from harness.running import worker_pool

SLOW = textwrap.dedent('''
    import time
    from harness.backends.torch_backend import TorchBackend

    class Slow(TorchBackend):
        """A correct kernel that takes its time, so the run can be interrupted half way."""
        name = "slow"

        def run(self, inputs):
            time.sleep(0.3)
            return super().run(inputs)
''')


# Where SIGINT is ignored (pytest started under ``nohup`` or in the background of a shell without job
# control) this process can never raise KeyboardInterrupt on a signal: the tests of its own handling skip.
# The subprocess runs restore the default, as a terminal's shell does, so they hold either way.
SIGINT_IGNORED = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
needs_sigint = pytest.mark.skipif(SIGINT_IGNORED, reason="SIGINT is ignored in this pytest process (started "
                                  "with nohup or in the background), so a Ctrl-C cannot reach it")

RAISES = textwrap.dedent('''
    from harness.backends.torch_backend import TorchBackend

    class RaisesInterrupt(TorchBackend):
        """A kernel that raises KeyboardInterrupt itself: its case's error, not a user's Ctrl-C."""
        name = "raises-interrupt"

        def run(self, inputs):
            if inputs.q.shape[1] > 1:       # verify cases; decode cases pass
                raise KeyboardInterrupt("from the kernel")
            return super().run(inputs)
''')


def as_from_a_terminal():
    """A child's SIGINT and SIGHUP back to their defaults, as a shell with job control starts its commands
    (the test itself may run under ``nohup``, which ignores SIGHUP, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def interrupted_run(args: list, ready, signum=signal.SIGINT, **env) -> tuple[int, str]:
    """``mla-verify run ARGS --no-progress`` in a session of its own, sent ``signum`` once ``ready()`` as a
    terminal sends SIGINT (and ``timeout`` SIGTERM): to its process group.  Its exit code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args, "--no-progress"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=as_from_a_terminal, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 120
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


def rows_written(path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.parametrize("workers", ["0", "2"])
def test_ctrl_c_keeps_the_rows_and_says_one_line(tmp_path, workers):
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW)
    out = tmp_path / "r.jsonl"
    code, err = interrupted_run(["--suite", "smoke", "--backend", f"{plugin}:Slow", "--out", str(out),
                                 "--workers", workers, "--chunk", "1"], lambda: rows_written(out) >= 2)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines()[-1] == "mla-verify: interrupted; rows written so far are in the results file"
    assert len(err.splitlines()) <= 3, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]    # every line whole
    assert len(rows) >= 2 and {r["status"] for r in rows} == {"pass"}


def test_ctrl_c_while_backends_run_side_by_side_stops_them_all_and_says_one_line(tmp_path):
    """Two backends, each in its own thread (``overlap``): the Ctrl-C reaches the main thread, which halts
    both; every worker goes, the rows stay, one line."""
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW)
    out = tmp_path / "r.jsonl"
    code, err = interrupted_run(["--suite", "smoke", "--backend", f"{plugin}:Slow,torch", "--out", str(out),
                                 "--workers", "2", "--chunk", "1", "--device", "cpu"],
                                lambda: rows_written(out) >= 3)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "mla-verify: interrupted; rows written so far are in the results file"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 3 and {r["status"] for r in rows} == {"pass"}


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's state in /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_a_kill_while_a_kernel_builds_leaves_no_compiler_behind(tmp_path, signum):
    plugin, pid_file = tmp_path / "building.py", tmp_path / "child.pid"
    plugin.write_text(BUILDING_PLUGIN)
    code, _ = interrupted_run(["--suite", "smoke", "--case", "smoke/decode-bf16/0", "--backend",
                               f"{plugin}:Building", "--out", str(tmp_path / "r.jsonl"), "--workers", "1",
                               "--device", "cpu"], lambda: pid_file.exists() and pid_file.read_text(), signum,
                              CHILD_PID_FILE=str(pid_file))
    child = int(pid_file.read_text())
    assert code == EXIT_INTERRUPTED, signum
    assert process_gone(child), f"the compiler {child} outlived the interrupted run"


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_kernels_own_keyboard_interrupt_is_its_cases_error(tmp_path, workers):
    plugin = tmp_path / "raises.py"
    plugin.write_text(RAISES)
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", "smoke", "--backend",
                           f"{plugin}:RaisesInterrupt", "--out", str(out), "--workers", workers, "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=as_from_a_terminal)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12, "every case has its row: the run went on past the kernel's interrupt"
    errors = [r for r in rows if r["status"] == "error"]
    assert errors and all(r["reason"].startswith("KeyboardInterrupt: from the kernel") for r in errors)
    assert {r["status"] for r in rows} == {"error", "pass"}, "the decode cases still pass"


@needs_sigint
def test_a_worker_interrupted_while_it_starts_carries_on_quietly():
    """A worker still importing when Ctrl-C comes prints nothing and keeps going: it starts with SIGINT
    ignored, and the parent stops it."""
    spare = worker_pool.spawn()
    try:
        os.kill(spare.proc.pid, signal.SIGINT)        # at once: the worker is still starting
        time.sleep(0.5)
        assert spare.proc.is_alive()
        spare.conn.send(None)                         # not needed after all: it returns
        spare.proc.join(timeout=60)
        assert spare.proc.exitcode == 0
    finally:
        spare.proc.kill()
        spare.conn.close()
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN        # the parent's own handler is back


def test_ctrl_c_at_exit_kills_what_is_left_without_a_traceback(monkeypatch):
    pool = worker_pool.WorkerPool()
    pool.spares = [spare := worker_pool.spawn()]

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(pool, "stop_spares", interrupted)
    pool.close()                                        # raises nothing
    spare.proc.join(timeout=10)
    assert spare.proc.exitcode == -signal.SIGKILL
    spare.conn.close()


def test_sigterm_and_sighup_are_handled_as_ctrl_c_where_their_default_would_end_the_run():
    """In a process of its own, as the CLI's: SIGHUP takes the path SIGTERM's test above takes."""
    code = ("import signal; from harness import interrupts; interrupts.watch_sigint(); "
            "print(all(signal.getsignal(s) is interrupts._on_sigint for s in interrupts.STOPPING), "
            "sorted(s.name for s in interrupts.STOPPING))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         preexec_fn=as_from_a_terminal).stdout
    assert out.strip() == "True ['SIGHUP', 'SIGTERM']"
