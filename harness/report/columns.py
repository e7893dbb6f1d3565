"""Lean records held column by column: a list per field, one value per record.

The report's frame is built from columns in half the time it takes from a dict per record, and a
worker's records go back to the reading process as a few long lists rather than 50,000 dicts.
"""

from operator import itemgetter


def columns_of(records: list[dict]) -> dict[str, list]:
    """The records' fields as columns, in the order the records name them (None where one lacks a field)."""
    keys = list(dict.fromkeys(k for rec in records[:1] for k in rec))
    if len(keys) > 1 and all(len(rec) == len(keys) for rec in records):
        try:
            return dict(zip(keys, map(list, zip(*map(itemgetter(*keys), records)))))
        except KeyError:           # as many fields, not the same ones
            pass
    keys = list(dict.fromkeys(k for rec in records for k in rec))
    return {k: [rec.get(k) for rec in records] for k in keys}


def length(columns: dict[str, list]) -> int:
    return len(next(iter(columns.values()), ()))


def extend(columns: dict[str, list], more: dict[str, list]):
    """``more``'s records after those of ``columns`` (None where one side lacks a field)."""
    n, m = length(columns), length(more)
    for key in more:
        columns.setdefault(key, [None] * n)
    for key, values in columns.items():
        values += more.get(key) or [None] * m


def take(columns: dict[str, list], indices: list[int]) -> dict[str, list]:
    """The records at ``indices``, in that order."""
    return {key: list(map(values.__getitem__, indices)) for key, values in columns.items()}


def rows_of(columns: dict[str, list], keys: list[str]) -> list[dict]:
    """A dict of ``keys`` per record."""
    if not columns:
        return []
    return [dict(zip(keys, values)) for values in zip(*(columns[k] for k in keys))]
