"""Property-based fuzzing of the case loader and the pool builder.

The loader, fed any TOML-shaped data, either returns a suite of valid cases or
raises ``InputError``; nothing else.  The pool builder, for any lengths and page
size, gives a layout its own validators accept, and any corruption of the block
table that could send a kernel out of bounds is refused.
"""

from pathlib import Path

import torch
from hypothesis import assume, event, given
from hypothesis import strategies as st

from harness.building.pool import PADDING_VALUES, allocate, pages_for, validate_block_table, validate_req_to_token
from harness.errors import InputError
from harness.planning.cases import (
    CASE_FIELDS,
    DTYPES,
    MODES,
    PADDINGS,
    Suite,
    parse_suite,
    scenario_names,
    validate_case,
)

PATH = Path("fuzz.toml")

# ---- the case loader ----------------------------------------------------------------------------

scalars = st.one_of(
    st.integers(-3, 600), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=12),
    st.sampled_from([*DTYPES, *MODES, *PADDINGS, "call", "determinism", "uniform:1:100", "list:0,5",
                     "list:-1", "equal:64", "boundary", "normal:50:10", "bogus:1"]),
)
toml_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
keys = st.sampled_from([*CASE_FIELDS, "name", "draws", "seed"]) | st.text(max_size=8)
tables = st.dictionaries(keys, toml_values, max_size=6)


VALID_FIELDS = {
    "mode": st.just("decode"), "batch_size": st.integers(1, 8), "heads": st.sampled_from([1, 8, 16, 128]),
    "dtype": st.sampled_from(DTYPES), "page_size": st.sampled_from([1, 16, 64]),
    "seqlen": st.sampled_from(["uniform:1:100", "list:0,5", "equal:64", "boundary", "normal:50:10"]),
    "padding": st.sampled_from(PADDINGS), "causal": st.booleans(), "softmax_scale": st.floats(0.01, 1.0),
    "extra_pages": st.integers(0, 4), "scenario": st.sampled_from(scenario_names()), "k_scale": st.floats(0.01, 4.0),
    "tags": st.lists(st.text(max_size=4), max_size=2),
}


@st.composite
def valid_table(draw):
    """Some valid fields; a non-tag field may be an axis (a list of one or two values)."""
    chosen = draw(st.lists(st.sampled_from(sorted(VALID_FIELDS)), max_size=4, unique=True))
    table = {}
    for key in chosen:
        value = draw(VALID_FIELDS[key])
        if key != "tags" and draw(st.booleans()):
            value = draw(st.lists(VALID_FIELDS[key], min_size=1, max_size=2))
        table[key] = value
    return table


@st.composite
def valid_suite(draw):
    groups = []
    for i in range(draw(st.integers(1, 3))):
        group = {"name": f"g{i}", **draw(valid_table())}
        if draw(st.booleans()):
            group["draws"] = draw(st.integers(1, 3))
        groups.append(group)
    return {"suite": {"seed": draw(st.integers(0, 2**31 - 1)), "description": draw(st.text(max_size=10))},
            "defaults": draw(valid_table()), "group": groups}


DELETE = object()


@st.composite
def mutated_suite(draw):
    """A valid suite with up to two edits: a key set to any TOML value, added, or deleted."""
    data = draw(valid_suite())
    for _ in range(draw(st.integers(0, 2))):
        where = draw(st.sampled_from(["top", "suite", "defaults", "group"]))
        table = data.get(where, data)
        if where == "group" and isinstance(table, list) and table:
            table = draw(st.sampled_from(table))
        if not isinstance(table, dict):      # an earlier edit replaced it: edit the top level instead
            table = data
        key = draw(st.sampled_from(sorted(table)) | keys) if table else draw(keys)
        value = draw(st.just(DELETE) | toml_values)
        if value is DELETE:
            table.pop(key, None)
        else:
            table[key] = value
    return data


suite_data = mutated_suite() | st.dictionaries(st.text(max_size=8), toml_values, max_size=3) | tables


@given(suite_data)
def test_loader_gives_a_valid_suite_or_input_error(data):
    try:
        suite = parse_suite(data, PATH)
    except InputError as e:
        assert str(e).startswith(str(PATH)), str(e)
        event("refused")
        return
    event("loaded")
    assert isinstance(suite, Suite)
    ids = [c.id for c in suite.cases]
    assert ids and len(ids) == len(set(ids))
    for case in suite.cases:
        validate_case(case, "fuzz")                    # every case the loader returns is valid
    assert [c.seed for c in parse_suite(data, PATH).cases] == [c.seed for c in suite.cases]


valid_group = st.fixed_dictionaries({
    "name": st.sampled_from(["g1", "g2"]),
    "mode": st.sampled_from(MODES),
    "heads": st.lists(st.sampled_from([1, 4, 16, 128]), min_size=1, max_size=3, unique=True),
    "page_size": st.sampled_from([1, 16, 64]),
    "dtype": st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2, unique=True),
    "draws": st.integers(1, 3),
})


@given(valid_group, st.integers(0, 2**31 - 1))
def test_valid_group_expands_to_the_product_of_its_axes(group, seed):
    if group["mode"] == "verify":
        group = {**group, "draft_tokens": 2}
    suite = parse_suite({"suite": {"seed": seed}, "group": [group]}, PATH)
    assert len(suite.cases) == len(group["heads"]) * len(group["dtype"]) * group["draws"]
    assert {(c.heads, c.dtype) for c in suite.cases} == {(h, d) for h in group["heads"] for d in group["dtype"]}
    assert all(c.page_size == group["page_size"] and c.mode == group["mode"] for c in suite.cases)


# ---- the pool builder ---------------------------------------------------------------------------

@st.composite
def padded_layouts(draw):
    """A layout from random lengths, page size, spare pages and padding policy, and that policy."""
    seqs = draw(st.lists(st.integers(0, 300), min_size=1, max_size=6))
    page_size = draw(st.sampled_from([1, 2, 3, 16, 64]) | st.integers(1, 80))
    padding = draw(st.sampled_from(sorted(PADDING_VALUES)))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    return allocate(seqs, page_size, draw(st.integers(0, 4)), gen, padding=padding), padding


layouts = padded_layouts().map(lambda pair: pair[0])


def gate(layout, table=None, seqs=None):
    validate_block_table(layout.block_table if table is None else table,
                         layout.cache_seqlens if seqs is None else seqs, layout.num_pages, layout.page_size)


@given(padded_layouts())
def test_allocated_layout_passes_its_validators_and_is_consistent(layout_and_padding):
    layout, padding = layout_and_padding
    validate_req_to_token(layout)
    gate(layout)
    P, seqs, table = layout.page_size, layout.cache_seqlens.tolist(), layout.block_table
    assert table.shape[1] == max(pages_for(n, P) for n in seqs + [1])
    needed = []
    for r, n in enumerate(seqs):
        k = pages_for(n, P)
        needed += table[r, :k].tolist()
        slots = layout.req_to_token[layout.req_pool_indices[r], :n].long()
        assert torch.equal(slots // P, table[r, torch.arange(n) // P].long())   # table agrees with slots
        assert table[r, k:].tolist() == [PADDING_VALUES[padding]] * (table.shape[1] - k)
    assert len(needed) == len(set(needed)) == sum(pages_for(n, P) for n in seqs)   # no page shared
    assert all(1 <= p < layout.num_pages for p in needed)                            # page 0 stays reserved


corruptions = st.sampled_from(["past_pool", "negative", "huge", "narrow", "seq_past_table", "negative_seq",
                               "int64", "row_missing"])


@given(layouts, corruptions, st.integers(0, 2**16), st.integers(1, 2**20))
def test_corrupted_block_table_is_always_refused(layout, corruption, pick, amount):
    table, seqs = layout.block_table.clone(), layout.cache_seqlens.clone()
    P, width = layout.page_size, table.shape[1]
    need = [pages_for(n, P) for n in seqs.tolist()]
    entries = [(r, p) for r, k in enumerate(need) for p in range(k)]    # entries a kernel dereferences
    if corruption in ("past_pool", "negative", "huge"):
        assume(entries)
        r, p = entries[pick % len(entries)]
        table[r, p] = {"past_pool": layout.num_pages - 1 + amount, "negative": -amount,
                       "huge": 2**31 - 1}[corruption]
    elif corruption == "narrow":
        assume(max(need) == width and width > 0)
        table = table[:, :-1].contiguous()
    elif corruption == "seq_past_table":
        seqs[pick % len(seqs)] = width * P + amount
    elif corruption == "negative_seq":
        seqs[pick % len(seqs)] = -amount
    elif corruption == "int64":
        table = table.long()
    elif corruption == "row_missing":
        table = table[:-1]
    try:
        gate(layout, table, seqs)
    except InputError:
        return
    raise AssertionError(f"{corruption} corruption of a {tuple(table.shape)} table was accepted")


@given(layouts, st.integers(0, 2**16), st.integers(1, 2**20), st.sampled_from(["misalign", "past_pool",
                                                                                  "negative"]))
def test_corrupted_req_to_token_is_always_refused(layout, pick, amount, corruption):
    P, seqs = layout.page_size, layout.cache_seqlens.tolist()
    tokens = [(r, t) for r, n in enumerate(seqs) for t in range(n)]
    assume(tokens)
    r, t = tokens[pick % len(tokens)]
    row = int(layout.req_pool_indices[r])
    slot = int(layout.req_to_token[row, t])
    if corruption == "misalign":
        assume(P > 1)
        shift = amount % P or 1                          # not a multiple of the page size
        new = slot + shift
    elif corruption == "past_pool":
        new = layout.num_pages * P + (t % P) + P * (amount % 8)
    else:
        new = -P * amount + (t % P)                      # page-aligned, but a negative page
    layout.req_to_token[row, t] = new
    try:
        validate_req_to_token(layout)
    except InputError:
        return
    raise AssertionError(f"req_to_token[{row}, {t}] = {new} ({corruption}) was accepted")
