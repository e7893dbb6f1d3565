"""What is timed for a backend, through the ``Backend`` interface and the features it declares (``Feature``).

Kernel time wants the kernel alone, metadata already computed (as FlashMLA's own
benchmark does).  ``kernel_launch`` finds the narrowest call a backend offers:

1. ``backend.bench_launch(inputs)`` -> a zero-argument callable that launches with
   metadata / ``plan()`` done up front (any backend may add it: ``Feature.BENCH_LAUNCH``);
2. FlashMLA's ``metadata_for(inputs)`` + ``call(inputs, meta)`` (``Feature.SPLIT_CALL``);
3. else the whole ``backend.run(inputs)``, and the row says so.

End-to-end time is one step as an engine pays it: metadata or ``plan()`` plus the
launch.  ``e2e_step`` picks how:

1. a backend with ``graph_session`` (FlashMLA, ``Feature.GRAPH``): SGLang's path, captured once at the
   case's batch; a step copies fresh metadata into the captured buffers and replays;
2. a backend declaring ``cuda_graph = True`` (on itself or its capabilities, ``Feature.CAPTURED_RUN``):
   ``backend.run(inputs)`` captured whole in a ``torch.cuda.CUDAGraph``; a step replays it;
3. else eager: a step is ``backend.run(inputs)``.

A graph's output is compared with the verified eager output before it is timed.
"""

import torch

from ..backends.base import Feature
from ..backends.graph_capture import captured
from ..building.pool import pages_for
from ..judging.compare import check_tensor


def kernel_launch(backend, inputs):
    """``(callable, scope)``: what kernel time measures, and a phrase saying what it covers."""
    if backend.supports(Feature.BENCH_LAUNCH):
        return backend.bench_launch(inputs), "launch only (backend.bench_launch: metadata/plan outside)"
    if backend.supports(Feature.SPLIT_CALL):
        meta = backend.metadata_for(inputs)
        return (lambda: backend.call(inputs, meta)), "launch only (metadata computed outside)"
    return (lambda: backend.run(inputs)), "whole run() (metadata/plan included)"


def declares_graph(backend) -> bool:
    return backend.supports(Feature.CAPTURED_RUN)


def _graph_session_step(backend, inputs):
    """SGLang's FlashMLA graph path: capture at batch b, then per step fresh metadata + replay."""
    b = inputs.batch_size
    session = backend.graph_session(b, int(inputs.cache_seqlens.max()), inputs)
    pages = [inputs.block_table[r, :max(1, pages_for(int(n), inputs.page_size))]
             for r, n in enumerate(inputs.cache_seqlens.tolist())]
    session.capture(b, pages)
    q = inputs.q_model if inputs.is_fp8 else inputs.q     # the session quantises q inside the graph
    out, _ = session.replay(q, inputs.seq_lens, pages)

    def step():
        session.refresh_metadata(b)
        session.graph.replay()
    return step, out, "cuda-graph: SGLang graph_session (fresh metadata copied in, replay)"


def _captured_run_step(backend, inputs):
    graph, (out, _) = captured(lambda: backend.run(inputs))
    graph.replay()
    return graph.replay, out, "cuda-graph: run() captured whole (metadata inside the graph)"


def e2e_step(backend, inputs, eager_out, out_bound):
    """``(step, mode, note)``: the end-to-end step, how it is done, and why a graph was not used.

    ``out_bound`` is the case dtype's bound on out: a graph's output must agree with the eager one.
    """
    if inputs.device.type == "cuda":
        maker = (_graph_session_step if backend.supports(Feature.GRAPH)
                 else _captured_run_step if declares_graph(backend) else None)
        if maker is not None:
            try:
                step, graph_out, mode = maker(backend, inputs)
                torch.cuda.synchronize()
            except Exception as e:   # a graph that cannot be captured: time eagerly, and say why
                return _eager(backend, inputs), "eager", f"graph capture failed: {type(e).__name__}: {e}"[:300]
            check = check_tensor("out", graph_out, eager_out.double(), out_bound)
            if not check.passed:
                return None, mode, "graph replay output differs from the verified eager output: not timed"
            return step, mode, None
    return _eager(backend, inputs), "eager", None


def _eager(backend, inputs):
    return lambda: backend.run(inputs)
