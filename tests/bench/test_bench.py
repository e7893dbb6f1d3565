"""``mla-verify bench``: the arithmetic (FLOPs, bytes, percentages, bound), the iteration split of a
kineto trace, the ceilings cache, and every output format (console, JSONL, CSV, the report's section
parsed from HTML).  Runs on the CPU with wall-clock timing; no test asserts a speed.
"""

import csv
import json
import math
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
import torch
from helpers import run_cli

from harness.bench import ceilings, counting, timing
from harness.bench.output import csv_record, line
from harness.building.inputs import generate
from harness.judging.tolerances import TOLERANCES
from harness.planning.cases import load_suite
from harness.recording.results import load, read_rows
from harness.report.bench import section

# ---- counting ---------------------------------------------------------------------------

BF16, FP8 = 2, 1


def headline(heads):
    """FlashMLA's benchmark shape: b=128, L=4096, s_q=1, bf16."""
    return counting.count(batch=128, heads=heads, kv_heads=1, s_q=1, seqlens_total=128 * 4096, d_qk=576, d_v=512,
                          kv_bytes=BF16, q_bytes=BF16, out_bytes=BF16)


def test_flops_and_bytes_follow_flashmla_formula():
    w = headline(16)
    assert w.flops == 128 * 16 * 1 * 2 * 4096 * (576 + 512)
    assert w.bytes == 128 * 4096 * 1 * 576 * 2 + 128 * 1 * 16 * 576 * 2 + 128 * 1 * 16 * 512 * 2
    assert w.intensity == pytest.approx(w.flops / w.bytes)
    w128 = headline(128)
    assert w128.flops == 8 * w.flops                 # FLOPs scale with heads, the KV bytes do not
    assert w128.bytes - w.bytes == 128 * (128 - 16) * (576 + 512) * 2


def test_counting_reproduces_the_recorded_h200_rates():
    # docs: 0.174 ms -> about 3.49 TB/s at h=16; 0.271 ms -> 539 TFLOP/s at h=128 (shared/notes/flashmla-api.md)
    assert headline(16).bytes / 0.174e-3 / 1e12 == pytest.approx(3.49, abs=0.01)
    assert headline(128).flops / 0.271e-3 / 1e12 == pytest.approx(539, abs=1)


def test_kv_is_read_once_per_kv_head_and_drafts_count_in_L():
    one = counting.count(2, 16, 1, 4, 1000, 576, 512, BF16, BF16, BF16)
    two = counting.count(2, 16, 2, 4, 1000, 576, 512, BF16, BF16, BF16)
    assert two.bytes - one.bytes == 1000 * 576 * BF16
    assert two.flops == one.flops


def _inputs(dtype, mode="decode"):
    case = next(c for c in load_suite("smoke").cases if c.dtype == dtype and c.mode == mode)
    return case, generate(case, "cpu")


def test_fp8_bytes_depend_on_the_q_convention():
    case, inputs = _inputs("fp8_e4m3")
    total = int(inputs.cache_seqlens.sum())
    b, h, s = case.batch_size, case.heads, case.s_q
    quantized = counting.count_inputs(inputs, SimpleNamespace(fp8_q="quantized_k_scale", out_dtype=None))
    assert quantized.bytes == total * 576 * FP8 + b * s * h * 576 * FP8 + b * s * h * 512 * BF16
    bf16_q = counting.count_inputs(inputs, SimpleNamespace(fp8_q="model_dtype", out_dtype=None))
    assert bf16_q.bytes - quantized.bytes == b * s * h * 576 * (BF16 - FP8)
    assert bf16_q.flops == quantized.flops == h * s * 2 * total * (576 + 512)


def test_one_case_has_one_intensity_whatever_the_backend_returns():
    _, inputs = _inputs("bf16", "verify")
    a = counting.count_inputs(inputs, SimpleNamespace(out_dtype=None))
    b = counting.count_inputs(inputs, SimpleNamespace(out_dtype="bf16"))
    f16 = counting.count_inputs(inputs, SimpleNamespace(out_dtype="fp16"))
    assert a == b == f16


def test_roofline_percentages_and_bound():
    w = counting.Work(flops=1e12, bytes=1e10)                  # 100 FLOP/B
    r = counting.roofline(w, 1e-2, copy_bytes_per_s=2e12, matmul_flop_per_s=4e14)    # ridge 200
    assert r["ridge"] == 200 and r["bound"] == "memory"
    assert r["bytes_per_s"] == pytest.approx(1e12) and r["flop_per_s"] == pytest.approx(1e14)
    assert r["pct_bandwidth"] == pytest.approx(50) and r["pct_matmul"] == pytest.approx(25)
    assert r["pct_of_ceiling"] == r["pct_bandwidth"]
    r = counting.roofline(w, 1e-2, copy_bytes_per_s=1e13, matmul_flop_per_s=4e14)    # ridge 40
    assert r["bound"] == "compute" and r["pct_of_ceiling"] == pytest.approx(25)


def test_bound_at_and_around_the_ridge():
    assert counting.bound(199.9, 200) == "memory"
    assert counting.bound(200, 200) == "compute"
    assert counting.bound(30, 200) == "memory" and counting.bound(228, 200) == "compute"


# ---- timing -----------------------------------------------------------------------------

def test_percentiles_interpolate_like_numpy():
    xs = [5, 1, 4, 2, 3]
    assert timing.percentile(xs, 50) == 3
    assert timing.percentile(xs, 10) == pytest.approx(1.4)
    assert timing.percentile(xs, 90) == pytest.approx(4.6)
    assert math.isnan(timing.percentile([], 50))
    s = timing.summary([1e-6, 1e-6, 1e-6])
    assert s["p50"] == pytest.approx(1.0) and s["spread"] == pytest.approx(1.0) and not s["wide"]
    s = timing.summary([1e-6, 2e-6, 3e-6, 4e-6])
    assert s["wide"] and s["spread"] == pytest.approx(3.7 / 1.3)


def ev(name, start, end):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_kineto_trace_is_split_at_flushes_and_the_flush_is_dropped():
    events = [ev("stray", 0, 5),                              # before the first flush: not ours
              ev("flush", 10, 60), ev("attn", 61, 161), ev("combine", 162, 172),
              ev("flush", 200, 250), ev("attn", 251, 371), ev("combine", 372, 380)]
    sums, per_name = timing.split_iterations(events, ("flush",), 2)
    assert sums == pytest.approx([110e-6, 128e-6])
    assert per_name == pytest.approx({"attn": 110.0, "combine": 9.0})
    with pytest.raises(RuntimeError, match="expected 3"):
        timing.split_iterations(events, ("flush",), 3)
    with pytest.raises(RuntimeError, match="no kernel"):
        timing.split_iterations([ev("flush", 0, 1), ev("flush", 2, 3)], ("flush",), 2)


def test_a_flush_of_several_kernels_is_matched_as_a_sequence():
    # the flush is a memset then a reduction; the kernel under test also issues a memset of its own
    events = [ev("memset", 0, 1), ev("reduce", 1, 2), ev("memset", 3, 4), ev("k", 4, 6),
              ev("memset", 7, 8), ev("reduce", 8, 9), ev("k", 10, 13)]
    sums, per_name = timing.split_iterations(events, ("memset", "reduce"), 2)
    assert sums == pytest.approx([3e-6, 3e-6])
    assert per_name == pytest.approx({"memset": 0.5, "k": 2.5})


@pytest.mark.parametrize("mode", timing.FLUSH_MODES)
def test_l2_flush_modes(mode):
    f = timing.L2Flush("cpu", nbytes=1 << 20, mode=mode)
    before = f.buf.clone()
    f()
    assert f.nbytes == (1 << 20 if mode != "none" else 1024)
    assert torch.equal(f.buf, before) == (mode == "read")      # a read sweep leaves the buffer (and lines) clean
    assert ("MiB" in f.describe()) == (mode != "none")
    with pytest.raises(ValueError):
        timing.L2Flush("cpu", mode="sideways")


# ---- ceilings ----------------------------------------------------------------------------

def fake_ceilings(**kw):
    return ceilings.Ceilings(device_name=kw.get("device_name", "cpu-test"), copy_bytes_per_s=1e10,
                             matmul_flop_per_s=1e12, method="test", measured_at="2026-12-03T00:00:00", torch="x")


def test_ceilings_are_cached_per_device_and_remeasured_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(ceilings, "measure", lambda device: calls.append(device) or fake_ceilings())
    first = ceilings.get("cpu")
    assert calls == ["cpu"] and first.source == "measured"
    path = ceilings.cache_path(ceilings.device_name("cpu"))
    assert path.parent == tmp_path and path.name.startswith("ceilings-cpu-") and path.suffix == ".json"
    again = ceilings.get("cpu")
    assert calls == ["cpu"] and again.source == str(path) and again.copy_bytes_per_s == 1e10
    ceilings.get("cpu", remeasure=True)
    assert calls == ["cpu", "cpu"]
    path.write_text("{not json")
    ceilings.get("cpu")
    assert len(calls) == 3                       # an unreadable cache is measured again


def test_cache_name_is_a_safe_slug():
    assert ceilings.cache_path("NVIDIA H200 / 141GB").name == "ceilings-NVIDIA-H200-141GB.json"


def test_ceilings_measure_on_cpu_gives_positive_rates(monkeypatch):
    monkeypatch.setitem(ceilings.CPU_SIZES, "copy_bytes", 1 << 20)
    monkeypatch.setitem(ceilings.CPU_SIZES, "matmul_n", 64)
    monkeypatch.setitem(ceilings.CPU_SIZES, "runs", 2)
    c = ceilings.measure("cpu")
    assert c.copy_bytes_per_s > 0 and c.matmul_flop_per_s > 0 and "bf16" in c.method


# ---- the command, end to end on the CPU ------------------------------------------------------

SUITE = """
[suite]
description = "bench tests"
seed = 3

[defaults]
batch_size = 2
heads = 8
seqlen = "uniform:60:130"

[[group]]
name = "decode"

[[group]]
name = "verify"
mode = "verify"
draft_tokens = 2

[[group]]
name = "fp8"
dtype = "fp8_e4m3"
"""

PLUGIN = '''
from harness.backends.torch_backend import TorchBackend


class Wrong(TorchBackend):
    name = "wrong"

    def run(self, inputs):
        out, lse = super().run(inputs)
        return out * 1.5, lse                      # fails verification: must get no speed


class Raises(TorchBackend):
    name = "raises"

    def run(self, inputs):
        raise RuntimeError("launch failed")
'''


class Elements(HTMLParser):
    """Start tags with their attributes and the ids of their ancestors."""

    VOID = {"meta", "br", "input", "img", "link", "hr", "col", "source", "wbr"}

    def __init__(self, text):
        super().__init__()
        self.stack, self.found = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.found.append((tag, attrs, [a.get("id") for _, a in self.stack]))
        if tag not in self.VOID:
            self.stack.append((tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.found.append((tag, dict(attrs), [a.get("id") for _, a in self.stack]))

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def inside(self, ancestor, tag, **attrs):
        return [a for t, a, up in self.found if t == tag and ancestor in up
                and all((v in (a.get("class") or "").split()) if k == "cls" else a.get(k) == v
                        for k, v in attrs.items())]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    (tmp / "bench_suite.toml").write_text(SUITE)
    (tmp / "plug.py").write_text(PLUGIN)
    cache = tmp / "cache"
    cache.mkdir()
    name = ceilings.device_name("cpu")
    (cache / f"ceilings-{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}.json").write_text(
        json.dumps(fake_ceilings(device_name=name).to_dict()))
    mp = pytest.MonkeyPatch()
    mp.setenv("MLA_VERIFY_CACHE_DIR", str(cache))
    out, csv_path = tmp / "b.jsonl", tmp / "b.csv"
    backends = f"torch,reference,{tmp}/plug.py:Wrong,{tmp}/plug.py:Raises,flashmla"
    code, stdout, stderr = run_cli(["bench", "--suite", tmp / "bench_suite.toml", "--backend", backends,
                                    "--device", "cpu", "--iters", 3, "--warmup", 1, "--out", out, "--csv", csv_path])
    mp.undo()
    html = tmp / "b.html"
    rcode, _, rerr = run_cli(["report", out, "-o", html])
    assert rcode == code == 1, rerr         # the report gates on the same rows as the bench did
    return SimpleNamespace(code=code, stdout=stdout, stderr=stderr, rows=read_rows(out), out=out, csv=csv_path,
                           html=html.read_text(encoding="utf-8"))


def test_rows_have_every_status_and_only_passes_have_speed(bench_run):
    rows = bench_run.rows
    assert len(rows) == 3 * 5
    by = {(r["case_id"].split("/")[1], r["backend"]): r for r in rows}
    for group in ("decode", "verify", "fp8"):
        for good in ("torch", "reference"):
            r = by[(group, good)]
            assert r["status"] == "pass" and r["bench"]["timed"] and r["kind"] == "bench"
            assert r["bench"]["kernel_us"]["p10"] <= r["bench"]["kernel_us"]["p50"] <= r["bench"]["kernel_us"]["p90"]
            assert r["kernel_ms"] == pytest.approx(r["bench"]["kernel_us"]["p50"] / 1e3)
            assert not r["bench"]["gpu_numbers"] and "not GPU numbers" in r["bench"]["timer"]
            assert r["rerun"].startswith("mla-verify bench ")
        wrong = by[(group, "wrong")]
        assert wrong["status"] == "fail" and not wrong["bench"]["timed"] and wrong["kernel_ms"] is None
        assert "a wrong kernel has no speed" in wrong["bench"]["why"]
        assert not {"kernel_us", "bytes_per_s", "flop_per_s"} & set(wrong["bench"])
        assert by[(group, "raises")]["status"] == "error" and not by[(group, "raises")]["bench"]["timed"]
        assert by[(group, "flashmla")]["status"] == "unsupported"
    assert bench_run.code == 1                     # a failing kernel fails the run


def test_row_arithmetic_is_consistent(bench_run):
    for r in bench_run.rows:
        b = r["bench"]
        if not b["timed"]:
            continue
        s = b["kernel_us"]["p50"] / 1e6
        assert b["bytes_per_s"] == pytest.approx(b["bytes"] / s)
        assert b["flop_per_s"] == pytest.approx(b["flops"] / s)
        assert b["intensity"] == pytest.approx(b["flops"] / b["bytes"])
        assert b["ridge"] == pytest.approx(1e12 / 1e10)
        assert b["bound"] == ("memory" if b["intensity"] < 100 else "compute")
        assert b["pct_bandwidth"] == pytest.approx(100 * b["bytes_per_s"] / 1e10)
        total = b["seqlen_mean"] * r["batch_size"]
        assert b["flops"] == pytest.approx(r["heads"] * r["s_q"] * 2 * total * (576 + 512))
        assert b["ceilings"]["source"].endswith(".json")


def test_backends_of_one_case_share_inputs_and_counts(bench_run):
    for group in ("decode", "verify", "fp8"):
        timed = [r for r in bench_run.rows if f"/{group}/" in r["case_id"] and r["bench"]["timed"]]
        assert len({(r["bench"]["flops"], r["bench"]["bytes"], tuple(r["cache_seqlens"])) for r in timed}) == 1


def test_console_table(bench_run):
    out = bench_run.stdout
    assert "NOTE: CPU wall-clock timing: these are not GPU numbers." in out
    assert "ceilings on cpu-" in out and "ridge 100.0 FLOP/B" in out
    header = next(ln for ln in out.splitlines() if ln.startswith("case "))
    for col in ("backend", "status", "kernel us p50 [p10-p90]", "e2e us p50", "GB/s", "TFLOP/s", "FLOP/B", "bound",
                "% ceil"):
        assert col in header
    wrong = [ln for ln in out.splitlines() if " wrong " in ln]
    assert len(wrong) == 3 and all("a wrong kernel has no speed" in ln for ln in wrong)
    assert "15 row(s): " in out and "6 timed" in out


def test_jsonl_loads_with_pandas(bench_run):
    df = load(bench_run.out)
    assert len(df) == 15
    assert {"bench.kernel_us.p50", "bench.bound", "bench.pct_of_ceiling", "bench.e2e_us.p50"} <= set(df.columns)
    assert df["bench.timed"].sum() == 6


def test_csv_matches_rows(bench_run):
    with open(bench_run.csv, newline="") as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == 15
    for rec, row in zip(recs, bench_run.rows):
        assert rec["case_id"] == row["case_id"] and rec["status"] == row["status"]
        if row["bench"]["timed"]:
            assert float(rec["kernel_us_p50"]) == pytest.approx(row["bench"]["kernel_us"]["p50"])
            assert rec["bound"] == row["bench"]["bound"]
        else:
            assert rec["kernel_us_p50"] == "" and rec["bytes_per_s"] == ""


def test_report_has_a_bench_section_with_table_and_roofline(bench_run):
    page = Elements(bench_run.html)
    assert [t for t, a, _ in page.found if a.get("id") == "bench"] == ["section"]
    trs = page.inside("bench-t", "tr")
    rows = [a for a in trs if "data-case" in a]
    assert len(rows) == 15
    assert sorted((a["data-case"], a["data-backend"]) for a in rows) == sorted(
        (r["case_id"], r["backend"]) for r in bench_run.rows)
    svg = [a for t, a, _ in page.found if t == "svg" and a.get("id") == "roofline"]
    assert len(svg) == 1 and float(svg[0]["data-ridge"]) == pytest.approx(100)
    points = page.inside("roofline", "circle", cls="pt")
    timed = {(r["case_id"], r["backend"]): r["bench"] for r in bench_run.rows if r["bench"]["timed"]}
    assert len(points) == len(timed) == 6
    for p in points:
        b = timed[(p["data-case"], p["data-backend"])]
        assert float(p["data-x"]) == pytest.approx(b["intensity"], rel=1e-5)
        assert float(p["data-y"]) == pytest.approx(b["flop_per_s"], rel=1e-5)
    assert len(page.inside("roofline", "line", cls="cmem")) == 1
    assert len(page.inside("roofline", "line", cls="ccmp")) == 1
    assert "not GPU numbers" in bench_run.html
    assert "http://" not in bench_run.html and "https://" not in bench_run.html


def test_roofline_geometry_puts_a_full_bandwidth_point_on_the_memory_line():
    row = {"case_id": "s/g/0", "backend": "k", "status": "pass", "batch_size": 1, "heads": 1, "s_q": 1,
           "bench": {"timed": True, "gpu_numbers": True, "intensity": 10.0, "flop_per_s": 1e11, "bytes_per_s": 1e10,
                     "kernel_us": {"p10": 1, "p50": 1, "p90": 1}, "bound": "memory", "pct_of_ceiling": 100.0,
                     "ceilings": {"copy_bytes_per_s": 1e10, "matmul_flop_per_s": 1e13, "device_name": "d"}}}
    page = Elements(section([row]))
    (mem,) = page.inside("roofline", "line", cls="cmem")
    (pt,) = page.inside("roofline", "circle", cls="pt")
    x1, y1, x2, y2 = (float(mem[k]) for k in ("x1", "y1", "x2", "y2"))
    cx, cy = float(pt["cx"]), float(pt["cy"])
    assert cy == pytest.approx(y1 + (y2 - y1) * (cx - x1) / (x2 - x1), abs=0.2)


def test_no_bench_rows_no_section():
    assert section([{"case_id": "a/b/0", "status": "pass"}]) == ""


def test_line_of_an_untimed_row_says_why():
    row = {"case_id": "a/b/0", "backend": "k", "status": "fail", "bench": {"timed": False, "why": "because"}}
    assert line(row).endswith("-- because")
    assert csv_record(row)["kernel_us_p50"] is None


# ---- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--iters", "0"], "--iters: must be at least 1"),
    (["--warmup", "-1"], "--warmup: must be 0 or more"),
    (["--cross-check"], "--cross-check needs"),
    (["--case", "smoke/nope"], "--case: no case or group 'smoke/nope'"),
    (["--backend", "no-such-backend"], "--backend: no backend could be loaded"),
    (["--csv", "/proc/nope/x.csv"], "cannot write CSV file"),
    (["--l2-flush", "sideways"], "--l2-flush: invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path):
    if "--cross-check" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA device is present (it may cross-check): this checks the refusal without one")
    code, out, err = run_cli(["bench", "--suite", "smoke", "--device", "cpu", "--out", tmp_path / "x.jsonl", *argv])
    assert code == 2, (out, err)
    assert err.startswith("mla-verify: error:") and message in err and len(err.strip().splitlines()) == 1


def test_an_unloadable_backend_among_others_is_a_line_not_an_abort(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ceilings, "measure", lambda device: fake_ceilings())
    code, out, err = run_cli(["bench", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--device", "cpu",
                              "--backend", "torch,sglang-triton-not-here", "--iters", 1, "--warmup", 0,
                              "--out", tmp_path / "x.jsonl"])
    assert code == 0, err
    assert "backend not loaded, skipped: sglang-triton-not-here" in err
    rows = read_rows(tmp_path / "x.jsonl")
    assert [(r["backend"], r["status"]) for r in rows] == [("torch", "pass")]


# ---- what is timed ---------------------------------------------------------------------------

def test_kernel_launch_takes_the_narrowest_call_offered():
    from harness.backends.torch_backend import TorchBackend
    from harness.bench.launchers import declares_graph, e2e_step, kernel_launch
    _, inputs = _inputs("bf16")
    calls = []

    class WithHook(TorchBackend):
        def bench_launch(self, inputs):
            return lambda: calls.append("launch")

    class FlashLike(TorchBackend):
        def metadata_for(self, inputs):
            calls.append("metadata")
            return "meta"

        def call(self, inputs, meta):
            calls.append(f"call({meta})")

    fn, scope = kernel_launch(WithHook(), inputs)
    fn()
    assert calls == ["launch"] and "bench_launch" in scope
    calls.clear()
    fn, scope = kernel_launch(FlashLike(), inputs)
    fn()
    fn()
    assert calls == ["metadata", "call(meta)", "call(meta)"] and "metadata computed outside" in scope
    fn, scope = kernel_launch(TorchBackend(), inputs)
    assert scope.startswith("whole run()") and fn()[0].shape[-1] == 512
    step, mode, note = e2e_step(TorchBackend(), inputs, fn()[0], TOLERANCES["bf16"].out)
    assert mode == "eager" and note is None and step()[0].shape[-1] == 512     # the CPU never captures a graph
    assert not declares_graph(TorchBackend())
    graphy = TorchBackend()
    graphy.cuda_graph = True
    assert declares_graph(graphy)


# ---- on a GPU with FlashMLA (skipped elsewhere) -------------------------------------------------

def _flashmla_here() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device here"
    from harness.backends.flashmla import find_api
    api, errors = find_api()
    return None if api is not None else "; ".join(errors)


@pytest.mark.gpu
@pytest.mark.skipif(_flashmla_here() is not None, reason=f"needs CUDA and FlashMLA: {_flashmla_here()}")
def test_flashmla_bench_uses_kineto_and_the_graph_session(tmp_path, monkeypatch):
    monkeypatch.setenv("MLA_VERIFY_CACHE_DIR", str(tmp_path))
    code, out, err = run_cli(["bench", "--suite", "smoke", "--case", "smoke/decode-bf16,smoke/verify-bf16/0",
                              "--backend", "flashmla", "--iters", 5, "--warmup", 1, "--out", tmp_path / "g.jsonl"])
    assert code == 0, out + err
    for r in read_rows(tmp_path / "g.jsonl"):
        b = r["bench"]
        assert r["status"] == "pass" and b["timed"] and b["gpu_numbers"]
        assert b["timer"].startswith("kineto") and b["kernels_us"], b["timer"]
        assert b["kernel_scope"].startswith("launch only") and b["e2e_mode"].startswith("cuda-graph"), b


def test_case_selection_takes_ids_and_groups():
    from harness.planning.cases import select
    suites = [load_suite("smoke")]
    chosen = select(suites, "smoke/fp8,smoke/decode-bf16/0,smoke/fp8/1")
    assert [c.id for c in chosen] == ["smoke/fp8/0", "smoke/fp8/1", "smoke/decode-bf16/0"]
    assert len(select(suites, None)) == len(suites[0].cases)


def test_kernelkit_cross_check_sums_the_call_kernels_and_leaves_out_its_flush(monkeypatch):
    """FlashMLA's timer, when importable, is the cross-check: its per-call time is every kernel of the
    call summed over its flushed calls, without the flush's own memset."""
    import sys
    import types

    from harness.bench import crosscheck
    calls = []

    def bench_kineto(fn, num_tests=30):
        calls.append(num_tests)
        ranges = {"Memset (Device)": [(0.0, 2e-3)] * num_tests,      # its flush, whatever it is named
                  "cudaDeviceSynchronize": [(0.0, 3e-3)]}             # host API calls are events too
        if fn() is not None:                                    # a call that launches something
            ranges.update({"flash_fwd_splitkv_mla_kernel": [(0.0, 100e-6)] * num_tests,
                           "flash_fwd_mla_combine_kernel": [(0.0, 20e-6)] * num_tests,
                           "cudaLaunchKernelExC": [(0.0, 5e-6)] * num_tests})
        return types.SimpleNamespace(time_ranges=ranges)

    fake = types.ModuleType("kernelkit")
    fake.bench = types.SimpleNamespace(bench_kineto=bench_kineto)
    monkeypatch.setitem(sys.modules, "kernelkit", fake)
    monkeypatch.setitem(sys.modules, "kernelkit.bench", fake.bench)
    assert crosscheck.kernelkit_available()
    assert crosscheck.methods()[0] is crosscheck.KERNELKIT
    assert crosscheck.kernelkit_us(lambda: "a call", num_tests=10) == pytest.approx(120.0)
    assert calls == [2, 10]                   # the flush alone, then the call
    check = crosscheck.compare(123.0, 120.0, crosscheck.KERNELKIT.describe)
    assert check["agrees"] and not crosscheck.compare(130.0, 120.0, "x")["agrees"]


def test_cross_check_line_names_the_gate_and_what_was_recorded_beside_it():
    from harness.bench import crosscheck, output
    gate = crosscheck.compare(100.0, 99.0, "A")
    beside = [crosscheck.compare(100.0, 115.0, "B")]
    line = output.cross_check_line({"case_id": "c", "backend": "k",
                                    "bench": {"cross_check": gate, "cross_check_others": beside}})
    assert "A 99.0 us, ratio 1.010: agrees" in line and "beside it, B 115.0 us (ratio 0.870)" in line


def test_a_bench_that_verified_nothing_exits_as_run_does(tmp_path, monkeypatch):
    """Every row unsupported (a kernel that needs CUDA, on the CPU): NOTHING VERIFIED, exit 5, as ``run``."""
    monkeypatch.setenv("MLA_VERIFY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ceilings, "measure", lambda device: fake_ceilings())
    code, out, err = run_cli(["bench", "--suite", "smoke", "--case", "smoke/decode-bf16/0", "--device", "cpu",
                              "--backend", "flashmla", "--iters", 1, "--warmup", 0, "--out", tmp_path / "x.jsonl"])
    assert [r["status"] for r in read_rows(tmp_path / "x.jsonl")] == ["unsupported"]
    assert code == 5, out + err
    assert out.strip().splitlines()[-1] == "verdict: NOTHING VERIFIED (exit 5)"
