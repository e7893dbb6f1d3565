"""What a kernel actually computes with: the inputs as *this* kernel is given them.

``inputs.generate`` builds one set of inputs in SGLang's FlashMLA convention (for
fp8: q quantised with K's scale, ``descale_q = descale_k = k_scale``).  Other
kernels are handed other things for the same case, declared as data in their
``Capabilities.fp8_q``.  ``kernel_view`` returns an ``Inputs`` whose q, pool and
descales hold exactly the values the kernel multiplies, so the oracle run on it
measures the kernel's own arithmetic error and nothing else.  The end-to-end
error (against the model-precision ``q_model`` / ``kv_pool_model``) is
unchanged by the view.

Non-fp8 cases are the same for every kernel: the view is the inputs themselves.

fp8 conventions:

- ``quantized_k_scale`` (SGLang's FlashMLA path): the inputs as generated.
- ``model_dtype`` (FlashInfer): q is the bf16 ``q_model``, not quantised; the
  fp8 KV is dequantised with the per-tensor scale (``ckv_scale = kpe_scale =
  k_scale``).  View: ``q = q_model``, ``descale_q = None``.
- ``cast_in_kernel`` (SGLang's Triton kernels): the kernel is given the bf16
  ``q_model`` and casts it to the KV's fp8 dtype itself, *without* a scale
  (``q.to(K_Buffer.dtype.element_ty)``), and folds ``k_scale`` into the softmax
  scale.  What is cast differs by path:
  * decode (``decode_attention_fwd``): only the 512 no-PE dims are cast; the
    64 rope dims stay in q's dtype and the fp8 ``kpe`` is upcast to it
    (``tl.dot(qpe, kpe.to(qpe.dtype))``).  View: ``q = [fp8(q_nope), q_pe]``
    as float32 (both exact there), KV as given with ``descale_k = k_scale``.
  * verify (``extend_attention_fwd``, ``verify_shared_kv_fwd``): the prefix
    is read from the fp8 pool with all 576 dims of q cast to fp8 and logits
    scaled by ``sm_scale * k_scale``; the draft tokens come in separately as
    ``k_extend`` in q's dtype (SGLang hands the kernel the model-precision
    ``k`` it has just written to the cache) and meet the *unquantised* q with
    ``sm_scale`` alone.  One query meets two different q values, so the view
    works in a widened logit space where one dot product gives both:
    ``q' = [0 (d_v) | fp8(q) | q]`` and each slot's key
    ``[value (d_v) | k8 * k_scale | 0]`` for a prefix token,
    ``[value (d_v) | 0 | k_model]`` for a draft token, where value is the
    token's first ``d_v`` dims as the kernel reads them.  Then
    ``q'.k' = fp8(q).k8 * k_scale`` or ``q.k_model`` exactly (float64), and the
    oracle's V = first ``d_v`` dims is the value the kernel accumulates.

Fixed parameters: a kernel with no argument for a parameter computes at its own
value, declared as data in ``Capabilities`` (``fixed_softmax_scale``: a number,
or a rule of the case's shape named in ``fixed_params.SCALE_RULES``).  The kernel is handed
the inputs as the engine builds them (the case's value, which it cannot take);
the view holds its value, so the oracle computes at it, and the row records the
case as it ran (``as_run``) with the change (``fixed_by_kernel``).
"""

import dataclasses

import torch

from reference import descale_scalar, quantize_fp8

from ..building.inputs import Inputs, model_dtype_of, used_pages
from ..building.pool import pages_for, token_index
from ..planning.fixed_params import fixed_scale

FP8_Q_CONVENTIONS = ("quantized_k_scale", "model_dtype", "cast_in_kernel")


def at_fixed_parameters(inputs: Inputs, capabilities) -> Inputs:
    """The inputs with each parameter the kernel fixes at its value (the kernel is never given it)."""
    kernel = fixed_scale(getattr(capabilities, "fixed_softmax_scale", None), inputs.q.shape[-1])
    return inputs if kernel is None else dataclasses.replace(inputs, softmax_scale=kernel)


def kernel_view(inputs: Inputs, capabilities) -> Inputs:
    """The inputs as the kernel with these capabilities computes with them (see module doc)."""
    inputs = at_fixed_parameters(inputs, capabilities)
    convention = capabilities.fp8_q
    if convention not in FP8_Q_CONVENTIONS:
        raise ValueError(f"unknown fp8_q convention '{convention}' (known: {', '.join(FP8_Q_CONVENTIONS)})")
    if not inputs.is_fp8 or inputs.q_model is None or convention == "quantized_k_scale":
        return inputs
    if convention == "model_dtype":
        return dataclasses.replace(inputs, q=inputs.q_model, descale_q=None)
    if inputs.mode == "decode":
        return _cast_nope_view(inputs)
    return _extend_view(inputs)


def cast_as_triton(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` cast to an fp8 ``dtype`` as a Triton kernel's ``.to()`` does on the GPU: saturating at the
    dtype's largest finite value (PTX ``cvt.rn.satfinite``), NaN kept: the engine's quantisation at scale 1
    (``reference.quantize_fp8``), so no torch version's overflow rule decides it.  With the H200's torch 2.11
    two fuzz rows of ``large`` q past e4m3's 448 had a NaN reference where SGLang's Triton decode answered
    finite (the CPU's torch 2.13 saturates)."""
    return quantize_fp8(values, 1.0, dtype)


def _cast_nope_view(inputs: Inputs) -> Inputs:
    d_v = inputs.d_v
    q = inputs.q_model
    q_nope = cast_as_triton(q[..., :d_v], inputs.kv_pool.dtype).float()     # unscaled cast, as the kernel does
    view_q = torch.cat([q_nope, q[..., d_v:].float()], dim=-1)
    return dataclasses.replace(inputs, q=view_q, descale_q=None)


def draft_slot_mask(inputs: Inputs) -> torch.Tensor:
    """``(num_pages * page_size,)`` bool: the pool slots that hold a verify's draft tokens."""
    slots = inputs.kv_pool.shape[0] * inputs.kv_pool.shape[1]
    mask = torch.zeros(slots, dtype=torch.bool, device=inputs.req_to_token.device)
    prefix = inputs.seq_lens.long().to(mask.device)
    drafts = inputs.cache_seqlens.long().to(mask.device) - prefix
    request, i = token_index(drafts, mask.device)
    rows = inputs.req_pool_indices.long().to(mask.device)[request]
    mask[inputs.req_to_token[rows, prefix[request] + i].long()] = True
    return mask.to(inputs.device)


def pages_in_use(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The pages the block table's needed entries name (sorted, unique), and the table renumbered
    onto them (padding entries -1).  The oracle reads nothing else, so a view built on these
    pages alone is exact, and never as large as a serving-scale pool."""
    table = inputs.block_table.long()
    needed = torch.arange(table.shape[1], device=table.device)[None, :] < \
        pages_for(inputs.cache_seqlens.long(), inputs.page_size)[:, None]
    used = torch.unique(table[needed])
    renumbered = torch.where(needed, torch.searchsorted(used, table.clamp(min=0)), torch.full_like(table, -1))
    return used, renumbered.to(torch.int32)


def view_width(case, capabilities) -> int:
    """The dims of the widened keys the oracle reads for this case and kernel (the verify view of
    ``cast_in_kernel``: ``[value (d_v) | k8 * k_scale (d_qk) | k_model (d_qk)]``), or 0: none."""
    widens = (case.mode == "verify" and case.dtype.startswith("fp8")
              and getattr(capabilities, "fp8_q", None) == "cast_in_kernel")
    return case.d_v + 2 * case.d_qk if widens else 0


def key_width(case, width: int) -> int:
    """Elements the oracle reads per cached token: the kv heads times the view's width (``view_width``),
    or times ``d_qk`` where the view is not widened."""
    return case.kv_heads * (width or case.d_qk)


def view_footprint(case, width: int) -> int:
    """The bytes a widened view of ``width`` dims (``view_width``) allocates for ``case``: the pages in
    use as float64 keys, and their model-precision copy (``_extend_view``); 0 where it is not widened."""
    if not width:
        return 0
    slots = used_pages(case) * case.page_size
    return slots * (case.kv_heads * width * 8 + case.kv_heads * case.d_qk * model_dtype_of(case).itemsize)


def _extend_view(inputs: Inputs) -> Inputs:
    d_v, d = inputs.d_v, inputs.q.shape[-1]
    k_scale = descale_scalar(inputs.descale_k)
    q = inputs.q_model
    view_q = torch.cat([torch.zeros_like(q[..., :d_v], dtype=torch.float64),
                        cast_as_triton(q, inputs.kv_pool.dtype).double(), q.double()], dim=-1)
    used, table = pages_in_use(inputs)
    page_size = inputs.page_size
    slots = (used[:, None] * page_size + torch.arange(page_size, device=used.device)).reshape(-1)
    is_draft = draft_slot_mask(inputs)[slots][:, None, None]
    flat = lambda t: t[used].reshape(len(used) * page_size, *t.shape[2:])   # noqa: E731
    # Filled in place, one float64 tensor: a serving-scale verify widens millions of tokens, and building
    # the prefix and draft keys whole and choosing between them took 3.6x this (54 KB a token).
    pool = torch.empty(len(slots), inputs.kv_pool.shape[2], d_v + 2 * d, dtype=torch.float64,
                       device=inputs.kv_pool.device)
    scaled, model = pool[..., d_v:d_v + d], pool[..., d_v + d:]
    scaled.copy_(flat(inputs.kv_pool)).mul_(k_scale)            # k8 * k_scale, exact; NaN poison stays NaN
    model.copy_(flat(inputs.kv_pool_model))
    pool[..., :d_v] = torch.where(is_draft, model[..., :d_v], scaled[..., :d_v])   # the value as read
    scaled.masked_fill_(is_draft, 0.0)
    model.masked_fill_(~is_draft, 0.0)
    pool = pool.reshape(len(used), page_size, *pool.shape[1:])
    return dataclasses.replace(inputs, q=view_q, kv_pool=pool, block_table=table, descale_q=None, descale_k=None,
                               kv_pool_model=inputs.kv_pool_model[used])     # the same pages, renumbered
