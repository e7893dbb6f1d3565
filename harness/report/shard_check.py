"""Do the results files of a sharded run (``run --shard K/N``) make one whole run?

Rows record ``shard`` ("K/N") and ``shard_of`` (the cases over all N shards).  ``report a.jsonl
b.jsonl ...`` merges files; this names what a merge of shards lacks or holds twice: a shard of
which no row arrived ("shard 2 of 4 absent"), one case and backend from two shards ("case X from
shards 1/4 and 3/4"), and shards of different splits (1/4 beside 1/3).  With fewer cases than N
only the first ``shard_of`` shards hold any (``harness.running.shards``), so only those are expected.
"""

from ..running.shards import read_label

SHOWN = 5       # overlapping cases named one by one; the rest are counted


class ShardCheck:
    """Sees every row read (superseded ones too), then says what the shards lack or repeat."""

    def __init__(self):
        self.seen: dict[int, set[int]] = {}            # N -> the shards K with a row
        self.cases: dict[int, int] = {}                # N -> the cases over its shards, as rows say
        self.where: dict[tuple, set[str]] = {}         # (case, backend) -> the shard labels of its rows
        self.unsharded = 0                             # rows without a shard, beside sharded ones

    def see(self, row: dict, backend: str):
        label = read_label(row.get("shard"))
        if label is None:
            self.unsharded += 1
            return
        k, n = label
        self.seen.setdefault(n, set()).add(k)
        of = row.get("shard_of")
        if isinstance(of, int) and of >= 0:
            self.cases[n] = max(self.cases.get(n, 0), of)
        self.where.setdefault((row["case_id"], backend), set()).add(f"{k}/{n}")

    @property
    def sharded(self) -> bool:
        return bool(self.seen)

    def problems(self) -> list[str]:
        """One line per problem, most telling first; empty when the shards make one whole run."""
        if not self.seen:
            return []
        found = []
        if len(self.seen) > 1:
            found.append("rows of different splits: " + ", ".join(f"N={n}" for n in sorted(self.seen))
                         + " (each run of one suite should use one N)")
        for n in sorted(self.seen):
            expected = min(n, self.cases.get(n, n)) or n
            found += [f"shard {k} of {n} absent" for k in range(1, expected + 1) if k not in self.seen[n]]
        twice = sorted((key, labels) for key, labels in self.where.items() if len(labels) > 1)
        for (case_id, backend), labels in twice[:SHOWN]:
            found.append(f"case {case_id} [{backend}] from shards {' and '.join(sorted(labels))}")
        if len(twice) > SHOWN:
            found.append(f"... and {len(twice) - SHOWN} more case(s) from more than one shard")
        if self.unsharded:
            found.append(f"{self.unsharded} row(s) carry no shard, beside sharded ones")
        return found
