"""Spares import the run's kernel packages while the parent resolves the backends (``WorkerPool.preload``):
the modules named for ``--backend`` without importing any, and a spare that imports them before its job, a
module that does not import costing it nothing."""

import time

from harness.backends import KERNELS, builtin_class, kernel_modules
from harness.running.worker_pool import WorkerPool

MARKER = '''
import os
from pathlib import Path
Path(__file__).with_name(f"imported-by-{os.getpid()}").write_text("")
'''


def test_the_modules_are_the_named_kernels_then_every_kernels_for_auto():
    assert kernel_modules("torch,reference") == []
    triton = kernel_modules("sglang-triton@sglang-0.5.23")
    assert triton == list(builtin_class("sglang-triton").modules)
    everything = kernel_modules("torch,auto")
    assert len(everything) == len(set(everything))            # each once, in the kernels' order
    for name in KERNELS:
        assert set(getattr(builtin_class(name), "modules", ())) <= set(everything)
    assert everything.index("flag_gems.fused") < everything.index("flashinfer")


def test_a_spare_imports_what_it_is_told_before_its_job(tmp_path, monkeypatch):
    (tmp_path / "preload_marker_module.py").write_text(MARKER)
    monkeypatch.syspath_prepend(str(tmp_path))        # a spawned worker starts with this sys.path
    with WorkerPool() as pool:
        spare = pool.spawn()
        pool.spares.append(spare)
        pool.preload(["no_such_module_anywhere", "preload_marker_module"])
        marker = tmp_path / f"imported-by-{spare.proc.pid}"
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists()
        assert spare.proc.is_alive()                   # the module that did not import cost it nothing
        spare.conn.send(None)                          # no job after all: it ends cleanly
        spare.proc.join(60)
        assert spare.proc.exitcode == 0
