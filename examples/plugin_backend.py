"""Example: your own paged MLA kernel as an mla-verify plug-in.

A plug-in is a Python file (or an importable module) holding a
``harness.backends.Backend``: an instance, a class, or a zero-argument factory.
Point ``--backend`` at it as ``path/to/file.py:NAME`` (or ``module:NAME``):

    mla-verify run --suite smoke --backend examples/plugin_backend.py:MyKernel
    mla-verify list --backend examples/plugin_backend.py:MyKernel

A backend has four parts:

``name``
    A short label for the results file and the summary.
``capabilities``
    What the kernel supports (modes, dtypes, devices, page sizes, heads, the most
    draft tokens, causal/non-causal, the base of its LSE and what its LSE holds for
    a row that sees no key).  A case outside it is recorded as ``unsupported``
    with the reason: never run, never counted as a pass.
``info()``
    Package, version and API form; recorded in every result row.
``run(inputs)``
    The kernel call.  ``inputs`` is a ``harness.building.inputs.Inputs``:

    - ``inputs.q`` ``(b, s_q, h_q, d_qk)``: bf16/fp16, or fp8 with ``inputs.descale_q``;
    - ``inputs.kv_pool`` ``(num_pages, page_size, h_kv, d_qk)``: the paged latent cache
      (V is its first ``d_v`` dims), with ``inputs.descale_k`` for fp8.  Every slot that
      is not one of a request's tokens holds NaN, so a kernel that reads outside its
      tokens fails loudly;
    - ``inputs.block_table`` ``(b, max_pages)`` int32: request r's pages, padded past its
      last page with -1, 1, 0, a huge id or other requests' pages (the case's padding policy);
    - ``inputs.cache_seqlens`` ``(b,)`` int32: tokens in the cache per request (for
      target-verify this includes the ``s_q`` draft tokens, already written);
    - ``inputs.softmax_scale``, ``inputs.d_v``, ``inputs.causal`` and ``inputs.mode``
      (``"decode"`` or ``"verify"``); ``inputs.model_dtype``, the model's dtype, which out
      must have unless ``capabilities.out_dtype`` declares another;
    - for a kernel that indexes by token slots as SGLang's Triton kernels do:
      ``inputs.seq_lens``, ``inputs.req_to_token`` and ``inputs.req_pool_indices``;
    - ``inputs.out``: a poisoned ``(b, s_q, h_q, d_v)`` buffer in the model dtype between
      guard regions, the engine's output buffer: write out there or return your own.
      Writing into any other input fails the case with the check ``inputs.unchanged``.

    It returns out ``(b, s_q, h_q, d_v)`` and LSE ``(b, h_q, s_q)`` on the
    inputs' device.  Query token i sits at position ``cache_seqlens - s_q + i`` and
    with ``causal`` sees keys ``0 .. cache_seqlens - s_q + i`` (the mask is aligned
    to the bottom right).  The harness checks the block table before calling
    ``run``, runs the kernel before the oracle, and compares out and LSE against the
    float64 reference with the tolerance of the case's dtype.

The kernel below is deliberately simple: it gathers each request's pages through
the block table, computes the attention in float32 and rounds the output to the
model's dtype, as a real kernel does.  Replace the body of ``run`` with a call to
your own kernel.
"""

import math

import torch

from harness.backends import Backend, Capabilities


class MyKernel(Backend):
    name = "my-kernel"
    capabilities = Capabilities(
        modes=("decode", "verify"),
        dtypes=("bf16", "fp16", "fp8_e4m3"),
        devices=("cpu", "cuda"),
        max_draft_tokens=8,
        non_causal=True,
        lse_base="e",              # natural log; a kernel returning log2 sets "2" and the harness converts
        empty_row_lse=math.inf,    # FlashMLA's convention for a row that sees no key
    )

    def info(self):
        return {"package": "examples/plugin_backend.py", "version": "1.0",
                "api": "gather pages, float32 softmax"}

    @staticmethod
    def _read(x, descale):
        """float32 view of an input; fp8 values are ``value * descale``."""
        if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return x.float() * float(descale.reshape(-1)[0])
        return x.float()

    def run(self, inputs):
        q = self._read(inputs.q, inputs.descale_q)                # (b, s_q, h_q, d_qk)
        b, s_q, h_q, _ = q.shape
        pool, d_v = inputs.kv_pool, inputs.d_v
        page_size, h_kv = pool.shape[1], pool.shape[2]
        head_of = torch.arange(h_q, device=q.device) // (h_q // h_kv)   # query head -> its kv head
        out = torch.zeros(b, s_q, h_q, d_v, device=q.device)
        lse = torch.full((b, h_q, s_q), math.inf, device=q.device)
        for r in range(b):
            n = int(inputs.cache_seqlens[r])
            n_pages = (n + page_size - 1) // page_size
            pages = inputs.block_table[r, :n_pages].long()          # only the pages this request owns
            kv = self._read(pool[pages].flatten(0, 1)[:n], inputs.descale_k)   # (n, h_kv, d_qk)
            k = kv[:, head_of]                                      # (n, h_q, d_qk)
            scores = torch.einsum("shd,nhd->hsn", q[r], k) * inputs.softmax_scale   # (h_q, s_q, n)
            t = torch.arange(n, device=q.device)
            if inputs.causal:
                last = n - s_q + torch.arange(s_q, device=q.device)     # last key each query token sees
                visible = t[None, :] <= last[:, None]                   # (s_q, n)
            else:
                visible = torch.ones(s_q, n, dtype=torch.bool, device=q.device)
            scores = torch.where(visible, scores, torch.full_like(scores, -math.inf))
            row_lse = torch.logsumexp(scores, dim=-1)                   # (h_q, s_q); -inf where empty
            empty = torch.isneginf(row_lse)
            p = torch.exp(scores - torch.where(empty, torch.zeros_like(row_lse), row_lse)[..., None])
            out[r] = torch.einsum("hsn,nhd->shd", p, k[..., :d_v])      # empty rows: all-zero weights
            lse[r] = torch.where(empty, torch.full_like(row_lse, math.inf), row_lse)
        out_dtype = inputs.model_dtype          # what the engine needs: bf16 or fp16 (bf16 for fp8 cases)
        return out.to(out_dtype), lse
