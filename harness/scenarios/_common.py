"""What every scenario shares: build the inputs, launch the kernel through the gate, judge the answer."""

import dataclasses
import math
import time
from dataclasses import dataclass

import torch

from reference import descale_scalar

from ..backends.base import Feature
from ..building.inputs import Inputs, generate, host_copy, output_buffer, torch_dtype
from ..building.pool import validate_block_table
from ..errors import RejectedOutput
from ..judging import diagnostics, noise_floor, oracle, weight_rounding
from ..judging.checks import INPUTS_UNCHANGED, TENSORS, Kind, tensor_check
from ..judging.compare import Pair, check_batches, check_tensors, describe_failure, expected_lse_for, missing
from ..judging.integrity import Witness, changed_flags
from ..judging.tolerances import TOLERANCES, Tolerance
from ..phases import KERNEL, KernelTime, phase, settle
from ..recording.outcome import Outcome
from ._evidence import out_samples
from ._oracles import run_floors, run_oracles, second_look


def build_inputs(case, device) -> Inputs:
    with phase("inputs"):
        return generate(case, device)


@dataclass
class KernelCall:
    """One kernel call: its out and LSE as the kernel returned them, its time (a ``KernelTime``: ``float()``
    gives its milliseconds once the call is done), and the witness of its inputs (``integrity``)."""

    out: torch.Tensor
    lse: torch.Tensor | None
    kernel_ms: KernelTime
    witness: Witness


def launch(backend, inputs: Inputs, waits: bool = True) -> KernelCall:
    """Gate, run and time one kernel call, handing it a fresh guarded output buffer (``Inputs.out``) and
    fingerprinting everything it is given before and after (``integrity.Witness``).  ``waits``: wait for
    the device before and after the call, so a fault lands in its own phase (a case alone; not a case of
    a chunk of several in a worker, ``phases``)."""
    host = host_copy(inputs)      # the table as sent: checking it needs no wait on the device
    validate_block_table(host.block_table, host.cache_seqlens, inputs.num_pages, inputs.page_size)
    inputs = dataclasses.replace(inputs, out=output_buffer(inputs))
    witness = Witness(inputs)
    settle(inputs.device, waits)    # a fault of the harness's work so far surfaces here, before the kernel's phase
    with phase(KERNEL):
        if backend.supports(Feature.PREPARE):     # one-time setup (a JIT build, a plan), kept out of kernel time
            backend.prepare(inputs)
        kernel_time = KernelTime(inputs.device)
        out, lse = call_surviving_exit(backend.run, inputs)
        kernel_time.stop()
        settle(inputs.device, waits)    # an asynchronous kernel fault surfaces here, still in the kernel's phase
    reject_malformed(out, lse, inputs.device)
    return KernelCall(out, lse, kernel_time, witness.seal())


def call_surviving_exit(run, inputs):
    """``run(inputs)``, where a kernel that exits the interpreter (``sys.exit``) raised instead: in-process
    it would end the run with no verdict and no rows."""
    try:
        return run(inputs)
    except SystemExit as e:
        raise RuntimeError(f"the kernel called sys.exit({e.code!r})") from None


def reject_malformed(out, lse, device):
    """Raise ``RejectedOutput`` for an answer no comparison can read: not a tensor, or not on the inputs'
    device.  A wrong shape or dtype is the comparison's to judge."""
    for name, t in (("out", out), ("lse", lse)):
        if t is None and name == "lse":
            continue
        if not isinstance(t, torch.Tensor):
            raise RejectedOutput(tensor_check(name, Kind.TYPE),
                                 f"{name} is a {type(t).__module__}.{type(t).__qualname__}, not a torch.Tensor")
        if t.device != device:
            raise RejectedOutput(tensor_check(name, Kind.DEVICE),
                                 f"{name} is on device {t.device}, the inputs on {device}")


def lse_base_e(lse: torch.Tensor | None, capabilities) -> torch.Tensor | None:
    """The kernel's LSE in natural log, as the oracle gives it (None: the kernel returns no LSE)."""
    return lse.double() * math.log(2) if lse is not None and capabilities.lse_base == "2" else lse


def expected_out_dtype(inputs: Inputs, capabilities) -> torch.dtype:
    """What the engine needs: the model dtype (bf16 for fp8 cases), unless the backend declares its own."""
    return torch_dtype(capabilities.out_dtype) if capabilities.out_dtype else inputs.model_dtype


def compare_with(backend, inputs, out, lse, exp_out, exp_lse, tol: Tolerance):
    """out and LSE against expected values, under the backend's conventions (LSE base, empty rows, dtypes)."""
    pairs, exp_lse = pairs_for(backend, inputs, out, lse, exp_out, exp_lse)
    bounds = {"out": tol.out, "lse": tol.lse}
    checks = {name: check_tensors(name, [p], bounds[name])[0] if isinstance(p, Pair) else p
              for name, p in pairs.items()}
    return checks["out"], checks["lse"], exp_lse


def pairs_for(backend, inputs, out, lse, exp_out, exp_lse):
    """What to compare for out and LSE, by name: a ``Pair``, a failed check (no LSE), or None (none
    expected); and the expected LSE under the backend's empty-row convention."""
    caps = backend.capabilities
    exp_lse = expected_lse_for(exp_lse, caps.empty_row_lse)
    pairs = {"out": Pair(out, exp_out, expected_out_dtype(inputs, caps))}
    # LSE's values are read in base e; its dtype is checked as the kernel returned it.  A kernel
    # without an LSE (declared has_lse=False) gets no LSE check, which is recorded, never a pass.
    if lse is None:
        pairs["lse"] = None if not caps.has_lse else missing("lse", exp_lse)
    else:
        pairs["lse"] = Pair(lse_base_e(lse, caps), exp_lse, torch_dtype(caps.lse_dtype), actual_dtype=lse.dtype)
    return pairs, exp_lse


@dataclass
class Answer:
    """One kernel call's answer, waiting for its oracle and comparison (``verdicts``)."""

    case: object
    backend: object
    inputs: Inputs
    out: torch.Tensor
    lse: torch.Tensor | None
    kernel_ms: KernelTime | float | None = None
    witnesses: tuple = ()                # every call's ``integrity.Witness``: the oracle's answer needs them clean
    extra_failures: tuple = ()           # a scenario's own checks (determinism, padding, ...)
    extra_metrics: dict | None = None
    extra_messages: tuple = ()
    expected: tuple | None = None        # the oracle's (out, lse) on exactly the kernel's inputs (``verdicts``)
    end_to_end: tuple | None = None      # fp8: the oracle's (out, lse) on the unquantised inputs
    floor: tuple | None = None           # its float32 emulation's (``noise_floor``)

    def reset(self):
        """Forget the oracle's answers, to be computed again (alone, after judging a chunk together raised)."""
        self.expected = self.end_to_end = self.floor = None


def expect(case, backend, inputs, call: KernelCall, others=(), extra_failures=(), extra_metrics=None,
           extra_messages=()) -> Answer:
    """``call``'s answer, for ``verdicts``; ``others`` are the scenario's further calls, whose inputs must be
    unchanged too.  The oracle always runs after the kernel, so memory the oracle reuses cannot hide a
    bug: here, when it gains nothing from other calls' company (its device work then overlaps the host's
    work on the next case), else in ``verdicts`` with its chunk.  Either way its answer is used only
    once the witnesses show the inputs unchanged."""
    answer = Answer(case, backend, inputs, call.out, call.lse, call.kernel_ms,
                    tuple(c.witness for c in (call, *others)), tuple(extra_failures), extra_metrics,
                    tuple(extra_messages))
    # the oracle's calls (the kernel's view, fp8's model precision) keep the inputs' device and lengths,
    # which are all that decide it
    if not oracle.gains_from_company(inputs):
        with phase("oracle"):
            run_oracles([answer])
    return answer


def judge(case, backend, inputs, call: KernelCall, others=(), extra_failures=(), extra_metrics=None,
          extra_messages=()) -> Outcome:
    """Compare one call's out and LSE with the oracle and build its outcome.

    ``extra_*`` carry a scenario's own checks (determinism, padding, ...), which gate like the
    comparison does.
    """
    return verdicts([expect(case, backend, inputs, call, others, extra_failures, extra_metrics,
                            extra_messages)])[0]


def verdicts(answers: list[Answer], timing: dict | None = None) -> list[Outcome]:
    """Run the oracles the answers still need (together) and compare them all at once (one device-to-host
    transfer for every comparison), and build their outcomes.  ``timing`` gets the host
    milliseconds of ``oracle`` and ``compare``.  It always waits for the device, whoever calls it: it
    reads the answers back (the one wait of a chunk whose cases do not wait around their kernels).

    Each answer's numbers are those it gets alone (``reference/batched.py``, ``compare.check_tensors``).
    """
    t0 = time.perf_counter()
    with phase("oracle"):
        run_oracles(answers)
    t1 = time.perf_counter()
    with phase("compare"):
        checks = [{} for _ in answers]            # per answer: tensor name -> TensorCheck
        batches = {}                              # (tensor name, bound) -> [(answer index, Pair)]
        exp_lses, look_pairs = [], []
        for i, a in enumerate(answers):
            tol = TOLERANCES[a.case.dtype]
            pairs, exp_lse = pairs_for(a.backend, a.inputs, a.out, a.lse, *a.expected)
            exp_lses.append(exp_lse)
            look_pairs.append(dict(pairs))
            bounds = {"out": tol.out, "lse": tol.lse}
            if a.end_to_end is not None:
                # The end-to-end error (against unquantised inputs) includes the engine's quantisation of
                # q and KV, which no kernel can undo: it is recorded beside the kernel's error, not gated on.
                e2e, _ = pairs_for(a.backend, a.inputs, a.out, a.lse, *a.end_to_end)
                for (name, pair), tensor in zip(e2e.items(), (t for t in TENSORS if not t.gating)):
                    pairs[tensor.name] = pair
                    bounds[tensor.name] = getattr(tol.end_to_end, name)
            for name, pair in pairs.items():
                if isinstance(pair, Pair):
                    batches.setdefault((name, bounds[name]), []).append((i, pair))
                elif pair is not None:
                    pair.name = name
                    checks[i][name] = pair
        checked = check_batches([(name, [p for _, p in items], bound) for (name, bound), items in batches.items()])
        for items, batch in zip(batches.values(), checked):
            for (i, _), check in zip(items, batch):
                checks[i][check.name] = check
        for a, check, pair in zip(answers, checks, look_pairs):
            second_look(a, check, pair)
        samples = out_samples([(a.case.seed, a.out) for a in answers])
        floors = _floors(answers)
        outcomes = [_outcome(a, [c for t in TENSORS if (c := checks[i].get(t.name)) is not None],
                             exp_lses[i], samples[i], noise_floor.summary(checks[i], floors[i]))
                    for i, a in enumerate(answers)]
        _wait_for(answers[0].inputs.device if answers else "cpu")
        # A kernel that changed its inputs fails on that alone: the oracle read the changed inputs, so its
        # comparison is dropped.  The flags are read last, once the device is done: no wait of their own.
        flags = iter(changed_flags([w for a in answers for w in a.witnesses]))
        for i, a in enumerate(answers):
            if any([next(flags) for _ in a.witnesses]):
                outcomes[i] = _tampered(a, samples[i])
    t2 = time.perf_counter()
    if timing is not None:
        timing.update(oracle=(t1 - t0) * 1e3, compare=(t2 - t1) * 1e3)
    return outcomes


def _floors(answers: list[Answer]) -> list:
    """Per answer its noise floor's worst ratios read back (``noise_floor``): the float32 emulation of every
    answer, measured as the kernel is."""
    run_floors(answers)
    return noise_floor.read_back([
        noise_floor.worst_ratios(a.floor, a.expected, expected_out_dtype(a.inputs, a.backend.capabilities),
                                 TOLERANCES[a.case.dtype]) for a in answers])


def _wait_for(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _tampered(a: Answer, sample: dict) -> Outcome:
    """The outcome of an answer whose kernel changed its inputs: that failure, and the scenario's own."""
    where = "; ".join(w.describe() for w in a.witnesses if bool(w.changed))
    host = host_copy(a.inputs)
    return Outcome.compared_with_oracle(
        [INPUTS_UNCHANGED] + sorted(set(a.extra_failures)),
        metrics={**(a.extra_metrics or {}), INPUTS_UNCHANGED: {"changed": where}, "out_sample": sample},
        messages=[f"{a.case.id}: the kernel changed its inputs: {where} (not compared with the oracle, which "
                  "would read the changed inputs)"] + list(a.extra_messages),
        details={"seq_lens": host.seq_lens.tolist(), "cache_seqlens": host.cache_seqlens.tolist(),
                 **input_notes(a.inputs.notes)},
        kernel_ms=None if a.kernel_ms is None else float(a.kernel_ms))


def input_notes(notes) -> dict:
    """What building the inputs noticed (a writer that stored NaN for a zero tile): the row says so, naming
    the writer, so an engine's defect is not read as the kernel's."""
    return {"input_notes": list(notes)} if notes else {}


def _outcome(a: Answer, results: list, exp_lse, sample: dict, floor: dict | None) -> Outcome:
    gating = {t.name for t in TENSORS if t.gating}
    failed = [c for c in results if not c.passed and c.name in gating]
    exp_out = a.expected[0]
    # no LSE from the kernel: the LSE panels compare the oracle with itself (all zero error)
    lse = exp_lse if a.lse is None else lse_base_e(a.lse, a.backend.capabilities)
    diag = diagnostics.summarize(a.inputs, a.out, lse, exp_out, exp_lse, TOLERANCES[a.case.dtype]) if failed else None
    host = host_copy(a.inputs)
    return Outcome.compared_with_oracle(
        [tensor_check(c.name, f) for c in failed for f in c.failures] + sorted(set(a.extra_failures)),
        metrics={**{c.name: c.to_dict() for c in results}, **(a.extra_metrics or {}), "out_sample": sample,
                 **({"noise_floor": floor} if floor else {})},
        messages=[describe_failure(a.case.id, c) for c in failed] + list(a.extra_messages),
        warnings=[describe_failure(a.case.id, c) for c in results if not c.passed and c.name not in gating]
        + weight_rounding.passed_looks(a.case.id, results),
        diagnostics=diag,
        details={"seq_lens": host.seq_lens.tolist(), "cache_seqlens": host.cache_seqlens.tolist(),
                 "k_scale": descale_scalar(a.inputs.descale_k),
                 **({"lse_produced": False} if a.lse is None else {}), **input_notes(a.inputs.notes)},
        kernel_ms=None if a.kernel_ms is None else float(a.kernel_ms))
