"""The comparison's statistics: this tree's Triton kernel against another tree's (``.base`` by default), on
the pairs a sparse chunk compares (a bf16 out against its float64 oracle, one row a pair), as
``compare._statistics`` hands them over in each tree; ms a call (CUDA events over 10 calls) and whether
the statistics are the same bits.

Usage: python scripts/gpu/compare_bench.py [OTHER_TREE=.base]
"""
import importlib.util
import pathlib
import sys

import torch
from cuda_timing import timed

from harness.judging import compare
from harness.judging.tolerances import Bound

BOUND = Bound(atol=1e-2, rtol=1e-2, cos_diff=1e-5)


def other_compare(tree: pathlib.Path):
    """The other tree's ``compare`` module, its ``compare_kernel`` loaded from the same tree."""
    loaded = {}
    for name in ("compare_kernel", "compare"):
        spec = importlib.util.spec_from_file_location(f"other_{name}", tree / "harness/judging" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        if name == "compare":
            module.__package__ = "harness.judging"
            sys.modules["harness.judging.compare_kernel_other"] = loaded["compare_kernel"]
            source = spec.loader.get_source(spec.name).replace("from . import compare_kernel",
                                                              "from . import compare_kernel_other as compare_kernel")
            exec(compile(source, str(tree / "harness/judging/compare.py"), "exec"), module.__dict__)
        else:
            spec.loader.exec_module(module)
        loaded[name] = module
    return loaded["compare"]


def bench(mine, theirs, rows: int, heads: int, d_v: int, pairs: int):
    gen = torch.Generator(device="cuda").manual_seed(rows)
    expected = [torch.randn(rows, heads, d_v, generator=gen, device="cuda", dtype=torch.float64)
                for _ in range(pairs)]
    actual = [(e + 1e-3 * torch.randn(e.shape, generator=gen, device="cuda", dtype=torch.float64)).bfloat16()
              for e in expected]
    batch = [compare.Pair(a, e, torch.bfloat16) for a, e in zip(actual, expected)]
    n = expected[0].numel()

    def statistics(module):         # every group's statistics, on the device, not read back
        return torch.cat([stats for _, stats in module._check_values("out", batch, BOUND)[1]])
    ours, other = statistics(mine), statistics(theirs)
    ms_mine, ms_other = timed(lambda: statistics(mine)), timed(lambda: statistics(theirs))
    same = torch.equal(ours.view(torch.int64), other.view(torch.int64))
    print(f"{pairs} pairs of {rows} x {heads} x {d_v} ({n / 1e6:.1f} M elements, "
          f"{compare.group_rows(n, torch.device('cuda'))} a group): "
          f"other tree {ms_other:.3f} ms, this tree {ms_mine:.3f} ms ({ms_other / ms_mine:.2f}x), same bits: {same}")


if __name__ == "__main__":
    theirs = other_compare(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".base").resolve())
    for shape in [(963, 128, 512, 2), (321, 64, 512, 4), (222, 128, 512, 8), (12, 64, 512, 32), (4, 128, 512, 32),
                  (963, 128, 1, 8)]:
        bench(compare, theirs, *shape)
