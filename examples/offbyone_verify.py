"""Example of a broken kernel: target-verify's causal mask is off by one.

Draft token i should see keys ``0 .. L + i`` (``L`` = cache_seqlens - s_q, the
prefix), that is up to and including its own position.  This kernel lets it see
one key more, the *next* draft token, the classic bug of aligning the mask with
``cache_seqlens - (s_q - 1) + i`` as an inclusive limit.  Decode (s_q = 1) and the
last draft token are unaffected (the extra key lies past the sequence), so only
target-verify cases with two or more draft tokens fail:

    mla-verify run --suite smoke --backend examples/offbyone_verify.py:OffByOneVerify

exits 1, and each failure line names the case id and the worst element's index
(a draft token before the last).  It is the torch backend's split-KV kernel with
one line changed.
"""

from harness.backends.torch_backend import TorchBackend


class OffByOneVerify(TorchBackend):
    name = "offbyone-verify"

    def info(self):
        return {"package": "examples/offbyone_verify.py", "version": None,
                "api": "torch split-KV with an off-by-one verify mask"}

    def visible(self, pos, seq, s_q, causal):
        if not causal:
            return super().visible(pos, seq, s_q, causal)
        import torch
        i = torch.arange(s_q, device=pos.device)
        last = seq[:, None] - s_q + i[None, :] + 1          # BUG (on purpose): should be no "+ 1"
        return pos[None, None, :] <= last[:, :, None]
