"""Engine profiles for the FlashMLA backend: how one engine version calls the same kernel, as data.

A profile changes what the engine hands the kernel, never the kernel or the oracle.  Picked through the
backend spec, ``--backend flashmla@sglang-0.5.23``; the backend's name then carries the profile (a row
names it, and a file may hold both profiles' rows side by side), and so does ``Capabilities.engine``.

- ``seed`` (SGLang's ``flashmla_backend.py`` as seeded): a fresh ``-1``-padded block table per eager call; graph
  metadata buffers shaped as the metadata of ``torch.ones(max_bs)``, fresh metadata copied over them whole.
- ``sglang-0.5.23`` (``sglang/srt/layers/attention/flashmla_backend.py``):
  * ``_eager_block_kv_indices``: one eager block-table scratch per backend, ``torch.full(..., -1)`` and grown
    to the running ``(max bs, max pages)``; each call rewrites every row only up to its K length and passes
    the view ``[:bs, :cdiv(max K len, 64)]``, so a row's tail keeps what earlier calls wrote there: other
    requests' (and, here, other cases') pages ("stale tail content is unread", its docstring says);
  * ``init_cuda_graph_state``: ``cuda_graph_mla_metadata = torch.empty((num_sms, 8))`` and
    ``cuda_graph_num_splits = torch.empty(max_bs + 1)``; capture and replay copy fresh metadata into
    ``[:num_sm_parts]`` and ``[:bs + 1]`` and bind those views; without a CPU copy of the seq lens the
    captured table view is the buffer's full width;
  * target verify: K lens ``seq_lens + num_draft_tokens``, metadata for ``num_draft_tokens * h_q`` query
    tokens (as the seed).  Draft-extend v2 is the same call with window-aligned K lens
    (``seq_lens - extend_seq_lens + num_draft_tokens``, ``draft_extend_k_lens``).
"""

from dataclasses import dataclass

import torch

from ..building.pool import pages_for
from ..errors import InputError

EAGER_TABLES = ("fresh", "grown_scratch")
GRAPH_METADATA = ("copy_whole", "num_sms_views")


@dataclass(frozen=True)
class EngineProfile:
    name: str
    engine: str                 # recorded in the row's conventions
    eager_table: str            # EAGER_TABLES
    graph_metadata: str         # GRAPH_METADATA
    graph_table_full_width: bool   # the captured table view spans the whole buffer (no CPU seq lens)


PROFILES = {
    "seed": EngineProfile("seed", "sglang FlashMLABackend (flashmla_backend.py)", "fresh", "copy_whole", False),
    "sglang-0.5.23": EngineProfile("sglang-0.5.23", "sglang 0.5.23 FlashMLABackend (flashmla_backend.py)",
                                   "grown_scratch", "num_sms_views", True),
}
DEFAULT = "seed"


def profile_named(name: str) -> EngineProfile:
    if name not in PROFILES:
        raise InputError(f"unknown FlashMLA engine profile '{name}' (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def draft_extend_k_lens(seq_lens: torch.Tensor, extend_seq_lens: torch.Tensor, window: int) -> torch.Tensor:
    """Draft-extend v2's K lens: every q window ``window`` wide, K lens aligned to the window's end."""
    return (seq_lens - extend_seq_lens + window).to(torch.int32)


class GrownScratch:
    """SGLang 0.5.23's ``_eager_block_kv_indices`` and the fill after it: one buffer for every eager call."""

    def __init__(self):
        self.buf = None

    def table(self, block_table: torch.Tensor, cache_seqlens: torch.Tensor, page_size: int,
              max_len: int) -> torch.Tensor:
        """The view handed to the kernel: ``[:bs, :pages of the longest row]`` (``max_len``, read on the host
        as SGLang reads ``seq_lens_cpu``), each row's needed entries from ``block_table`` (what
        ``create_flashmla_kv_indices_triton`` writes), the rest as earlier calls left them."""
        bs = block_table.shape[0]
        need = pages_for(cache_seqlens.long(), page_size)
        width = max(1, pages_for(max_len, page_size))
        buf = self.buf
        if buf is None or buf.device != block_table.device or buf.shape[0] < bs or buf.shape[1] < width:
            rows = bs if buf is None else max(bs, buf.shape[0])
            cols = width if buf is None else max(width, buf.shape[1])
            buf = self.buf = torch.full((rows, cols), -1, dtype=torch.int32, device=block_table.device)
        view = buf[:bs, :width]
        cols = min(width, block_table.shape[1])
        needed = torch.arange(cols, device=view.device)[None, :] < need.to(view.device)[:, None]
        view[:, :cols] = torch.where(needed, block_table[:, :cols].to(torch.int32), view[:, :cols])
        return view
