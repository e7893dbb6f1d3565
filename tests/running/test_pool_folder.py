"""A pool's folder for its workers' files is named for its process; a killed pool's folder is removed by
the next pool, a live one's is left alone."""

import os
import subprocess
import sys

from harness.running.worker_pool import FOLDER_PREFIX, WorkerPool, folder_owner, new_folder


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_gone_owners_folder_is_removed_and_a_live_ones_kept(tmp_path):
    gone = tmp_path / f"{FOLDER_PREFIX}{dead_pid()}-abc123"
    alive = tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-def456"
    unnamed = tmp_path / f"{FOLDER_PREFIX}x7_q"          # an older name, no pid: nobody's to judge
    for folder in (gone, alive, unnamed):
        folder.mkdir()
        (folder / "worker-0.stderr").write_text("")
    made = new_folder(str(tmp_path))
    assert not gone.exists()
    assert alive.exists() and unnamed.exists()
    assert folder_owner(os.path.basename(made)) == os.getpid()


def test_folder_owner_reads_only_pool_names():
    assert folder_owner(f"{FOLDER_PREFIX}123-abc") == 123
    assert folder_owner(f"{FOLDER_PREFIX}abc") is None
    assert folder_owner("other-123-abc") is None


def test_a_closed_pool_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with WorkerPool() as pool:
        pool.spawn()
        assert os.path.isdir(pool.folder)
    assert not any(p.name.startswith(FOLDER_PREFIX) for p in tmp_path.iterdir())
