"""What every scenario shares: build the inputs, launch the kernel through the gate, judge the answer."""

import math
import time

import torch

from .. import diagnostics, oracle
from ..checks import TENSORS, tensor_check
from ..compare import check_tensor, describe_failure, expected_lse_for, missing
from ..conventions import kernel_view
from ..inputs import Inputs, generate, torch_dtype
from ..outcome import Outcome
from ..phases import KERNEL, phase
from ..pool import validate_block_table
from ..tolerances import TOLERANCES, Tolerance


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def build_inputs(case, device) -> Inputs:
    with phase("inputs"):
        return generate(case, device)


def launch(backend, inputs: Inputs):
    """Gate, run and time one kernel call; returns the kernel's own ``(out, lse, kernel_ms)``."""
    validate_block_table(inputs.block_table, inputs.cache_seqlens, inputs.num_pages, inputs.page_size)
    sync(inputs.device)
    with phase(KERNEL):
        if hasattr(backend, "prepare"):       # one-time setup (a JIT build, a plan), kept out of kernel time
            backend.prepare(inputs)
            sync(inputs.device)
        t0 = time.perf_counter()
        out, lse = backend.run(inputs)
        sync(inputs.device)     # an asynchronous kernel fault surfaces here, still in the kernel's phase
    return out, lse, (time.perf_counter() - t0) * 1e3


def lse_base_e(lse: torch.Tensor | None, capabilities) -> torch.Tensor | None:
    """The kernel's LSE in natural log, as the oracle gives it (None: the kernel returns no LSE)."""
    return lse.double() * math.log(2) if lse is not None and capabilities.lse_base == "2" else lse


def expected_out_dtype(inputs: Inputs, capabilities) -> torch.dtype:
    """What the engine needs: the model dtype (bf16 for fp8 cases), unless the backend declares its own."""
    return torch_dtype(capabilities.out_dtype) if capabilities.out_dtype else inputs.model_dtype


def compare_with(backend, inputs, out, lse, exp_out, exp_lse, tol: Tolerance):
    """out and LSE against expected values, under the backend's conventions (LSE base, empty rows, dtypes)."""
    caps = backend.capabilities
    exp_lse = expected_lse_for(exp_lse, caps.empty_row_lse)
    out_check = check_tensor("out", out, exp_out, tol.out, expected_out_dtype(inputs, caps))
    # LSE's values are read in base e; its dtype is checked as the kernel returned it.  A kernel
    # without an LSE (declared has_lse=False) gets no LSE check, which is recorded, never a pass.
    if lse is None:
        lse_check = None if not caps.has_lse else missing("lse", exp_lse)
    else:
        lse_check = check_tensor("lse", lse_base_e(lse, caps), exp_lse, tol.lse, torch_dtype(caps.lse_dtype),
                                 actual_dtype=lse.dtype)
    return out_check, lse_check, exp_lse


def judge(case, backend, inputs, out, lse, kernel_ms=None, extra_failures=(), extra_metrics=None,
          extra_messages=()) -> Outcome:
    """Compare one call's out and LSE with the oracle and build its outcome.

    ``extra_*`` carry a scenario's own checks (determinism, padding, ...), which gate like the
    comparison does.
    """
    t0 = time.perf_counter()
    with phase("oracle"):
        exp_out, exp_lse = oracle.expected(kernel_view(inputs, backend.capabilities))   # what the kernel computes with
        e2e = oracle.expected_model_precision(inputs) if inputs.is_fp8 and inputs.q_model is not None else None
    tol = TOLERANCES[case.dtype]
    with phase("compare"):
        out_check, lse_check, exp_lse = compare_with(backend, inputs, out, lse, exp_out, exp_lse, tol)
        results = [out_check, lse_check]
        if e2e is not None:
            # The end-to-end error (against unquantised inputs) includes the engine's quantisation of q
            # and KV, which no kernel can undo: it is recorded beside the kernel's error, not gated on.
            o, l, _ = compare_with(backend, inputs, out, lse, *e2e, tol.end_to_end)
            for check, tensor in zip((o, l), (t for t in TENSORS if not t.gating)):
                if check is not None:
                    check.name = tensor.name
            results += [o, l]
        results = [c for c in results if c is not None]
        gating = {t.name for t in TENSORS if t.gating}
        failed = [c for c in results if not c.passed and c.name in gating]
        # no LSE from the kernel: the LSE panels compare the oracle with itself (all zero error)
        diag = (diagnostics.summarize(inputs, out, exp_lse if lse is None else lse_base_e(lse, backend.capabilities),
                                      exp_out, exp_lse, tol) if failed else None)
        sync(inputs.device)
    return Outcome.judged(
        [tensor_check(c.name, f) for c in failed for f in c.failures] + sorted(set(extra_failures)),
        metrics={**{c.name: c.to_dict() for c in results}, **(extra_metrics or {}),
                 "out_sample": out_sample(case.seed, out)},
        messages=[describe_failure(case.id, c) for c in failed] + list(extra_messages),
        warnings=[describe_failure(case.id, c) for c in results if not c.passed and c.name not in gating],
        diagnostics=diag,
        details={"seq_lens": inputs.seq_lens.cpu().tolist(), "cache_seqlens": inputs.cache_seqlens.cpu().tolist(),
                 "k_scale": None if inputs.descale_k is None else float(inputs.descale_k[0]),
                 **({"lse_produced": False} if lse is None else {})},
        kernel_ms=kernel_ms, reference_ms=(time.perf_counter() - t0) * 1e3)


SAMPLE_SIZE = 64


def out_sample(seed: int, out: torch.Tensor) -> dict:
    """The kernel's out at ``SAMPLE_SIZE`` positions drawn from the case's seed: the same positions on every
    backend, so the report can set kernels against each other without storing whole tensors."""
    n = out.numel()
    if not n:
        return {"positions": [], "values": []}
    positions = torch.randint(0, n, (min(SAMPLE_SIZE, n),), generator=torch.Generator().manual_seed(seed))
    values = out.reshape(-1)[positions.to(out.device)].double().cpu().tolist()
    return {"positions": positions.tolist(), "values": values}


def bitwise_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Same shape, dtype and bits (NaN payloads included); two missing LSEs are equal."""
    if a is None or b is None:
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)   # noqa: E731
    return bool(torch.equal(as_bytes(a), as_bytes(b)))


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    diff = ~((a == b) | (torch.isnan(a.float()) & torch.isnan(b.float())))
    if not bool(diff.any()):
        return "bit patterns differ (e.g. NaN payload or -0.0)"
    idx = [int(i) for i in diff.nonzero()[0]]
    return f"first at index {idx}: {float(a[tuple(idx)]):.6g} vs {float(b[tuple(idx)]):.6g}"
