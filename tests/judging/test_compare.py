"""Comparison at the tolerance boundary, the cosine bound, NaN/inf positions, failure messages."""

import math

import pytest
import torch

from harness.building.inputs import TORCH_DTYPES
from harness.judging.checks import Kind
from harness.judging.compare import check_tensor, cos_diff, describe_failure, expected_lse_for
from harness.judging.tolerances import TOLERANCES, Bound, Tolerance
from harness.planning.cases import DTYPES

# dyadic bounds: atol + rtol * |e| and the errors below are exact in float64
EXACT = Bound(atol=0.5, rtol=0.25, cos_diff=1.0)


def expected_tensor(seed=0, shape=(2, 3, 4, 5)):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def test_exactly_at_the_bound_passes_and_just_beyond_fails():
    e = expected_tensor()
    e[1, 2, 3, 4] = -2.0                               # allowed error there: 0.5 + 0.25 * 2 = 1.0
    at = e.clone()
    at[1, 2, 3, 4] = -3.0                              # |err| == 1.0 exactly
    res = check_tensor("out", at, e, EXACT)
    assert res.passed and res.violations == 0
    assert res.worst_ratio == 1.0 and res.worst_index == (1, 2, 3, 4)
    beyond = e.clone()
    beyond[1, 2, 3, 4] = torch.nextafter(torch.tensor(-3.0, dtype=torch.float64),
                                         torch.tensor(-math.inf, dtype=torch.float64))
    res = check_tensor("out", beyond, e, EXACT)
    assert not res.passed and res.failures == ["element"] and res.violations == 1
    assert res.worst_index == (1, 2, 3, 4) and res.worst_ratio > 1.0
    assert res.worst_actual == float(beyond[1, 2, 3, 4]) and res.worst_expected == -2.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_boundary_with_the_shipped_tables(dtype):
    tol = TOLERANCES[dtype]
    for which in ("out", "lse"):
        bound = getattr(tol, which)
        e = expected_tensor(seed=3, shape=(64,)) * 4
        allowed = bound.atol + bound.rtol * e.abs()
        sign = torch.where(torch.arange(64) % 2 == 0, 1.0, -1.0).double()
        inside = check_tensor(which, e + sign * allowed * 0.999, e, Bound(bound.atol, bound.rtol, 1.0))
        outside = check_tensor(which, e + sign * allowed * 1.001, e, Bound(bound.atol, bound.rtol, 1.0))
        assert inside.passed and inside.violations == 0, inside
        assert not outside.passed and outside.violations == 64 and outside.failures == ["element"]
        assert 1.0009 < outside.worst_ratio < 1.0011


def test_relative_part_uses_the_magnitude_of_the_expected_value():
    e = torch.tensor([-100.0, 100.0], dtype=torch.float64)
    ok = check_tensor("x", e + torch.tensor([25.5, -25.5], dtype=torch.float64), e, EXACT)   # 0.5 + 25 = 25.5
    assert ok.passed
    bad = check_tensor("x", e + torch.tensor([0.0, 25.75], dtype=torch.float64), e, EXACT)
    assert not bad.passed and bad.worst_index == (1,)


def test_cosine_bound_catches_a_small_error_everywhere():
    e = expected_tensor(seed=1, shape=(4, 2, 8, 32))
    a = e * 1.009                                      # every element under rtol 1e-2, a 0.9 % scale error
    bf16 = TOLERANCES["bf16"].out
    res = check_tensor("out", a, e, bf16)
    assert res.violations == 0 and res.failures == ["cosine"] and not res.passed
    assert res.cos_diff == pytest.approx(0.009 ** 2 / (1 + 1.009 ** 2), rel=1e-6)
    assert "cos diff" in describe_failure("s/g/3", res) and describe_failure("s/g/3", res).startswith("s/g/3: out:")


def test_cosine_bound_boundary():
    e = expected_tensor(seed=2)
    a = e + 0.01 * expected_tensor(seed=5)
    value = cos_diff(a, e)
    assert value > 0
    assert check_tensor("o", a, e, Bound(10.0, 0.0, value)).passed
    just_under = float(torch.nextafter(torch.tensor(value, dtype=torch.float64),
                                       torch.tensor(0.0, dtype=torch.float64)))
    res = check_tensor("o", a, e, Bound(10.0, 0.0, just_under))
    assert res.failures == ["cosine"]


def test_cos_diff_values():
    one, zero = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert cos_diff(one, zero) == 1.0
    assert cos_diff(one, one) == 0.0
    assert cos_diff(2 * one, one) == pytest.approx(1 - 4 / 5)
    assert cos_diff(torch.zeros(3), torch.zeros(3)) == 0.0


@pytest.mark.parametrize("bad,ref", [(math.nan, 0.5), (math.inf, 0.5), (0.5, math.inf), (-math.inf, math.inf),
                                     (math.nan, math.inf), (0.5, math.nan)])
def test_nonfinite_position_mismatch_fails_even_with_huge_bounds(bad, ref):
    e = expected_tensor(seed=4, shape=(3, 4, 6))
    e[2, 1, 5] = ref
    a = e.clone()
    a[2, 1, 5] = bad
    res = check_tensor("lse", a, e, Bound(atol=1e9, rtol=1e9, cos_diff=1.0))
    assert not res.passed and "nonfinite" in res.failures
    assert res.nonfinite_mismatches == 1 and res.first_nonfinite_mismatch == (2, 1, 5)
    msg = describe_failure("suite/group/7", res)
    assert msg.startswith("suite/group/7: lse:") and "[2, 1, 5]" in msg
    # the message names the value found and the value expected there
    assert f"got {bad:.6g}" in msg and f"expected {ref:.6g}" in msg, msg


def test_matching_nonfinite_positions_pass():
    e = expected_tensor(seed=6, shape=(2, 4, 3))
    e[0] = math.inf                                    # an empty request: LSE +inf
    e[1, 2, 0] = math.nan
    a = e.clone()
    a[1, 0, 0] += 1e-6
    res = check_tensor("lse", a, e, TOLERANCES["bf16"].lse)
    assert res.passed and res.nonfinite_mismatches == 0
    assert math.isfinite(res.worst_ratio) and res.worst_index == (1, 0, 0)


def test_shape_mismatch_fails():
    e = expected_tensor()
    res = check_tensor("out", e[:, :2], e, EXACT)
    assert not res.passed and res.failures == ["shape"]
    assert describe_failure("a/b/0", res) == "a/b/0: out has shape (2, 2, 4, 5), expected (2, 3, 4, 5)"


def test_failure_message_names_case_index_value_expected_and_bound():
    e = torch.zeros(2, 3, 4, 5, dtype=torch.float64) + 0.25
    a = e.clone()
    a[1, 0, 2, 3] = 3.5                                 # the worst
    a[0, 1, 1, 1] = 1.5                                 # also out of bounds, but less so
    res = check_tensor("out", a, e, Bound(atol=0.5, rtol=0.0, cos_diff=1.0))
    msg = describe_failure("smoke/verify-bf16/2", res)
    assert msg.startswith("smoke/verify-bf16/2: out: 2 element(s) out of bounds")
    assert "worst at index [1, 0, 2, 3]" in msg
    assert "got 3.5" in msg and "expected 0.25" in msg and "atol 0.5" in msg, msg
    assert res.worst_actual == 3.5 and res.worst_expected == 0.25 and res.worst_ratio == 6.5
    # reads any input dtype (the kernel's bf16 out) against the float64 oracle
    res16 = check_tensor("out", a.to(torch.bfloat16), e, Bound(atol=0.5, rtol=0.0, cos_diff=1.0))
    assert res16.worst_index == (1, 0, 2, 3)


def test_wrong_dtype_fails_its_own_check_even_with_right_values():
    e_out = expected_tensor(seed=8)
    right = check_tensor("out", e_out.to(torch.bfloat16), e_out, TOLERANCES["bf16"].out, torch.bfloat16)
    assert right.passed and right.dtype == "bfloat16"
    wrong = check_tensor("out", e_out.float(), e_out, TOLERANCES["bf16"].out, torch.bfloat16)
    assert not wrong.passed and wrong.failures == ["dtype"] and wrong.dtype == "float32"
    assert describe_failure("s/g/0", wrong) == "s/g/0: out has dtype float32, expected bfloat16"
    e_lse = expected_tensor(seed=9, shape=(2, 4, 3))
    bad_lse = e_lse.clone()
    bad_lse[1, 3, 2] += 1.0
    both = check_tensor("lse", bad_lse, e_lse, TOLERANCES["fp16"].lse, torch.float32)
    assert both.failures[0] == "dtype" and "element" in both.failures and both.worst_index == (1, 3, 2)
    msg = describe_failure("s/g/0", both)
    assert msg.startswith("s/g/0: lse has dtype float64, expected float32; lse: 1 element(s)"), msg


def test_empty_row_lse_follows_the_backend_convention():
    e = torch.tensor([[1.0, math.inf], [math.inf, -2.0]], dtype=torch.float64)
    for value in (math.inf, -math.inf, 0.0, math.nan):
        conv = expected_lse_for(e, value)
        assert conv[0, 0] == 1.0 and conv[1, 1] == -2.0
        assert (math.isnan(conv[0, 1]) and math.isnan(conv[1, 0])) if math.isnan(value) else \
            (conv[0, 1] == value and conv[1, 0] == value)


def test_tolerance_table_has_every_dtype_with_a_rationale():
    assert set(TOLERANCES) == set(DTYPES) == set(TORCH_DTYPES)
    for dtype in DTYPES:
        tol = TOLERANCES[dtype]
        assert isinstance(tol, Tolerance) and tol.rationale.strip()
        for bound in (tol.out, tol.lse):
            assert bound.atol > 0 and bound.rtol >= 0 and 0 < bound.cos_diff < 1
            assert all(math.isfinite(x) for x in (bound.atol, bound.rtol, bound.cos_diff))
    # fewer mantissa bits, looser bounds
    assert TOLERANCES["fp16"].out.rtol < TOLERANCES["bf16"].out.rtol < TOLERANCES["fp8_e4m3"].out.rtol
    # end to end (against the unquantised inputs) covers every fp8 dtype and is looser than the kernel bound
    end_to_end = {d: t.end_to_end for d, t in TOLERANCES.items() if t.end_to_end is not None}
    assert set(end_to_end) == {d for d in DTYPES if d.startswith("fp8")}
    for dtype, e2e in end_to_end.items():
        assert e2e.rationale.strip()
        for which in ("out", "lse"):
            k, x = getattr(TOLERANCES[dtype], which), getattr(e2e, which)
            assert x.atol >= k.atol and x.rtol >= k.rtol and x.cos_diff >= k.cos_diff


@pytest.mark.parametrize("group_elements", [None, 1024])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_chunk_of_pairs_gets_the_numbers_each_gets_alone(seed, group_elements, monkeypatch):
    """check_tensors on many pairs at once: every field of every check, bit for bit, as checked alone."""
    import json

    from harness.judging import compare_statistics
    from harness.judging.compare import Pair, check_tensors
    # a GPU's groups of many rows, forced on: small groups split pairs of one size over several
    real_group_rows = compare_statistics.group_rows
    monkeypatch.setattr(compare_statistics, "group_rows", lambda n, device: real_group_rows(n, torch.device("cuda")))
    if group_elements:
        monkeypatch.setattr(compare_statistics, "GROUP_ELEMENTS", group_elements)
    g = torch.Generator().manual_seed(seed)
    bound = TOLERANCES["bf16"].out
    pairs = []
    for n in [1, 5, 63, 64, 64, 65, 1000, 1000, 1000, 3 * 4096 + 5, 3 * 4096 + 5]:
        expected = torch.randn(n, generator=g, dtype=torch.float64)
        actual = (expected + 3e-3 * torch.randn(n, generator=g, dtype=torch.float64)).bfloat16()
        if n > 60:            # a NaN where the reference is finite, an inf the kernel missed
            actual[int(torch.randint(n, (1,), generator=g))] = float("nan")
            expected[int(torch.randint(n, (1,), generator=g))] = float("inf")
        pairs.append(Pair(actual.reshape(-1, 1) if n % 2 else actual, expected.reshape(-1, 1) if n % 2 else expected))
    pairs.append(Pair(pairs[6].actual.half(), pairs[6].expected))              # a size shared with another dtype
    pairs.append(Pair(torch.zeros(3), torch.zeros(4, dtype=torch.float64)))      # a shape failure among them
    together = check_tensors("out", pairs, bound)
    for pair, check in zip(pairs, together):
        alone = check_tensors("out", [pair], bound)[0]
        assert json.dumps(check.to_dict()) == json.dumps(alone.to_dict()), seed
    assert any(Kind.NONFINITE.value in c.failures for c in together) and not together[-1].passed
    assert len({c.cos_diff for c in together[6:9]}) == 3         # same size, own numbers


def test_groups_hold_pairs_of_one_size_and_dtype_in_rows_fixed_by_the_size():
    from harness.judging.compare_statistics import GROUP_ELEMENTS, GROUP_ROWS, group_rows, groups
    cuda, cpu = torch.device("cuda"), torch.device("cpu")          # by name: nothing is allocated
    sizes = [100] * (GROUP_ROWS + 3) + [GROUP_ELEMENTS // 3] * 4 + [GROUP_ELEMENTS * 2, 7]
    kinds = [(n, torch.bfloat16, torch.float64) for n in sizes]
    kinds[3] = (100, torch.float16, torch.float64)                  # another dtype: a group of its own
    found = groups(list(range(len(sizes))), kinds, cuda)
    big = GROUP_ROWS + 3
    first = [i for i in range(big) if i != 3]
    assert found == [(GROUP_ROWS, first[:GROUP_ROWS]), (GROUP_ROWS, first[GROUP_ROWS:]), (GROUP_ROWS, [3]),
                      (3, [big, big + 1, big + 2]), (3, [big + 3]), (1, [big + 4]), (GROUP_ROWS, [big + 5])]
    assert group_rows(GROUP_ELEMENTS * 2, cuda) == 1 and group_rows(1, cuda) == GROUP_ROWS
    # on the CPU every pair is a group of its own: spare rows there are arithmetic, not saved launches
    assert groups([0, 1, 2], kinds[:2] + [kinds[-1]], cpu) == [(1, [0]), (1, [1]), (1, [2])]


def test_a_row_of_statistics_is_read_by_name():
    """Each part of a pair's row (``compare_statistics.ROW``) lands under its column's name: the planted worst
    element and first NaN mismatch, their values on both sides, and the counts."""
    from harness.fast.compare_kernel import Maximised, Summed
    from harness.judging.compare_statistics import Statistics, statistics

    expected = torch.linspace(-1, 1, 200, dtype=torch.float64)
    actual = expected.clone()
    actual[150] += 0.5                                          # the worst element, far over the bound
    actual[30] += 0.02                                          # over the bound too, less so
    actual[70], actual[90] = float("nan"), float("nan")        # two NaN/inf mismatches: the first at 70
    row = statistics([actual], [expected], 1, Bound(atol=1e-3, rtol=1e-2, cos_diff=1e-5))
    s = Statistics.of(row[0].tolist())
    assert s.sums[Summed.MISMATCHES] == 2 and s.sums[Summed.VIOLATIONS] == 2
    assert s.sums[Summed.DD] == pytest.approx(0.5 ** 2 + 0.02 ** 2)
    assert s.places[Maximised.RATIO] == 150 and s.places[Maximised.MISMATCH] == 70
    assert s.maxima[Maximised.ABS_ERR] == pytest.approx(0.5) and s.maxima[Maximised.MISMATCH] == 1
    assert s.actual[Maximised.RATIO] == actual[150] and s.expected[Maximised.RATIO] == expected[150]
    assert math.isnan(s.actual[Maximised.MISMATCH]) and s.expected[Maximised.MISMATCH] == expected[70]
