"""Do two results files hold the same rows, apart from timings?  Prints the first differences.

Rows are matched by (backend, case id); the timings and ``env.commit`` (the tree a row came from: two
trees are what this compares) are left out.

Usage: python scripts/gpu/same_rows.py A.jsonl B.jsonl [--ignore KEY,...] [--close REL] [--drop KEY,...] [--shared]
(exit 0: the same, 1: they differ)
--ignore: keys compared to 12 significant digits only, e.g. ``cos_diff,rel_l2`` between trees whose sums
add in another order (a float64 sum's last bits).
--close: every float compared within REL of the larger (plus 1e-12 absolute, for numbers such as a
``cos_diff`` near 0), e.g. between trees whose oracles differ in their last bits; strings, integers,
statuses and places still exactly.
--drop: keys left out wherever they appear, e.g. ``noise_floor`` between a tree that records it on every row
and one that recorded it on failing rows only.
--shared: compare the rows both files hold; the rows of cases one tree has and the other has not (its suites
grew) are counted apart, not as differences.
"""
import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))    # the checkout's harness: a GPU box installs none
from harness.recording.results import read_rows  # noqa: E402

# how long and when, not what: a row the warm-up ran first (``warm_up``) is the same row run later, and
# FlashInfer's build times (``backend_info.jit_build_s``) are a cold cache's or a warm one's
TIMINGS = {"wall_s", "kernel_ms", "reference_ms", "phase_ms", "finished_at", "commit", "warm_up", "jit_build_s"}
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("a")
parser.add_argument("b")
parser.add_argument("--ignore", default="")
parser.add_argument("--close", type=float, default=None)
parser.add_argument("--drop", default="")
parser.add_argument("--shared", action="store_true")
args = parser.parse_args()
ROUNDED = set(filter(None, args.ignore.split(",")))
DROPPED = set(filter(None, args.drop.split(",")))


def differences(x, y, where=""):
    if isinstance(x, dict) and isinstance(y, dict):
        for key in sorted(set(x) | set(y)):
            if key in ROUNDED and isinstance(x.get(key), float) and isinstance(y.get(key), float):
                if f"{x[key]:.12g}" != f"{y[key]:.12g}":
                    yield f"{where}.{key}: {x[key]!r} != {y[key]!r} (to 12 digits)"
            elif key not in TIMINGS and key not in DROPPED:
                yield from differences(x.get(key), y.get(key), f"{where}.{key}")
    elif args.close is not None and isinstance(x, float) and isinstance(y, float):
        if not (x == y or abs(x - y) <= args.close * max(abs(x), abs(y)) + 1e-12):
            yield f"{where}: {x!r} != {y!r} (within {args.close:g})"
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y)):
            yield from differences(u, v, f"{where}[{i}]")
    elif x != y:
        yield f"{where}: {str(x)[:80]} != {str(y)[:80]}"


a = {f'{r["case_id"]} [{r.get("backend")}]': r for r in read_rows(args.a)}
b = {f'{r["case_id"]} [{r.get("backend")}]': r for r in read_rows(args.b)}
one_sided = sorted(set(a) ^ set(b))
found = [] if args.shared else [f"{k}: only in one file" for k in one_sided]
found += [d for k in sorted(set(a) & set(b)) for d in differences(a[k], b[k], k)]
shared = f" ({len(set(a) & set(b))} in both compared, {len(one_sided)} in one only)" if args.shared else ""
print(f"{len(a)} and {len(b)} rows{shared}; {len(found)} difference(s)")
if found:       # which fields differ, by their last key: rows that differ in a sum's last bits name cos_diff only
    print("by field:", dict(Counter(d.split(": ", 1)[0].rsplit(".", 1)[-1] for d in found)))
print("\n".join(found[:20]))
sys.exit(1 if found else 0)
