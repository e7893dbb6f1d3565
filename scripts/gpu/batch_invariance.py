"""Does batching change a case's numbers?  The oracle and the comparison, together against alone.

Usage: python scripts/gpu/batch_invariance.py SUITE DEVICE [CHUNKS]   (exit 0: identical, 1: they differ)

Builds the inputs of the suite's first CHUNKS chunks (default 10, in run order) on DEVICE, then:
- the oracle for all their calls in one ``expected_many`` pass, against each call alone and against the
  calls in reverse order: every out and LSE bit for bit;
- the comparison of all their answers in one ``check_tensors`` call against each alone, on answers made
  from the oracle's out plus a seeded 1e-3 error: every field of every check.
``same_rows.py`` checks whole rows of two runs; this narrows a difference down to the step that made it.
"""
import sys

import torch

from harness.building.inputs import generate
from harness.judging import oracle
from harness.judging.compare import Pair, check_tensors
from harness.judging.tolerances import TOLERANCES
from harness.planning import cases as case_mod
from harness.running import chunk


def differing(a, b) -> int:
    return sum(not (torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])) for x, y in zip(a, b))


suite, device = sys.argv[1], sys.argv[2]
n_chunks = int(sys.argv[3]) if len(sys.argv) > 3 else 10
cases = [c for cases in chunk.plan(case_mod.load_suite(suite).cases)[:n_chunks] for c in cases
         if c.scenario == "call"]
inputs = [generate(c, device) for c in cases]
together = oracle.expected_many(inputs)
alone = [oracle.expected(i) for i in inputs]
reverse = oracle.expected_many(inputs[::-1])[::-1]
found = {"oracle, together vs alone": differing(together, alone),
         "oracle, together vs reverse": differing(together, reverse)}
gen = torch.Generator(device=device).manual_seed(1)
for name, index in (("out", 0), ("lse", 1)):
    expected = [t[index] for t in together]
    actual = [(e + 1e-3 * torch.randn(e.shape, generator=gen, device=device, dtype=e.dtype)).to(torch.bfloat16)
              for e in expected]
    pairs = [Pair(a, e, None) for a, e in zip(actual, expected)]
    bound = getattr(TOLERANCES["bf16"], name)
    checked = check_tensors(name, pairs, bound)
    found[f"compare {name}, together vs alone"] = sum(
        c.to_dict() != check_tensors(name, [p], bound)[0].to_dict() for c, p in zip(checked, pairs))
print(f"{len(cases)} cases of {suite} on {device}, first {n_chunks} chunks")
for what, n in found.items():
    print(f"  {what}: {n} differ")
sys.exit(1 if any(found.values()) else 0)
