"""SGLang's ``verify_mla.verify_shared_kv_fwd`` as its own backend (target verify only).

SGLang routes target-verify here only on one AMD GPU and one model
(``_should_use_verify_shared_kv``); it takes exactly ``extend_attention_fwd``'s
arguments (see sglang_triton.py for how they are built), writes no LSE, and
returns False when it declines a shape, in which case SGLang falls back to
``extend_attention_fwd``.  Here a decline is reported as unsupported, quoting it.
"""

import math

from .base import TRITON_DENSE_VARIANT, Backend, Capabilities, Feature, Unsupported
from .sglang_triton import INSTALL, TritonKernels, extend_call_args


class SGLangVerifyMLABackend(TritonKernels, Backend):
    """``verify_mla.verify_shared_kv_fwd``: SGLang's grouped-head split-KV target-verify kernel."""

    name = "sglang-verify-mla"
    modules = ("triton", "sglang.kernels.ops.attention.verify_mla")
    capabilities = Capabilities(
        modes=("verify",), dtypes=("bf16", "fp16", "fp8_e4m3", "fp8_e5m2"), devices=("cuda", "cpu"),
        kv_heads=(1,), d_qk=(576,), d_v=(512,), max_draft_tokens=8,
        non_causal=True,   # is_causal is passed through; can_handle() accepts it without a custom mask
        lse_base="e", empty_row_lse=-math.inf, has_lse=False,
        index_format="token_slots", fp8_q="cast_in_kernel", engine="sglang:triton-verify-mla",
        quoted_limits=(("layout", "`verify_shared_kv_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, ...)` "
                                  "takes q as one tensor"),),
    )

    features = frozenset({Feature.DENSE})
    compiled_per = TRITON_DENSE_VARIANT
    packages = (("sglang.kernels.ops.attention.verify_mla", "sglang"),)
    install = INSTALL

    # the graph scenario quotes this: SGLang routes this kernel only on one AMD GPU (see above)
    no_graph_session = ("no graph_session: mla-verify does not reproduce a CUDA-graph capture of "
                        "verify_shared_kv_fwd (SGLang routes it only on one AMD GPU and one model)")

    def unsupported_reason(self, case, device):
        return self.reason_for(case, device) or super().unsupported_reason(case, device)

    def info(self):
        return {**self.package_info("verify_mla.verify_shared_kv_fwd (target verify, topk = 1)"), "lse": None}

    def run(self, inputs):
        fwd = self._load()["sglang.kernels.ops.attention.verify_mla"].verify_shared_kv_fwd
        args, o = extend_call_args(inputs)
        b, s_q, h, _ = inputs.q.shape
        ran = fwd(*args, sm_scale=inputs.softmax_scale, max_bs=b)
        if not ran:
            empty = " (kv_indices.numel() == 0: no request has a prefix)" if args[8].numel() == 0 else ""
            raise Unsupported(f"verify_shared_kv_fwd returned False: it declines this shape{empty}")
        return o.reshape(b, s_q, h, -1), None
