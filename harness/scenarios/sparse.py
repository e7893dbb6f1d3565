"""``sparse``: sparse MLA decode (DeepSeek V3.2/V4 DSA), run whole with its own inputs.

The inputs are SGLang's (``sparse_inputs``: a poisoned pool of fp8 token records, per-query-token key
sets of KV slots with -1 tails, verify flattened into rows); the index gate refuses an out-of-range
index before any kernel runs; the backend's ``run_sparse`` is called with every input fingerprinted
before and after (``integrity.Witness``), and out and LSE are compared with the float64 oracle over
exactly each row's key set, in the view of the cache the backend declares (``kv_dequant``), under the
bf16 tolerance.  The other view (``exact`` when the kernel's is ``bf16_product``) is recorded beside it,
never gating (docs/sparse.md).  A backend without ``run_sparse`` is ``unsupported``.
"""

import dataclasses

import torch

from ..checks import INPUTS_UNCHANGED, tensor_check
from ..compare import check_tensor, describe_failure, expected_lse_for
from ..integrity import Witness, changed_flags
from ..outcome import Outcome
from ..phases import KERNEL, KernelTime, phase, settle
from ..resources import CPU_FRACTION, CUDA_FRACTION, GiB, available_bytes
from ..sparse_inputs import SparseCase, build, estimated_bytes, output_buffer, validate_indices
from ..sparse_oracle import expected_views
from ..tolerances import TOLERANCES
from ._common import _survived, lse_base_e, reject_malformed

OTHER_VIEW = {"exact": None, "bf16_product": "exact"}


def run(case, backend, device) -> Outcome:
    if not hasattr(backend, "run_sparse"):
        return Outcome.unsupported(f"{backend.name} has no sparse entry point (run_sparse): mla-verify calls it "
                                   "for dense paged MLA only")
    caps = backend.sparse_capabilities
    reason = caps.reason_unsupported(case, torch.device(device).type)
    if reason is not None:
        return Outcome.unsupported(reason)
    reason = too_large(case, device)
    if reason is not None:
        return Outcome.unsupported(reason)
    with phase("inputs"):
        scase = build(case, device)
    out, lse, kernel_time, witness = launch(backend, scase)
    details = _details(scase, caps)
    if changed_flags([witness])[0]:
        where = witness.describe()
        return Outcome.judged([INPUTS_UNCHANGED], metrics={INPUTS_UNCHANGED: {"changed": where}},
                              messages=[f"{case.id}: the kernel changed its inputs: {where} (not compared with "
                                        "the oracle, which would read the changed inputs)"],
                              details=details, kernel_ms=float(kernel_time))
    checks, other = judge(scase, caps, out, lse)
    tol_failed = [c for c in checks if not c.passed]
    metrics = {c.name: c.to_dict() for c in checks}
    metrics.update({f"{c.name}_{OTHER_VIEW[caps.kv_dequant]}": c.to_dict() for c in other})
    metrics["sparse"] = _key_set_counts(scase)
    return Outcome.judged(
        [tensor_check(c.name, f) for c in tol_failed for f in c.failures],
        metrics=metrics, messages=[describe_failure(case.id, c) for c in tol_failed],
        warnings=[f"{OTHER_VIEW[caps.kv_dequant]} view (not gating): " + describe_failure(case.id, c)
                  for c in other if not c.passed],
        details=details, kernel_ms=float(kernel_time))


def too_large(case, device) -> str | None:
    """The sparse case's own size estimate (``sparse_inputs.estimated_bytes``) against this machine's
    budget, as ``resources`` budgets dense cases: over it, the numbers, before anything is allocated."""
    kind = torch.device(device).type
    available, measured = available_bytes(device)
    budget = int(available * (CUDA_FRACTION if kind == "cuda" else CPU_FRACTION))
    need = estimated_bytes(case)
    if need["total"] <= budget:
        return None
    detail = ", ".join(f"{k} {v / GiB:.1f}" for k, v in need.items() if k != "total")
    return (f"too large for this machine: needs about {need['total'] / GiB:.1f} GiB ({detail} GiB), over "
            f"the {budget / GiB:.1f} GiB budget ({CUDA_FRACTION if kind == 'cuda' else CPU_FRACTION:.0%} "
            f"of {measured})")


def launch(backend, scase: SparseCase):
    """Gate, run and time one sparse call with a fresh guarded output buffer, witnessing its inputs."""
    validate_indices(scase.indices, scase.inputs.num_slots)
    inputs = dataclasses.replace(scase.inputs, out=output_buffer(scase.inputs))
    witness = Witness(inputs)
    settle(inputs.device)
    with phase(KERNEL):
        kernel_time = KernelTime(inputs.device)
        out, lse = _survived(backend.run_sparse, inputs)
        kernel_time.stop()
        settle(inputs.device)
    reject_malformed(out, lse, inputs.device)
    return out, lse, kernel_time, witness.seal()


def judge(scase: SparseCase, caps, out, lse):
    """The gating checks (out, LSE against the backend's view) and, where the kernel computes with
    another view than the record's meaning, the same against ``exact``, recorded only.  Where the two
    views' keys are equal bit for bit the oracle and comparison run once (the rows are the same)."""
    tol = TOLERANCES["bf16"]
    other = OTHER_VIEW[caps.kv_dequant]
    with phase("oracle"):
        answers = expected_views(scase, (caps.kv_dequant, other) if other else (caps.kv_dequant,))

    def against(view):
        exp_out, exp_lse = answers[view]
        with phase("compare"):
            exp_lse = expected_lse_for(exp_lse, caps.empty_row_lse)
            return [check_tensor("out", out, exp_out, tol.out, expected_dtype=torch.bfloat16),
                    check_tensor("lse", lse_base_e(lse, caps), exp_lse, tol.lse, expected_dtype=torch.float32,
                                 actual_dtype=lse.dtype)]
    checks = against(caps.kv_dequant)
    if not other:
        return checks, []
    return checks, (checks if answers[other] is answers[caps.kv_dequant] else against(other))


def _key_set_counts(scase: SparseCase) -> dict:
    valid = (scase.indices >= 0).sum(dim=-1).flatten()
    return {"rows": int(valid.numel()), "topk": scase.inputs.topk, "valid_entries": int(valid.sum()),
            "empty_rows": int((valid == 0).sum()), "kv_format": scase.inputs.kv_format}


def _details(scase: SparseCase, caps) -> dict:
    return {"seq_lens": scase.seq_lens, "tokens_seen": scase.seen, "sparse_conventions": caps.conventions()}
