"""A large results file for measuring ``mla-verify report``: real rows copied under new case ids.

    python scripts/synthetic_results.py OUT.jsonl N SOURCE.jsonl [--failing F] [--gpu NAME]

Row k of OUT is a row of SOURCE with ``#<copy>`` appended to its case id, so every case keeps
its backends side by side (the matrix has work to do) and no row supersedes another.  Without
``--failing`` SOURCE is repeated as it is; with it, a fraction F of the rows come from SOURCE's
failing rows and the rest from its passing ones.  ``--gpu NAME`` stamps every row as run on a GPU of
that model (``placement`` and ``env.gpu``): two such files, of two models, give the report's kernel x GPU
model tables something to set side by side.  No randomness: the same inputs give the same file.
"""

import argparse
import json
from itertools import cycle, islice


def rows(source: list[dict], n: int, failing: float | None):
    if failing is None:
        for k, row in enumerate(islice(cycle(source), n)):
            yield dict(row, case_id=f"{row['case_id']}#{k // len(source)}")
        return
    bad = [r for r in source if r["status"] != "pass"]
    good = [r for r in source if r["status"] == "pass"]
    n_bad = round(n * failing)
    for k in range(n):
        pool, j = (bad, k) if k < n_bad else (good, k - n_bad)
        row = pool[j % len(pool)]
        yield dict(row, case_id=f"{row['case_id']}#{j // len(pool)}")


def on_gpu(row: dict, name: str) -> dict:
    """``row`` as if run on GPU 0 of model ``name``."""
    env = row.get("env") if isinstance(row.get("env"), dict) else {}
    return dict(row, placement={"gpu": 0, "name": name, "uuid": "GPU-synthetic-0"}, env={**env, "gpu": name})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("n", type=int)
    p.add_argument("source")
    p.add_argument("--failing", type=float, help="fraction of rows taken from SOURCE's failing rows")
    p.add_argument("--gpu", help="stamp the rows as run on a GPU of this model (its name, as NVML gives it)")
    args = p.parse_args()
    with open(args.source, encoding="utf-8") as f:
        source = [json.loads(line) for line in f if line.strip()]
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows(source, args.n, args.failing):
            row = on_gpu(row, args.gpu) if args.gpu else row
            f.write(json.dumps(row, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
