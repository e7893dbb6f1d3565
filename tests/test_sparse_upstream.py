"""cases/flashmla-sparse-upstream.toml is FlashMLA's sparse-decoding matrix, as its generator writes it."""

import importlib.util
from collections import Counter
from pathlib import Path

from harness.cases import load_suite

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_sparse", ROOT / "scripts" / "gen_sparse_upstream_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_is_what_the_generator_writes(tmp_path, monkeypatch):
    gen = _generator()
    monkeypatch.setattr(gen, "__file__", str(tmp_path / "scripts" / "gen.py"))
    (tmp_path / "cases").mkdir()
    gen.main()
    written = (tmp_path / "cases" / "flashmla-sparse-upstream.toml").read_text()
    assert written == (ROOT / "cases" / "flashmla-sparse-upstream.toml").read_text()


def test_the_matrix_has_upstreams_counts():
    cases = load_suite("flashmla-sparse-upstream").cases
    by_dim = Counter(c.d_qk for c in cases)
    assert len(cases) == 4748 and by_dim == {576: 246, 512: 4502}       # the count, from upstream
    assert {c.kv_format for c in cases if c.d_qk == 512} == {"v4"}
    assert {c.page_size for c in cases} == {2, 53, 61, 64, 69, 256, 576}
    assert {c.topk for c in cases} == {64, 128, 576, 2048, 16384}
    assert {c.heads for c in cases} == {64, 128} and {c.batch_size for c in cases} >= {4, 74, 321}
    assert {c.s_q for c in cases} == {1, 2, 3}
    assert {c.sink for c in cases} == {"inf", "none"}
    assert sum(c.index_pattern == "invalid" for c in cases) > 0
    assert len({c.id for c in cases}) == len(cases) and len({c.seed for c in cases}) == len(cases)
