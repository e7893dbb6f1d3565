"""FlashMLA, called exactly as SGLang's FlashMLA backend calls it.

Two packages ship the kernel, with two API forms:

- ``sgl_kernel.flash_mla`` (SGLang's wheel, the seed's import): tensor metadata.
  ``get_mla_metadata(cache_seqlens, q_tokens_per_kv_head, h_kv, is_fp8_kvcache=)``
  returns ``(tile_scheduler_metadata, num_splits)``, both passed to every call.
- ``flash_mla`` (PyPI ``sgl-flash-mla``): a ``FlashMLASchedMeta`` object.  On SM90
  dense decoding lives on the legacy side (``use_legacy=True``); we fill the
  sched meta up front with ``get_mla_decoding_metadata`` so the metadata is
  computed from the seq lens before the call, as SGLang does, and so CUDA-graph
  replay can copy fresh metadata into fixed buffers.

The seed's conventions (SGLang's ``attention/flashmla_backend.py``): q ``(bs, s_q, h,
576)``, ``head_dim_v = 512``, ``causal=True``, ``cache_seqlens = seq_lens`` for
decode and ``seq_lens + num_draft_tokens`` for target-verify, metadata for
``num_draft_tokens * h_q`` query tokens per KV head.  fp8: KV in e4m3, q quantised
with K's scale, ``descale_q = descale_k = k_scale`` of shape (1,).
"""

import dataclasses
import importlib

import torch

from ..building.inputs import host_copy
from .base import Backend, Capabilities, Feature
from .flashmla_profiles import DEFAULT, GrownScratch, profile_named
from .optional import dist_version

PAGE_SIZE = 64
INSTALL = "pip install --no-deps sgl-flash-mla==1.0.0  (a CUDA box: scripts/install_kernels.sh)"


def fp8_kwargs(descale_q, descale_k) -> dict:
    """The seed's fp8 call: ``descale_q = descale_k = k_scale`` and the fp8 path selected."""
    if descale_q is None:
        return {}
    return {"descale_q": descale_q, "descale_k": descale_k, "is_fp8_kvcache": True}


class TensorMetadataAPI:
    """``sgl_kernel.flash_mla``: metadata and split counts are tensors the caller keeps."""

    form = "tensor-metadata"
    package, dist = "sgl_kernel.flash_mla", "sgl-kernel"

    def __init__(self, module):
        self.m = module

    def metadata(self, cache_seqlens, q_tokens_per_kv_head, h_kv, fp8):
        return list(self.m.get_mla_metadata(cache_seqlens, q_tokens_per_kv_head, h_kv, is_fp8_kvcache=fp8))

    def buffers(self, meta):
        return meta

    def from_buffers(self, tile, splits):
        return [tile, splits]

    def call(self, q, k_cache, block_table, cache_seqlens, d_v, meta, scale, causal, descale_q, descale_k):
        kwargs = fp8_kwargs(descale_q, descale_k)
        return self.m.flash_mla_with_kvcache(
            q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens, head_dim_v=d_v,
            tile_scheduler_metadata=meta[0], num_splits=meta[1], softmax_scale=scale, causal=causal, **kwargs)


class SchedMetaAPI:
    """``flash_mla`` (sgl-flash-mla): a FlashMLASchedMeta, legacy dense kernels on SM90."""

    form = "FlashMLASchedMeta+use_legacy"
    package, dist = "flash_mla", "sgl-flash-mla"

    def __init__(self, module):
        self.m = module

    def metadata(self, cache_seqlens, q_tokens_per_kv_head, h_kv, fp8):
        sched, _ = self.m.get_mla_metadata()
        tile, splits = self.m.get_mla_decoding_metadata(
            cache_seqlens, q_tokens_per_kv_head, h_kv, is_fp8_kvcache=fp8, use_legacy=True)
        sched.tile_scheduler_metadata, sched.num_splits = tile, splits
        return sched

    def buffers(self, meta):
        return [meta.tile_scheduler_metadata, meta.num_splits]

    def from_buffers(self, tile, splits):
        sched, _ = self.m.get_mla_metadata()
        sched.tile_scheduler_metadata, sched.num_splits = tile, splits
        return sched

    def call(self, q, k_cache, block_table, cache_seqlens, d_v, meta, scale, causal, descale_q, descale_k):
        kwargs = fp8_kwargs(descale_q, descale_k)
        return self.m.flash_mla_with_kvcache(
            q, k_cache, block_table, cache_seqlens, d_v, meta, None, softmax_scale=scale, causal=causal,
            use_legacy=True, **kwargs)


APIS = (TensorMetadataAPI, SchedMetaAPI)       # sgl_kernel.flash_mla first, the seed's import


def find_api():
    """The first FlashMLA package that imports, and why each one did not."""
    errors = []
    for api in APIS:
        try:
            return api(importlib.import_module(api.package)), errors
        except Exception as e:   # a wheel built for another torch fails with OSError/ImportError
            errors.append(f"{api.package}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return None, errors


class FlashMLABackend(Backend):
    name = "flashmla"
    capabilities = Capabilities(
        # fp16 and kv_heads > 1 run on the H200 (scripts/probe_flashmla.py, docs/archive/gpu-runs-history.md);
        # page size 32 is refused by the kernel ("page_block_size must be 64").
        modes=("decode", "verify"), dtypes=("bf16", "fp16", "fp8_e4m3"), devices=("cuda",),
        page_sizes=(PAGE_SIZE,), d_qk=(576,), d_v=(512,), max_draft_tokens=8,
        lse_base="e", empty_row_lse=float("inf"),
        index_format="page_table", fp8_q="quantized_k_scale", engine="sglang FlashMLABackend (flashmla_backend.py)",
        quoted_limits=(("layout", "`flash_mla_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, ...)` takes q "
                                  "as one tensor (flash_mla/flash_mla_interface.py)"),),
    )
    sparse_backend = "flashmla-sparse"     # its sparse decode path, flashmla_sparse.py
    features = frozenset({Feature.DENSE, Feature.GRAPH, Feature.PROFILES, Feature.SPLIT_CALL})
    packages = tuple((api.package, api.dist) for api in APIS)
    install = INSTALL

    def __init__(self, profile: str = DEFAULT):
        self.api, self.import_errors = find_api()
        self.use_profile(profile)

    def use_profile(self, name: str):
        """Call the kernel as engine profile ``name`` does (``flashmla_profiles``); its name joins the backend's."""
        self.profile = profile_named(name)
        self.name = FlashMLABackend.name + ("" if name == DEFAULT else f"@{name}")
        self.capabilities = dataclasses.replace(FlashMLABackend.capabilities, engine=self.profile.engine)
        self.scratch = GrownScratch() if self.profile.eager_table == "grown_scratch" else None

    # ---- availability -------------------------------------------------------------
    def available(self) -> bool:
        return self.api is not None and torch.cuda.is_available()

    def availability(self) -> str:
        if not torch.cuda.is_available():
            return "unavailable: no CUDA device"
        if self.api is None:
            return "unavailable: no FlashMLA package imports (" + "; ".join(self.import_errors) + ")"
        return f"available: {self.api.package} ({self.api.form})"

    def unsupported_reason(self, case, device):
        if not torch.cuda.is_available() or device != "cuda":
            return "FlashMLA needs a CUDA device" + ("" if torch.cuda.is_available() else " (none here)")
        if self.api is None:
            return "no FlashMLA package imports: " + "; ".join(self.import_errors)
        if case.dtype == "fp8_e5m2":
            return ("FlashMLA's fp8 path reads e4m3 only; SGLang's seed also counts e5m2 as fp8 and would "
                    "feed it e5m2 bytes (deepseek-ai/FlashMLA#56)")
        major, minor = torch.cuda.get_device_capability()
        if major < 9:
            return f"FlashMLA needs SM90 or newer, this GPU is SM{major}{minor}"
        return super().unsupported_reason(case, device)

    def info(self):
        if self.api is None:
            return {"package": None, "version": None, "api": None, "profile": self.profile.name}
        return {"package": self.api.package, "version": dist_version(self.api.dist), "api": self.api.form,
                "profile": self.profile.name}

    # ---- the call, as SGLang makes it -------------------------------------------------
    def metadata_for(self, inputs):
        """``get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)`` as init_forward_metadata does."""
        h_q, h_kv = inputs.q.shape[2], inputs.kv_pool.shape[2]
        return self.api.metadata(inputs.cache_seqlens, inputs.s_q * h_q // h_kv, h_kv, inputs.is_fp8)

    def call(self, inputs, meta, block_table=None, cache_seqlens=None):
        return self.api.call(
            inputs.q, inputs.kv_pool, inputs.block_table if block_table is None else block_table,
            inputs.cache_seqlens if cache_seqlens is None else cache_seqlens, inputs.d_v, meta,
            inputs.softmax_scale, inputs.causal, inputs.descale_q, inputs.descale_k)

    def run(self, inputs):
        if self.scratch is None:
            return self.call(inputs, self.metadata_for(inputs))
        longest = int(host_copy(inputs).cache_seqlens.max()) if inputs.batch_size else 0
        table = self.scratch.table(inputs.block_table, inputs.cache_seqlens, inputs.page_size, longest)
        return self.call(inputs, self.metadata_for(inputs), block_table=table)

    def graph_session(self, max_bs, max_context_len, inputs):
        from .flashmla_graph import FlashMLAGraphSession
        return FlashMLAGraphSession(self, max_bs, max_context_len, inputs)
