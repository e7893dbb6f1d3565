"""``bench --cross-check`` compares like with like: the harness's side of each comparison is timed with
that timer's own L2 flush, whatever ``--l2-flush`` the row's kernel time used.  On the H200 a read-flushed
harness against kernelkit's memset gave 0.927 on a correct kernel; both with a write flush, 0.996.
The decision only: no GPU, the timers are stand-ins."""

import pytest

from harness.bench import crosscheck, output
from harness.bench.timing import FLUSH_MODES

# what each stand-in timer reports for the same launch, and the harness's p50 with each flush: on the H200
# at h=16 the read flush made the kernel look 7% faster than after a memset
THEIRS_US = {"kernelkit": 100.0, "do_bench": 101.0, "cudagraph": 95.0}
HARNESS_US = {"read": 92.7, "write": 99.6, "none": 95.5}


def stand_ins(with_kernelkit: bool):
    """The real methods' descriptions and flushes, with stand-in timers."""
    real = ([crosscheck.KERNELKIT] if with_kernelkit else []) + [crosscheck.DO_BENCH_CUDAGRAPH, crosscheck.DO_BENCH]
    names = {crosscheck.KERNELKIT: "kernelkit", crosscheck.DO_BENCH: "do_bench",
             crosscheck.DO_BENCH_CUDAGRAPH: "cudagraph"}
    return [crosscheck.Method(m.describe, lambda launch, n=names[m]: THEIRS_US[n], m.flush) for m in real]


def run_cross_check(monkeypatch, with_kernelkit: bool, l2_flush: str):
    monkeypatch.setattr(crosscheck, "methods", lambda: stand_ins(with_kernelkit))
    timed_again = []

    def harness_us_with(mode):
        timed_again.append(mode)
        return HARNESS_US[mode]
    gate, others = crosscheck.cross_check(lambda: None, HARNESS_US[l2_flush], l2_flush, harness_us_with)
    return gate, others, timed_again


def test_each_timer_declares_the_flush_it_uses():
    assert crosscheck.KERNELKIT.flush == "write"           # a memset before each call
    assert crosscheck.DO_BENCH.flush == "write"            # triton's zero_() of 256 MB
    assert crosscheck.DO_BENCH_CUDAGRAPH.flush == "none"   # replays back to back
    assert {m.flush for m in (crosscheck.KERNELKIT, crosscheck.DO_BENCH, crosscheck.DO_BENCH_CUDAGRAPH)} \
        <= set(FLUSH_MODES)


def test_with_the_default_read_flush_kernelkit_gates_on_a_write_flushed_harness(monkeypatch):
    gate, others, timed_again = run_cross_check(monkeypatch, with_kernelkit=True, l2_flush="read")
    assert gate["method"] == crosscheck.KERNELKIT.describe
    assert gate["harness_flush"] == "write" and gate["harness_p50_us"] == HARNESS_US["write"]
    assert gate["agrees"]                                     # 99.6 / 100: a correct kernel passes
    assert not crosscheck.compare(HARNESS_US["read"], THEIRS_US["kernelkit"], "x")["agrees"]   # what it was
    assert sorted(timed_again) == ["none", "write"]            # each other flush timed once, shared by its timers
    by_method = {c["method"]: c for c in others}
    assert by_method[crosscheck.DO_BENCH.describe]["harness_flush"] == "write"
    assert by_method[crosscheck.DO_BENCH_CUDAGRAPH.describe]["harness_p50_us"] == HARNESS_US["none"]


def test_with_the_timers_own_flush_nothing_is_timed_again_for_it(monkeypatch):
    gate, _, timed_again = run_cross_check(monkeypatch, with_kernelkit=True, l2_flush="write")
    assert gate["harness_flush"] == "write" and gate["harness_p50_us"] == HARNESS_US["write"]
    assert timed_again == ["none"]                              # only do_bench_cudagraph's side


def test_without_kernelkit_do_bench_cudagraph_gates_against_an_unflushed_harness(monkeypatch):
    gate, others, timed_again = run_cross_check(monkeypatch, with_kernelkit=False, l2_flush="read")
    assert gate["method"] == crosscheck.DO_BENCH_CUDAGRAPH.describe
    assert gate["harness_flush"] == "none" and gate["harness_p50_us"] == HARNESS_US["none"]
    assert [c["method"] for c in others] == [crosscheck.DO_BENCH.describe]
    assert sorted(timed_again) == ["none", "write"]


def test_a_harness_side_that_cannot_be_timed_is_an_error_not_a_pass(monkeypatch):
    monkeypatch.setattr(crosscheck, "methods", lambda: stand_ins(True))

    def broken(mode):
        raise RuntimeError("kineto\nfailed")
    gate, others, = crosscheck.cross_check(lambda: None, 92.7, "read", broken)
    assert gate["agrees"] is False and gate["error"] == "RuntimeError: kineto"


@pytest.mark.parametrize("flush", ["write", None])
def test_the_line_says_which_flush_the_harness_side_used(flush):
    gate = crosscheck.compare(99.6, 100.0, "kernelkit", flush)
    line = output.cross_check_line({"case_id": "c", "backend": "k", "bench": {"cross_check": gate}})
    assert ("p50 99.6 us (write flush), kernelkit" in line) == (flush == "write")
    assert "ratio 0.996: agrees" in line
