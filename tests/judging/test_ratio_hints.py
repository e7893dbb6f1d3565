"""A failure whose error is one constant (got/expected or got - expected) names it, and its likely cause.

Unit tests build an oracle-like tensor from seeded random data and a "kernel" answer with a known constant
error; the end-to-end test runs the base-2 LSE mutant through the CLI on the smoke suite.
"""

import json
import math

import pytest
import torch
from helpers import run_cli

from harness.judging.compare import check_tensor, describe
from harness.judging.ratio_hint import KNOWN_RATIOS, MATCH, MIN_ELEMENTS
from harness.judging.tolerances import TOLERANCES

LSE_BOUND, OUT_BOUND = TOLERANCES["bf16"].lse, TOLERANCES["bf16"].out


def oracle_lse(seed: int, shape=(3, 16, 2)) -> torch.Tensor:
    """LSE-like values (b, h, s_q) in float64, some negative, with one empty row (+inf, as the oracle gives)."""
    gen = torch.Generator().manual_seed(seed)
    lse = torch.rand(shape, generator=gen, dtype=torch.float64) * 9 - 1.5
    lse[0, 0, 0] = math.inf
    return lse


def oracle_out(seed: int, shape=(3, 2, 16, 64)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def failed_line(actual, expected, name="lse", bound=LSE_BOUND):
    check = check_tensor(name, actual, expected, bound)
    assert not check.passed
    return check, describe(check)


def test_base2_lse_names_one_over_ln2_and_base2():
    expected = oracle_lse(11)
    check, line = failed_line((expected / math.log(2)).float(), expected)
    assert "1.4427" in line and "LSE looks base-2 (log2 of the sum), not natural log" in line, line
    assert check.constant_error["ratio"] == pytest.approx(1 / math.log(2), rel=1e-6)
    assert check.constant_error["elements"] == expected.numel() - 1          # the empty row is not a ratio
    assert check.to_dict()["constant_error"] == check.constant_error        # recorded in the row


def test_natural_lse_where_base2_declared_names_ln2():
    expected = oracle_lse(12)
    # the harness multiplies a declared base-2 LSE by ln 2: a natural-log LSE arrives ln 2 times too small
    _, line = failed_line(expected.float() * math.log(2), expected)
    assert "0.69315" in line and "LSE looks natural log where base 2 is declared" in line, line


def test_ratio_of_two_scales_on_lse_names_a_wrong_softmax_scale():
    expected = oracle_lse(13)
    _, line = failed_line(expected * math.sqrt(192 / 576), expected)
    assert "softmax scale looks wrong" in line and "1/sqrt(576) where 1/sqrt(192) belongs" in line, line
    assert "sqrt(192/576) = 0.57735" in line, line


def test_lse_times_the_scale_names_a_power_of_the_scale():
    expected = oracle_lse(14)
    _, line = failed_line(expected * 192 ** -0.5, expected)
    assert "softmax scale looks wrong (got/expected is the scale 1/sqrt(192))" in line, line


@pytest.mark.parametrize("offset", [0.37, -math.log(64)])
def test_constant_offset_is_named(offset):
    expected = oracle_lse(15)
    check, line = failed_line(expected + offset, expected)
    assert f"hint: got - expected is a constant offset of {offset:.4g} over {expected.numel() - 1} elements" in line
    assert check.constant_error["offset"] == pytest.approx(offset, rel=1e-9)


def test_out_gets_the_ratio_without_an_lse_cause():
    expected = oracle_out(16)
    expected[0, 0] = 0.0                             # ~0 expected values are left out of the ratio
    _, line = failed_line(expected * 2.5, expected, "out", OUT_BOUND)
    assert "hint: got/expected is a constant 2.5 over" in line and "looks" not in line, line
    _, line = failed_line(expected / math.log(2), expected, "out", OUT_BOUND)
    assert "(1/ln 2 = 1.4427)" in line and "base-2" not in line, line


def test_random_errors_give_no_hint():
    expected = oracle_lse(17)
    gen = torch.Generator().manual_seed(18)
    noisy = expected + 0.05 * torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    check, line = failed_line(noisy, expected)
    assert check.constant_error is None and "hint" not in line and "constant_error" not in check.to_dict()
    out = oracle_out(19)
    noisy_out = out * (1 + 0.3 * torch.rand(out.shape, generator=gen, dtype=torch.float64))
    check, line = failed_line(noisy_out, out, "out", OUT_BOUND)
    assert check.constant_error is None and "hint" not in line, line


def test_one_wrong_element_gives_no_hint():
    expected = oracle_lse(20)
    actual = expected.clone()
    actual[1, 3, 1] += 1.0                           # the rest exact: ratio 1 and offset 0 are no constant error
    check, line = failed_line(actual, expected)
    assert check.constant_error is None and "hint" not in line, line


@pytest.mark.parametrize("finite, hinted", [(MIN_ELEMENTS - 1, False), (MIN_ELEMENTS, True)])
def test_too_few_elements_make_no_constant(finite, hinted):
    expected = oracle_lse(21, shape=(1, finite + 1, 1))         # one of them the empty row
    check, _ = failed_line(expected / math.log(2), expected)
    assert (check.constant_error is not None) is hinted


def test_a_passing_check_records_no_hint():
    expected = oracle_lse(22)
    check = check_tensor("lse", expected.float(), expected, LSE_BOUND)
    assert check.passed and check.constant_error is None and "constant_error" not in check.to_dict()


def test_known_ratios_are_told_apart():
    """A measured ratio matches at most one known ratio: they are further apart than two match tolerances."""
    values = sorted(k.value for k in KNOWN_RATIOS)
    assert all(b / a - 1 > 2 * MATCH for a, b in zip(values, values[1:]))
    assert all(abs(k.value - 1) > MATCH for k in KNOWN_RATIOS)


def test_base2_mutant_fail_line_names_the_ratio(tmp_path):
    rows = tmp_path / "rows.jsonl"
    code, out, err = run_cli(["run", "--suite", "smoke", "--backend", "mutant:lse_base2", "--device", "cpu",
                              "--case", "smoke/decode-bf16/0", "--out", rows, "--no-progress"])
    assert code == 1, err
    fail = [line for line in out.splitlines() if line.strip().startswith("smoke/decode-bf16/0: lse:")]   # the example
    assert len(fail) == 1 and "1.4427" in fail[0] and "LSE looks base-2" in fail[0], out
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["status"] == "fail" and "1.4427" in row["messages"][0]
    assert row["metrics"]["lse"]["constant_error"]["ratio"] == pytest.approx(1 / math.log(2), rel=1e-5)
