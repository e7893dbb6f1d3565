"""The JITs' cache root (harness/jit_cache.py): the flag, the environment, the default; every JIT's variable
under it before any worker starts, a user's own setting left alone, and workers seeing it."""

import json
import os

from helpers import run_cli

from harness import jit_cache


def test_the_root_is_the_flags_then_the_environments_then_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv(jit_cache.ENV, raising=False)
    assert jit_cache.cache_root() == jit_cache.DEFAULT
    monkeypatch.setenv(jit_cache.ENV, str(tmp_path / "env"))
    assert jit_cache.cache_root() == tmp_path / "env"
    assert jit_cache.cache_root(str(tmp_path / "flag")) == tmp_path / "flag"


def test_every_jit_points_under_the_root_but_a_users_own_setting_wins(monkeypatch, tmp_path):
    for variable, _ in jit_cache.JITS + jit_cache.FLAGS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    found = jit_cache.point_jits_at(tmp_path / "root")
    assert found == {"TRITON_CACHE_DIR": str(tmp_path / "mine"), "TRITON_CACHE_AUTOTUNING": "1",
                     "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "root" / "flashinfer"),
                     "TORCH_EXTENSIONS_DIR": str(tmp_path / "root" / "torch_extensions"),
                     "FLAGGEMS_CACHE_DIR": str(tmp_path / "root" / "flaggems"),
                     "SGLANG_JIT_CACHE_DIR": str(tmp_path / "root" / "sglang_jit")}
    assert os.environ[jit_cache.ENV] == str(tmp_path / "root")
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")                 # a user's "no" wins too
    assert jit_cache.point_jits_at(tmp_path / "root")["TRITON_CACHE_AUTOTUNING"] == "0"


PLUGIN = '''
import json, os
from harness.backends.torch_backend import TorchBackend


class SeesCache(TorchBackend):
    name = "sees-cache"

    def run(self, inputs):
        with open(os.environ["NOTES"], "a") as f:
            f.write(json.dumps({v: os.environ.get(v) for v in ("MLA_VERIFY_CACHE", "TRITON_CACHE_DIR")}) + "\\n")
        return super().run(inputs)
'''


def test_a_runs_workers_see_the_cache_dir_it_was_given(monkeypatch, tmp_path):
    for variable in ("TRITON_CACHE_DIR", jit_cache.ENV):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "sees.py").write_text(PLUGIN)
    monkeypatch.setenv("NOTES", str(tmp_path / "notes.jsonl"))
    code, _, err = run_cli(["run", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--backend",
                            f"{tmp_path / 'sees.py'}:SeesCache", "--workers", "1", "--cache-dir", tmp_path / "jit",
                            "--no-progress", "--out", tmp_path / "r.jsonl"])
    assert code == 0, err
    (seen,) = [json.loads(line) for line in (tmp_path / "notes.jsonl").read_text().splitlines()]
    assert seen == {"MLA_VERIFY_CACHE": str(tmp_path / "jit"), "TRITON_CACHE_DIR": str(tmp_path / "jit" / "triton")}
