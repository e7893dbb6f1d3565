"""A chunk's sparse answers judged together: the oracles, and one transfer for every comparison.

Per chunk, not per case: the witnesses' changed flags are read once, first (a kernel that changed its
inputs is not compared: the oracle would read the changed inputs, and a changed index could send its
gather out of bounds); the oracles are queued case by case (``sparse_oracle.start_views``), the flags
that say whether two views' keys are equal read in one transfer; the comparisons go through
``compare.check_batches`` grouped by tensor and bound, as ``_common.verdicts`` groups dense ones; the noise
floors of every answer (``noise_floor``: the oracle's arithmetic in float32) read back in one
transfer.  A case's numbers are those it gets alone (``compare.check_tensors``), so its row is the same in
any chunk.
"""

import time
from dataclasses import dataclass

import torch

from ..building.sparse_inputs import SparseCase
from ..judging import noise_floor, weight_rounding
from ..judging.checks import INPUTS_UNCHANGED, tensor_check
from ..judging.compare import Pair, check_batches, describe_failure, expected_lse_for, missing
from ..judging.integrity import Witness, changed_flags
from ..judging.sparse_oracle import finish_views, floor, score_magnitudes, start_views, weighted_value_magnitudes
from ..judging.tolerances import TOLERANCES
from ..phases import KernelTime, phase
from ..recording.outcome import Outcome
from ._common import input_notes, lse_base_e

# the view recorded beside the gating one: none beside an e4m3 view, whose q and keys the exact view does not
# round, so every row would warn of the quantisation the kernel is built on
OTHER_VIEW = {"exact": None, "bf16_product": "exact", "e4m3": None}


@dataclass
class SparseAnswer:
    """One sparse kernel call's answer, waiting for its chunk's oracles and comparison (``verdicts``)."""

    case: object
    backend: object
    scase: SparseCase
    out: torch.Tensor
    lse: torch.Tensor | None
    kernel_ms: KernelTime
    witness: Witness
    expected: dict | None = None        # view -> the oracle's (out, lse), once computed
    floor: tuple | None = None          # the float32 emulation's (out, lse) in the gating view (``noise_floor``)

    @property
    def views(self) -> tuple:
        """The gating view (the backend's), then the recorded one where the kernel's differs."""
        gating = self.backend.capabilities.sparse.kv_dequant
        return (gating,) + ((OTHER_VIEW[gating],) if OTHER_VIEW[gating] else ())

    def reset(self):
        """Forget the oracle's answers, to be computed again (alone, after judging a chunk together raised)."""
        self.expected = self.floor = None


def verdicts(answers: list[SparseAnswer], timing: dict | None = None) -> list[Outcome]:
    """Each answer's outcome, in order; ``timing`` gets the host milliseconds of ``oracle`` and ``compare``.
    It always waits for the device (it reads the changed flags and the comparison back)."""
    t0 = time.perf_counter()
    with phase("oracle"):
        changed = changed_flags([a.witness for a in answers])
        run_oracles([a for a, c in zip(answers, changed) if not c])
    t1 = time.perf_counter()
    with phase("compare"):
        judged = [a for a, c in zip(answers, changed) if not c]
        checks = compare(judged)
        for a, (gating, other) in zip(judged, checks):
            second_look(a, gating, other)
        floors = iter(noise_floor.read_back([_floor_ratios(a) for a in judged]))
        outcomes = [_tampered(a) if c else _judged(a, *checks.pop(0), next(floors)) for a, c in zip(answers, changed)]
    t2 = time.perf_counter()
    if timing is not None:
        timing.update(oracle=(t1 - t0) * 1e3, compare=(t2 - t1) * 1e3)
    return outcomes


def run_oracles(answers: list[SparseAnswer]):
    """Each answer's oracle in its views; whether second views equal first ones read in one transfer."""
    todo = [a for a in answers if a.expected is None]
    pending = [start_views(a.scase, a.views) for a in todo]
    flagged = [p for p in pending if p.same is not None]
    same = dict(zip(map(id, flagged), torch.stack([p.same for p in flagged]).tolist() if flagged else []))
    for a, p in zip(todo, pending):
        a.expected = finish_views(p, same.get(id(p), False))


def _floor_ratios(a: SparseAnswer) -> torch.Tensor:
    """The emulation's worst errors over the bound, out and LSE, against the gating view's oracle (on the
    device: read back with the chunk's others)."""
    if a.floor is None:
        a.floor = floor(a.scase, a.views[0])
    return noise_floor.worst_ratios(a.floor, a.expected[a.views[0]], torch.bfloat16, _tolerance(a))


def _tolerance(a: SparseAnswer):
    """The error model the answer's backend declares its rows judged under."""
    return TOLERANCES[a.backend.capabilities.sparse.tolerance]


def compare(answers: list[SparseAnswer]) -> list[tuple[list, list]]:
    """Per answer its gating checks (out, LSE) and its other view's (the same objects where the views'
    answers are the same tensors; none with one view), in groups by tensor name and bound."""
    slots, batches = [], {}     # per answer [gating, other] lists of ((name, bound), index in batch)
    for a in answers:
        views, tolerance = a.views, _tolerance(a)
        per_view = []
        for view in views:
            if view != views[0] and a.expected[view] is a.expected[views[0]]:
                per_view.append(per_view[0])
                continue
            placed = []
            for name, pair in _pairs(a, *a.expected[view]).items():
                if not isinstance(pair, Pair):          # a check already decided (no LSE returned)
                    placed.append((pair, None))
                    continue
                key = (name, getattr(tolerance, name))
                batches.setdefault(key, []).append(pair)
                placed.append((key, len(batches[key]) - 1))
            per_view.append(placed)
        slots.append(per_view)
    done = dict(zip(batches, check_batches([(name, pairs, bound) for (name, bound), pairs in batches.items()])))

    def checked(placed):
        return [n if i is None else done[n][i] for n, i in placed]
    return [(checked(per_view[0]), checked(per_view[1]) if len(per_view) > 1 else []) for per_view in slots]


LOOKS = {"out": (weight_rounding.OUT, weighted_value_magnitudes), "lse": (weight_rounding.LSE, score_magnitudes)}


def second_look(a: SparseAnswer, gating: list, other: list):
    """The error model's second looks (``weight_rounding``) at an out or LSE over the flat element bound, in
    each view's keys; a check the two views share is looked at once.  The weights' look is bf16's: an
    fp8 model's bound already holds P's e4m3 rounding."""
    looks = LOOKS if a.backend.capabilities.sparse.tolerance == "bf16" else {"lse": LOOKS["lse"]}
    looked = set()
    for view, checks in zip(a.views, (gating, other)):
        if all(c.passed for c in checks):       # the common case: no pair to build again
            continue
        pairs = _pairs(a, *a.expected[view])
        for check in checks:
            pair = pairs.get(check.name)
            if check.passed or id(check) in looked or not isinstance(pair, Pair) or check.name not in looks:
                continue
            looked.add(id(check))
            look, magnitudes = looks[check.name]
            weight_rounding.recheck(check, pair.actual, pair.expected, getattr(_tolerance(a), check.name),
                                    lambda rows, view=view, m=magnitudes: m(a.scase, view, rows), look)


def _pairs(a: SparseAnswer, exp_out, exp_lse) -> dict:
    caps = a.backend.capabilities.sparse
    exp_lse = expected_lse_for(exp_lse, caps.empty_row_lse)
    sink = a.scase.inputs.attn_sink
    if caps.lse_includes_sink and sink is not None:     # the kernel's LSE counts the sink: so does the oracle's
        exp_lse = torch.logaddexp(exp_lse, sink.to(exp_lse)[None, :, None])
    pairs = {"out": Pair(a.out, exp_out, torch.bfloat16)}
    if a.lse is not None:
        pairs["lse"] = Pair(lse_base_e(a.lse, caps), exp_lse, torch.float32, actual_dtype=a.lse.dtype)
    elif caps.has_lse:          # an LSE declared but not returned: a failed check, never a pass
        pairs["lse"] = missing("lse", exp_lse)
    return pairs


def _judged(a: SparseAnswer, checks: list, other: list, floors: list) -> Outcome:
    other_view = OTHER_VIEW[a.backend.capabilities.sparse.kv_dequant]
    failed = [c for c in checks if not c.passed]
    metrics = {c.name: c.to_dict() for c in checks}
    floor_summary = noise_floor.summary({c.name: c for c in checks}, floors)
    if floor_summary:
        metrics["noise_floor"] = floor_summary
    metrics.update({f"{c.name}_{other_view}": c.to_dict() for c in other})
    metrics["sparse"] = _key_set_counts(a.scase)
    return Outcome.compared_with_oracle(
        [tensor_check(c.name, f) for c in failed for f in c.failures],
        metrics=metrics, messages=[describe_failure(a.case.id, c) for c in failed],
        warnings=[f"{other_view} view (not gating): " + describe_failure(a.case.id, c)
                  for c in other if not c.passed]
        + weight_rounding.passed_looks(a.case.id, checks),
        details=_details(a), kernel_ms=float(a.kernel_ms))


def _tampered(a: SparseAnswer) -> Outcome:
    where = a.witness.describe()
    return Outcome.compared_with_oracle(
        [INPUTS_UNCHANGED], metrics={INPUTS_UNCHANGED: {"changed": where}},
        messages=[f"{a.case.id}: the kernel changed its inputs: {where} (not compared with the oracle, which "
                  "would read the changed inputs)"],
        details=_details(a), kernel_ms=float(a.kernel_ms))


def _key_set_counts(scase: SparseCase) -> dict:
    stats, extra = scase.index_stats, scase.extra_stats          # read back when built: no wait
    counts = {"rows": stats.rows, "topk": scase.inputs.topk, "valid_entries": stats.valid_entries,
              "empty_rows": stats.empty_rows, "kv_format": scase.inputs.kv_format}
    if extra is not None:       # DeepSeek V4's extra cache: its own counts (V3.2 rows keep their keys)
        counts["extra"] = {"topk": scase.inputs.extra_topk, "valid_entries": extra.valid_entries,
                           "empty_rows": extra.empty_rows, "kv_format": scase.inputs.extra_kv_format,
                           "page_size": scase.inputs.extra_page_size}
    return counts


def _details(a: SparseAnswer) -> dict:
    return {"seq_lens": a.scase.seq_lens, "tokens_seen": a.scase.seen,
            "sparse_conventions": a.backend.capabilities.sparse.conventions(), **input_notes(a.scase.notes)}
