"""Workers are quiet and leave nothing behind: what one writes to stderr goes into its rows, not the
console, and the named semaphores of a worker killed mid-case are unlinked, with no resource-tracker
warning at exit.

Runs are real subprocesses: the resource tracker's warning comes at the very end, from its own
process, on the run's stderr.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import BUILDING_PLUGIN, REPO, heads_keyed_suite, process_gone, run_cli

SUITE = heads_keyed_suite(seed=3, drafts=2, heads=[4, 5, 6])   # case g/1 has 5 heads: the plug-in keys on it

NOISY = textwrap.dedent('''
    import multiprocessing, os, signal, sys
    from harness.backends.torch_backend import TorchBackend

    class Noisy(TorchBackend):
        """Writes to stderr from Python and from fd 2; with KILL set, holds a named semaphore and kills its
        own process on 5 heads."""
        name = "noisy"
        KILL = False

        def run(self, inputs):
            heads = inputs.q.shape[2]
            sys.stderr.write(f"python-stderr-{heads}\\n")
            os.write(2, f"fd2-write-{heads}\\n".encode())
            if self.KILL:
                self.lock = multiprocessing.get_context("spawn").Lock()      # a named POSIX semaphore
                sys.stderr.write(f"semaphore {self.lock._semlock.name}\\n")
                sys.stderr.flush()
                if heads == 5:
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().run(inputs)

    class Killed(Noisy):
        name = "killed"
        KILL = True
''')

SHM = Path("/dev/shm")


def run(tmp_path, backend: str, *extra):
    (tmp_path / "s.toml").write_text(SUITE)
    (tmp_path / "noisy.py").write_text(NOISY)
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", str(tmp_path / "s.toml"),
                           "--backend", f"{tmp_path / 'noisy.py'}:{backend}", "--out", str(out), "--workers", "1",
                           "--chunk", "1", "--no-progress", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    rows = {r["case_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    return proc, rows


def test_what_a_worker_writes_to_stderr_is_in_its_rows_not_on_the_console(tmp_path):
    proc, rows = run(tmp_path, "Noisy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    console = proc.stdout + proc.stderr
    assert "python-stderr" not in console and "fd2-write" not in console, console
    for heads, case in ((4, "s/g/0"), (5, "s/g/1"), (6, "s/g/2")):
        said = rows[case]["worker_stderr"]              # a chunk of one case: what that case's kernel wrote
        assert f"python-stderr-{heads}\n" in said and f"fd2-write-{heads}\n" in said, said
        assert all(f"-{other}\n" not in said for other in (4, 5, 6) if other != heads)


@pytest.mark.skipif(not SHM.is_dir(), reason="named semaphores are files under /dev/shm on Linux only")
def test_a_worker_killed_mid_case_leaves_no_semaphore_and_no_warning(tmp_path):
    before = {p.name for p in SHM.glob("sem.mp-*")}
    proc, rows = run(tmp_path, "Killed")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rows["s/g/1"]["status"] == "crash" and "SIGKILL" in rows["s/g/1"]["reason"]
    assert [rows[c]["status"] for c in ("s/g/0", "s/g/2")] == ["pass", "pass"]
    assert "resource_tracker" not in proc.stderr and "leaked semaphore" not in proc.stderr, proc.stderr
    # the killed worker's last words are the crash row's, its semaphore's name among them
    said = rows["s/g/1"]["worker_stderr"]
    assert "fd2-write-5" in said
    names = {line.split()[1] for r in rows.values() for line in r["worker_stderr"].splitlines()
             if line.startswith("semaphore ")}
    assert len(names) == 3                                         # one per case
    # new since the run started, and the run's own (other processes here may make theirs meanwhile)
    left = ({p.name for p in SHM.glob("sem.mp-*")} - before) & {f"sem.{name.lstrip('/')}" for name in names}
    assert not left, f"the run left {sorted(left)} in /dev/shm"


def test_a_worker_that_dies_while_it_starts_says_why_in_one_line(tmp_path):
    plugin = tmp_path / "dies.py"
    plugin.write_text(textwrap.dedent('''
        import multiprocessing, os, sys
        from harness.backends.torch_backend import TorchBackend

        if multiprocessing.parent_process() is not None:      # in the worker, not the parent that checks it
            sys.stderr.write("warming up\\nthe driver library is missing here\\n")
            sys.stderr.flush()
            os._exit(3)

        class Dies(TorchBackend):
            name = "dies"
    '''))
    code, out, err = run_cli(["run", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--backend",
                              f"{plugin}:Dies", "--device", "cpu", "--workers", "1", "--no-progress",
                              "--out", tmp_path / "r.jsonl"])
    assert code == 2 and "Traceback" not in err + out and "warming up" not in err, err + out
    last = err.strip().splitlines()[-1]              # the error line: what the worker said last, and no more
    assert last.startswith("mla-verify: error: backend ") and last.endswith(
        "worker failed to start (worker exited with code 3): the driver library is missing here"), err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state in /proc (Linux)")
def test_a_killed_worker_takes_the_compiler_it_started_with_it(tmp_path):
    """A JIT's compiler (here a stand-in, ``sleep``) ignores SIGINT as its worker does; killed with the
    worker's process group, it does not compile on for a run that is over."""
    (tmp_path / "building.py").write_text(BUILDING_PLUGIN)
    pid_file = tmp_path / "child.pid"
    (tmp_path / "s.toml").write_text(SUITE)
    with open(tmp_path / "console", "w") as console:     # a file, not a pipe a leftover child would hold open
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--suite", str(tmp_path / "s.toml"),
                               "--case", "s/g/0", "--backend", f"{tmp_path / 'building.py'}:Building", "--out",
                               str(tmp_path / "r.jsonl"), "--workers", "1", "--timeout", "1", "--no-progress",
                               "--device", "cpu"], cwd=REPO, stdout=console, stderr=console, timeout=300,
                              env={**os.environ, "CHILD_PID_FILE": str(pid_file)})
    assert proc.returncode == 1 and json.loads((tmp_path / "r.jsonl").read_text())["status"] == "timeout"
    child = int(pid_file.read_text())
    assert process_gone(child), f"the worker's child {child} outlived the run"


CUT_OFF = textwrap.dedent('''
    import multiprocessing as mp, os, sys, tempfile
    from harness.running import worker_output

    def worker(output):
        """Unlinks a semaphore and dies after noting its UNREGISTER, before sending it: the kill's window."""
        worker_output.capture(output)
        lock = mp.get_context("spawn").Lock()
        name = lock._semlock.name
        from _multiprocessing import sem_unlink
        sem_unlink(name)
        with open(output.ledger_path, "a") as f:
            f.write(f"UNREGISTER:{name}:semaphore\\n")
        os._exit(0)

    if __name__ == "__main__":
        output = worker_output.WorkerOutput.in_folder(tempfile.mkdtemp(), 0)
        p = mp.get_context("spawn").Process(target=worker, args=(output,))
        p.start()
        p.join()
        print("noted", open(output.ledger_path).read().count("UNREGISTER"))
        if "--release" in sys.argv:
            output.release()
''')


@pytest.mark.parametrize("release", [False, True])
def test_a_worker_killed_between_noting_and_sending_an_unregister_leaves_no_warning(tmp_path, release):
    """The one message a kill may cut off: without the parent's release the tracker warns of the semaphore
    (already unlinked) at exit; with it, nothing.  The first case shows the second can fail."""
    (tmp_path / "cut.py").write_text(CUT_OFF)
    proc = subprocess.run([sys.executable, str(tmp_path / "cut.py"), *(["--release"] if release else [])],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and "noted 1" in proc.stdout, proc.stdout + proc.stderr
    warned = "resource_tracker" in proc.stderr and "leaked semaphore" in proc.stderr
    assert warned != release, proc.stderr
