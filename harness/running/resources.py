"""Does a case fit the machine?  An estimate of its peak memory, checked before anything is built.

Serving-scale cases (a 163,840-token context, a pool of 2^17+ pages, a batch of
512) fit an H200 but not a laptop.  ``too_large_reason`` compares the estimated
peak bytes of the case's inputs, the kernel's working set and the float64
oracle with a budget: a fraction of the host's available RAM on the CPU, of the
device's free memory on CUDA.  The estimate uses the case's real seq lens (a
draw of ``batch_size`` integers from its seed, nothing else).  Each part is
exported by the code that allocates it: ``inputs.footprint`` (pools, draws,
layout), ``conventions.view_footprint`` (the backend's widened kernel view),
``reference.batched.oracle_block_bytes`` (the oracle), ``TorchBackend.split_bytes``
(the kernel's working set) and ``integrity.witness_bytes``; here they are summed
and budgeted.
"""

import os
from functools import cache

import torch

from reference.batched import oracle_block_bytes, oracle_output_bytes

from ..backends.torch_backend import TorchBackend
from ..building.inputs import cache_seqlens_for, draw_seq_lens, footprint
from ..building.sparse_inputs import chunk_parts as sparse_chunk_parts
from ..building.sparse_inputs import estimated_bytes as sparse_estimated_bytes
from ..judging.conventions import key_width, view_footprint, view_width
from ..judging.integrity import witness_bytes
from ..planning.cases import Case

GiB = 1 << 30
CPU_FRACTION = 0.5      # leave the rest to the OS, the kernel's process and a second worker
CUDA_FRACTION = 0.9     # the caching allocator's fragmentation and the CUDA context
# A CPU run's time grows with the cached KV it builds and reads: on 2 cores, 1.9e8 elements (a batch of
# 64 long-tail requests) took 10 s and 1.3e9 (a batch of 512) 112 s, input building, torch backend and
# oracle together.  Past this a case that fits in RAM is still no CPU job; a 163,840-token context is 9.4e7.
CPU_MAX_KV_ELEMENTS = 2 ** 27


def estimated_bytes(case: Case, capabilities=None) -> dict[str, int]:
    """Peak bytes by part, and their ``total``: pools + the larger of input building and checking.
    ``capabilities``: the backend's, where its kernel view widens the oracle's keys (``conventions``)."""
    return dict(_estimate(case, view_width(case, capabilities)))


@cache      # asked for every case by the size check, the chunk plan and the memory gate
def _estimate(case: Case, widened: int = 0) -> dict[str, int]:
    longest = max(cache_seqlens_for(case, draw_seq_lens(case)), default=0)
    b, s_q, h_q = case.batch_size, case.s_q, case.heads
    made = footprint(case)
    parts = {"pools": made["pools"], "view": view_footprint(case, widened), "inputs": made["inputs"],
             "layout": made["layout"]}
    oracle = oracle_block_bytes(b, longest, s_q * h_q, key_width(case, widened))
    kernel = TorchBackend.split_bytes(b, longest, case.kv_heads * case.d_qk)
    judged = 2 if case.dtype.startswith("fp8") else 1      # fp8: the kernel's view, and end to end
    outputs = made["outputs"] + oracle_output_bytes(b * s_q * h_q * case.d_v) * judged
    parts["checking"] = oracle + kernel + outputs
    parts["witness"] = witness_bytes(parts["pools"], made["q"])
    parts["total"] = (parts["pools"] + parts["layout"] + parts["view"] + parts["witness"]
                      + max(parts["inputs"], parts["checking"]))
    # in a chunk, a case's pools, layout, view and outputs wait for the chunk's comparison; the rest is
    # gone by the time the next case starts
    parts["held"] = parts["pools"] + parts["layout"] + parts["view"] + parts["witness"] + outputs
    parts["passing"] = max(parts["inputs"], oracle + kernel)
    return parts


def available_bytes(device: str) -> tuple[int, str]:
    """What the machine has now, and how it was measured."""
    if torch.device(device).type == "cuda":
        free, total = torch.cuda.mem_get_info(torch.device(device))
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)   # reusable
        return free + cached, (f"{(free + cached) / GiB:.1f} GiB free or cached of {total / GiB:.1f} GiB "
                               f"on {torch.cuda.get_device_name(device)}")
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return info["MemAvailable"], f"{info['MemAvailable'] / GiB:.1f} GiB available host RAM"
    except (OSError, KeyError, ValueError, IndexError):
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return avail, f"{avail / GiB:.1f} GiB free host RAM"


def kv_elements(case: Case) -> int:
    """Cached KV elements the case writes and reads: its tokens times their width."""
    return sum(cache_seqlens_for(case, draw_seq_lens(case))) * case.kv_heads * case.d_qk


def too_large_reason(case: Case, device: str, available: int | None = None,
                     cpu_max_kv_elements: int = CPU_MAX_KV_ELEMENTS, measured: str | None = None,
                     capabilities=None) -> str | None:
    """Why ``case`` cannot be built on ``device`` (the numbers), or None if it fits.

    ``available`` overrides the measured free memory (a run measures once; tests; a machine shared
    with others); ``measured`` says how it was measured; ``capabilities`` as for ``estimated_bytes``.
    """
    if torch.device(device).type == "cpu" and kv_elements(case) > cpu_max_kv_elements:
        return (f"too large for a CPU run: {kv_elements(case):.2e} cached KV elements, over the "
                f"{cpu_max_kv_elements:.2e} a CPU checks in about 10 s (it needs a GPU)")
    fraction = CUDA_FRACTION if torch.device(device).type == "cuda" else CPU_FRACTION
    if available is None:
        available, measured = available_bytes(device)
    elif measured is None:
        measured = f"{available / GiB:.1f} GiB given"
    sparse = case.scenario == "sparse"         # its own inputs, records and oracle (sparse_inputs)
    need = sparse_estimated_bytes(case) if sparse else estimated_bytes(case, capabilities)
    budget = int(available * fraction)
    if need["total"] <= budget:
        return None
    parts = [k for k in need if k != "total"] if sparse else ["pools", "inputs", "layout", "view", "checking"]
    detail = ", ".join(f"{k} {need[k] / GiB:.1f}" for k in parts if k != "view" or need[k])
    return (f"too large for this machine: needs about {need['total'] / GiB:.1f} GiB ({detail} GiB), "
            f"over the {budget / GiB:.1f} GiB budget ({fraction:.0%} of {measured})")


def chunk_bytes(cases: list[Case], capabilities=None) -> int:
    """The estimated peak memory of cases run as one chunk: what each holds until the chunk's
    comparison, and the largest of what passes (draws, the oracle's blocks, the kernel's work).  A sparse
    case has its own inputs and estimate (``sparse_inputs.chunk_parts``)."""
    parts = [sparse_chunk_parts(c) if c.scenario == "sparse" else _estimate(c, view_width(c, capabilities))
             for c in cases]
    return sum(p["held"] for p in parts) + max((p["passing"] for p in parts), default=0)


# A worker's CUDA context, the kernel's workspace and its allocator's cache of small cases
WORKER_OVERHEAD = 2 * GiB


def shared_budget(device: str, available: int, workers: int) -> int:
    """What cases running at once in ``workers`` processes may hold together on ``device``."""
    if torch.device(device).type == "cuda":
        return max(int(available * CUDA_FRACTION) - workers * WORKER_OVERHEAD, 0)
    return int(available * CPU_FRACTION)
