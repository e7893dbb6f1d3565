"""SGLang 0.5.23's Triton sparse MLA decode (``triton_sparse_mla_decode_splitk``, module
``sglang.kernels.ops.attention.dsa.triton_sparse_mla_decode``), a second opinion beside FlashMLA, called as
SGLang's DSA backend calls it for ``--dsa-decode-backend triton`` (``_forward_triton_decode`` in
``dsa_backend.py``; SGLang's default on ROCm, refused by its arguments on CUDA, "only supported on ROCm/HIP",
though the Triton kernel itself compiles there):

- ``q_nope`` ``(rows, heads, 512)`` and ``q_rope`` ``(rows, heads, 64)``: two views of one q, as SGLang
  hands over a concatenated q; every query token a row of its own (verify flattened, each draft with its
  own index row); the model's heads, unpadded (each program masks its block of 16 heads);
- ``kv`` ``(slots, 1, 576)``: one row per slot (the kernel reads row ``slot * 576``: page size 1), K its 576
  values and V its first ``d_v``; ``indices`` ``(rows, 1, topk)`` int32 slots, a negative entry invalid;
- ``sm_scale``, ``d_v`` and a ``workspace`` list for the split-K partials, as SGLang passes its own.

It takes bf16 KV, or raw e4m3 with no scale argument; FlashMLA's records carry per-tile scales, so the KV is
the whole pool dequantized as FlashMLA's SM90 decode kernel does (``sparse_prefill.bf16_kv``), the oracle's
``bf16_product`` view.  It returns out alone, no LSE: ``run_sparse`` returns None for it, declared
(``has_lse=False``), so out alone is checked and the row's conventions say so.  A row with no valid entry
gets zeros, and so does a row whose softmax sum is NaN (a NaN record read): the output is gated on
``l_i > 0``; under split-K only the split holding the NaN is dropped, leaving the other splits' softmax.  It
takes no ``attn_sink``.
The split count is SGLang's heuristic over the device's core count; ``device_cores`` overrides it (with 1, a
launch of two or more row/head blocks runs the fused one-split kernel SGLang runs for large batches).

Not on CPU: Triton 3.7.1's interpreter multiplies bf16 ``tl.dot`` operands as their uint16 bit patterns
(``InterpreterBuilder.create_dot`` converts 8-bit floats only), and every dot here is bf16; its float32 to
bf16 casts also truncate where CUDA rounds to nearest.
"""

from contextlib import contextmanager

import torch

from .base import TRITON_SPARSE_VARIANT, Backend, Capabilities, Feature, SparseSupport
from .sglang_triton import INSTALL, TritonKernels
from .sparse_prefill import bf16_kv

MODULE = "sglang.kernels.ops.attention.dsa.triton_sparse_mla_decode"
CALL = "triton_sparse_mla_decode_splitk(q_nope, q_rope, kv, indices, sm_scale, d_v, workspace=...)"
NO_V4 = ("kv_format v4: the kernel's key is a row's first d_v values then a rope tail read at d_v, its value "
         "the first d_v (triton_sparse_mla.py: kv_tail at D_V + dt); V4's 512 values are key and value whole")
NO_SINK = ('takes no attn_sink: SGLang refuses one for it ("Learnable attention sinks require flashmla_sparse", '
           "dsa_backend.py forward_decode)")
NO_CPU = ("not on CPU: Triton's interpreter (3.7.1) multiplies bf16 tl.dot operands as their uint16 bit patterns "
          "(InterpreterBuilder.create_dot converts 8-bit floats only), and every dot of this kernel is bf16")


class SGLangSparseTritonBackend(TritonKernels, Backend):
    name = "sglang-sparse-triton"
    # the dense interface's capabilities: this backend runs the sparse scenario only (unsupported_reason)
    capabilities = Capabilities(
        dtypes=("bf16",), devices=("cuda",), d_qk=(576,), d_v=(512,), has_lse=False,
        index_format="token_slots", engine="sglang dsa_backend triton decode", sparse=SparseSupport(
            kv_formats=("v32",), kv_dequant="bf16_product", devices=("cuda",),
            # any heads (masked blocks of 16) and any topk (masked tiles): no padding, no multiple.  No LSE:
            # lse_base and empty_row_lse keep their defaults and describe nothing the kernel returns
            sink=False, has_lse=False, index_format="token_slots",
            engine="sglang 0.5.23 dsa_backend triton decode (triton_sparse_mla_decode_splitk) over the records "
                   "dequantized as FlashMLA's SM90 decode kernel does",
            extra_pairs=(), length_formats=()))
    features = frozenset({Feature.SPARSE})      # no run(): unsupported_reason refuses every dense case
    compiled_per = TRITON_SPARSE_VARIANT
    modules = ("triton", MODULE)
    packages = ((MODULE, "sglang"),)
    install = INSTALL

    device_cores = None    # None: as SGLang sees the device; a number: the core count its split policy sees

    def device_reason(self) -> str | None:
        return None if torch.cuda.is_available() else "no CUDA device (" + NO_CPU + ")"

    def unsupported_reason(self, case, device):
        if case.scenario != "sparse":
            return f"{self.name} is SGLang's Triton sparse MLA decode: it runs the sparse scenario only"
        if device == "cpu":
            return NO_CPU
        if case.kv_format == "v4":
            return NO_V4
        if case.sink != "none":
            return NO_SINK
        reason = self.capabilities.sparse.reason_unsupported(case, device)
        if reason:
            return reason
        if self.import_error():
            return f"SGLang's Triton sparse MLA decode does not import here: {self.import_error()}"
        return None if torch.cuda.is_available() else "no CUDA device here"

    def info(self):
        return {**self.package_info(CALL), "lse": "none returned", "index_format": "token slots, page size 1"}

    def run_sparse(self, inputs):
        n, s_q, heads, d = inputs.q.shape
        q = inputs.q.reshape(n * s_q, heads, d)
        module = self._load()[MODULE]
        with _core_count(module, self.device_cores):
            out = module.triton_sparse_mla_decode_splitk(
                q_nope=q[..., :inputs.d_v], q_rope=q[..., inputs.d_v:], kv=bf16_kv(inputs),
                indices=inputs.indices.reshape(n * s_q, 1, -1), sm_scale=inputs.softmax_scale, d_v=inputs.d_v,
                workspace=[])
        return out.reshape(n, s_q, heads, inputs.d_v), None       # out (1, rows, heads, d_v) bf16; no LSE


@contextmanager
def _core_count(module, cores: int | None):
    """The launcher's ``_cu_count`` answering ``cores`` for the call (None: SGLang's own answer)."""
    if cores is None:
        yield
        return
    held = module._cu_count
    module._cu_count = lambda device=None: cores
    try:
        yield
    finally:
        module._cu_count = held
