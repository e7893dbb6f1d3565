"""Where every request's tokens live (``PageLayout``) and the host arrays the pool's
integer work runs on (``pool``, ``block_tables``, ``pool_gates``): per-request integers as int64 numpy
arrays, a device tensor read back in one copy."""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class PageLayout:
    """Where every request's tokens live.  Tensors are int32, on the device the case runs on."""

    page_size: int
    num_pages: int
    req_to_token: torch.Tensor       # (max_reqs, max_context) KV slot per token
    req_pool_indices: torch.Tensor   # (b,) row of req_to_token for request r
    block_table: torch.Tensor        # (b, max_pages) page ids, padded past the last page
    cache_seqlens: torch.Tensor      # (b,) tokens in the cache per request
    used_pages: torch.Tensor         # (num_used,) pages holding some request's tokens

    def to(self, device) -> "PageLayout":
        """The same layout with its tensors on ``device``."""
        moved = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, torch.Tensor)}
        return PageLayout(**{**vars(self), **moved})



def on_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a numpy array: a view of a CPU tensor, one copy of a device one."""
    return tensor.cpu().numpy()


def host_ints(values) -> np.ndarray:
    """Per-request integers (seq lens, rows, shared pages) as int64, so no arithmetic on them wraps."""
    if isinstance(values, torch.Tensor):
        values = on_host(values)
    return np.asarray(values, dtype=np.int64)


def first_true(mask: np.ndarray):
    """Index of ``mask``'s first True in row-major order (a tuple for 2-D masks)."""
    i = int(np.argmax(mask))
    return i if mask.ndim == 1 else tuple(int(x) for x in np.unravel_index(i, mask.shape))

