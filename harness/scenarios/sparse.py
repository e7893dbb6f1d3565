"""``sparse``: sparse MLA decode (DeepSeek V3.2/V4 DSA), a mode of the chunk path with its own inputs.

The inputs are SGLang's (``sparse_inputs``: a poisoned pool of fp8 token records, per-query-token key
sets of KV slots with -1 tails, verify flattened into rows; DeepSeek V4's extra cache and per-row lengths);
the gate (``sparse_gate``) refuses an out-of-range index or length before any kernel runs; the backend's
``run_sparse`` is called with every input fingerprinted before and after (``integrity.Witness``).
``start`` gives a ``SparseAnswer`` that waits for its chunk; ``verdicts`` (``_sparse_verdicts``) judges a
chunk's answers together: out and LSE against the float64 oracle over exactly each row's key set, in the
view of the cache the backend declares (``kv_dequant``), under the error model it declares (``tolerance``:
bf16, or fp8_e4m3 for a kernel that reads q and KV as e4m3).  The other view
(``exact`` when the kernel's is ``bf16_product``) is recorded beside it, never gating (docs/sparse.md).  A
backend without ``run_sparse`` is ``unsupported``.
"""

import dataclasses

import torch

from ..backends.base import Feature, no_sparse_reason
from ..building.sparse_gate import validate_scopes
from ..building.sparse_inputs import SparseCase, build, output_buffer
from ..judging.integrity import Witness
from ..phases import KERNEL, KernelTime, phase, settle
from ..recording.outcome import Outcome
from ._common import call_surviving_exit, reject_malformed
from ._sparse_verdicts import OTHER_VIEW, SparseAnswer, verdicts  # noqa: F401  (the scenario's judging)


def start(case, backend, device, waits: bool = True) -> Outcome | SparseAnswer:
    """The case's kernel, gated and launched (``waits``: around it, ``launch``); its answer waits for the
    chunk's ``verdicts``.  An outcome at once where the backend cannot take the case, or the machine
    cannot hold it."""
    reason = refusal(case, backend, device)
    if reason is not None:
        return Outcome.unsupported(reason)
    with phase("inputs"):
        scase = build(case, device)
    out, lse, kernel_time, witness = launch(backend, scase, waits)
    return SparseAnswer(case, backend, scase, out, lse, kernel_time, witness)


def run(case, backend, device, waits: bool = True) -> Outcome:
    """One case alone: ``start``, then the verdict of a chunk of one."""
    answer = start(case, backend, device, waits)
    return answer if isinstance(answer, Outcome) else verdicts([answer])[0]


def refusal(case, backend, device) -> str | None:
    """Why the case is ``unsupported`` here (no sparse entry point, the backend's limits)."""
    if not backend.supports(Feature.SPARSE):
        return no_sparse_reason(backend)
    # too large for the machine: the runner's precheck, against memory measured before any worker ran
    # (resources.too_large_reason, with sparse_inputs.estimated_bytes)
    return backend.capabilities.sparse.reason_unsupported(case, torch.device(device).type)


def launch(backend, scase: SparseCase, waits: bool = True):
    """Gate, run and time one sparse call with a fresh guarded output buffer, witnessing its inputs.
    The gate reads the indices' ``IndexStats``, read back when they were built: no wait for the device.
    ``waits``: wait for the device before and after the call, as ``_common.launch`` does."""
    validate_scopes(scase, backend.capabilities.sparse)
    inputs = dataclasses.replace(scase.inputs, out=output_buffer(scase.inputs))
    witness = Witness(inputs)
    settle(inputs.device, waits)
    with phase(KERNEL):
        kernel_time = KernelTime(inputs.device)
        out, lse = call_surviving_exit(backend.run_sparse, inputs)
        kernel_time.stop()
        settle(inputs.device, waits)
    reject_malformed(out, lse, inputs.device)
    return out, lse, kernel_time, witness.seal()
