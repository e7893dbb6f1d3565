"""Input integrity: what a kernel was given is proven unchanged after the call.

A kernel's inputs are the engine's state: q, the KV cache, the tables, the lengths and scales.  A kernel
that writes into them (an in-place rope or quantisation, a stray store into another request's page)
corrupts every later step of every request in an engine, and an oracle that reads the inputs after the
call would agree with it.  So before each call a ``Witness`` fingerprints every storage the kernel
receives, whole (a pool's guard regions, its poisoned pages and everything past the view's end
included), and after the call fingerprints it again.  The oracle's answer is used only for a call whose
fingerprints match (``scenarios._common.verdicts``).

Guard regions: the KV pools and the output buffer the harness hands a kernel (``Inputs.out``) are views
inside a larger allocation (``guards.guarded``), with ``GUARD_BYTES`` of poison on each side, so a write
just before or past the end of either lands in memory the witness watches.

A fingerprint is a copy of a small storage, or, of a large one, one 64-bit weighted sum per
``HASH_ROW_BYTES`` block (3% of its size; a change of one word always changes its block's sum, since
each word's weight is odd), one pass over the storage on CUDA (``block_hash``).  Both are computed on
the device without waiting for it; the one read to the host is the "changed" flag, read once the
comparison has waited for the device anyway.
"""

from dataclasses import dataclass, fields

import torch

from ..building.guards import HASH_ROW_BYTES
from . import block_hash
from .block_hash import block_sums

COPY_MAX_BYTES = 1 << 20            # a storage up to this size is fingerprinted by a copy (exact index)
_WORDS = HASH_ROW_BYTES // 8
GUARDED = ("kv_pool", "kv_pool_model", "extra_kv_pool", "out")     # the Inputs fields allocated with ``guards.guarded``


def witness_bytes(pool_bytes: int, q_bytes: int) -> int:
    """What a ``Witness`` holds for a call, for the size estimate: two fingerprints (before and after),
    each 8 bytes per ``HASH_ROW_BYTES`` of the pools and a copy of q."""
    return 2 * (pool_bytes // HASH_ROW_BYTES * 8 + q_bytes)


def _bytes_of(storage: torch.UntypedStorage, device) -> torch.Tensor:
    """The whole storage as a 1-D uint8 tensor (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (storage.nbytes(),), (1,))


_WEIGHTS = {}


def _weights(device) -> torch.Tensor:
    """``_WORDS`` fixed odd 64-bit weights, one per word of a block (odd: a changed word changes the sum)."""
    key = str(device)
    if key not in _WEIGHTS:
        gen = torch.Generator().manual_seed(0x5EED)
        w = torch.randint(-(2 ** 62), 2 ** 62, (_WORDS,), generator=gen, dtype=torch.int64) * 2 + 1
        _WEIGHTS[key] = w.to(device)
    return _WEIGHTS[key]


def warm_up(device):
    """Ready the witness's device hash (``block_hash.warm_up``) before the first case: a worker's warm-up."""
    block_hash.warm_up(_weights(device))


@dataclass
class _Region:
    """Watched bytes: a whole storage of an input, or a guard of the output buffer."""

    name: str                       # the Inputs field it belongs to
    tensor: torch.Tensor            # that field's tensor (to name an element)
    data: torch.Tensor              # uint8 over the watched bytes
    start: int                      # the watched bytes' offset from the tensor's first byte

    def place(self, at: int, within: str = "") -> str:
        """Byte ``at`` of the watched bytes, as an index of the field's tensor or a place beside it."""
        offset = at + self.start                                       # bytes from the tensor's first byte
        t = self.tensor
        size = t.element_size()
        nbytes = (sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) + 1) * size if t.numel() else 0
        beside = "the guard region" if self.name in GUARDED else "the same storage"
        if offset < 0:
            return f"{self.name}: {-offset} byte(s) before its first element, in {beside}{within}"
        if offset >= nbytes:
            return f"{self.name}: {offset - nbytes} byte(s) past its last element, in {beside}{within}"
        index = _index_at(offset // size, t)
        if index is None:          # a strided view's slack: bytes between its elements
            return f"{self.name}: {offset} byte(s) in, between its elements (a view's slack){within}"
        return f"{self.name}: first changed at index {index}{within}"


def _index_at(flat: int, t: torch.Tensor) -> list | None:
    """The index of the element ``flat`` elements past ``t``'s first, by its strides; None where no element
    lies there (the slack of a strided view)."""
    idx = [0] * t.dim()
    for d in sorted(range(t.dim()), key=lambda d: -t.stride(d)):
        if t.stride(d) and t.shape[d] > 1:
            idx[d] = min(flat // t.stride(d), t.shape[d] - 1)
            flat -= idx[d] * t.stride(d)
    return None if flat else idx


def _storage_region(name: str, t: torch.Tensor) -> _Region:
    return _Region(name, t, _bytes_of(t.untyped_storage(), t.device), -t.storage_offset() * t.element_size())


def _guard_regions(name: str, out: torch.Tensor) -> list[_Region]:
    """The bytes of ``out``'s storage before and after the view: the view itself is the kernel's to write."""
    data = _bytes_of(out.untyped_storage(), out.device)
    first = out.storage_offset() * out.element_size()
    last = first + out.numel() * out.element_size()
    return [_Region(name, out, part, start) for part, start in ((data[:first], -first), (data[last:], last - first))
            if part.numel()]


class Witness:
    """Fingerprints of every storage one kernel call receives, taken before it (``__init__``) and after
    it (``seal``).  ``changed`` is a device bool, read with the comparison's transfer; ``describe``
    names the first change (only called when it is true).

    A fingerprint is one int64 vector: the small storages' bytes (tables, lengths, scales, the output's
    guards), copied together and read as words, then each large storage's block sums.  A small case's
    host time is its launches, so each fingerprint is a handful of them and a comparison is two."""

    def __init__(self, inputs):
        regions, seen = [], set()
        for f in fields(inputs):
            t = getattr(inputs, f.name)
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            if f.name == "out":
                regions += _guard_regions(f.name, t)
            elif (key := t.untyped_storage().data_ptr()) not in seen:
                seen.add(key)
                regions.append(_storage_region(f.name, t))
        self.small = [r for r in regions if r.data.numel() <= COPY_MAX_BYTES]
        self.large = [r for r in regions if r.data.numel() > COPY_MAX_BYTES]
        self.small_bytes = sum(r.data.numel() for r in self.small)
        self.small_words = -(-self.small_bytes // 8)
        self.device = regions[0].data.device if regions else torch.device("cpu")
        self.before = self._fingerprint()
        self.after = self.changed = None

    def _fingerprint(self) -> torch.Tensor:
        lengths = [_hash_length(r.data.numel()) for r in self.large]
        vector = torch.empty(self.small_words + sum(lengths), dtype=torch.int64, device=self.device)
        if self.small:
            as_bytes = vector[:self.small_words].view(torch.uint8)
            torch.cat([r.data for r in self.small], out=as_bytes[:self.small_bytes])
            as_bytes[self.small_bytes:].zero_()
        at = self.small_words
        for r, n in zip(self.large, lengths):
            _hash_into(r.data, vector[at:at + n])
            at += n
        return vector

    def seal(self) -> "Witness":
        self.after = self._fingerprint()
        self.changed = (self.before != self.after).any()
        return self

    def describe(self) -> str:
        """Every changed input, by name, with where it first changed (host work: a failing call only)."""
        before, after, found = self.before.cpu(), self.after.cpu(), []
        differs = before[:self.small_words].view(torch.uint8) != after[:self.small_words].view(torch.uint8)
        at = 0
        for r in self.small:
            n = r.data.numel()
            if bool(differs[at:at + n].any()):
                found.append(r.place(int(differs[at:at + n].nonzero()[0, 0])))
            at += n
        at = self.small_words
        for r in self.large:
            n = _hash_length(r.data.numel())
            if not torch.equal(before[at:at + n], after[at:at + n]):
                found.append(_first_hashed_change(r, before[at:at + n], after[at:at + n]))
            at += n
        return "; ".join(found)


def _hash_length(nbytes: int) -> int:
    """A large storage's fingerprint length: one sum per whole block, then one word per tail byte."""
    return nbytes // HASH_ROW_BYTES + nbytes % HASH_ROW_BYTES


def _hash_into(data: torch.Tensor, out: torch.Tensor):
    """A large storage's fingerprint into ``out``: per-block weighted sums, then its tail bytes as they are."""
    blocks = data.numel() // HASH_ROW_BYTES
    block_sums(data[:blocks * HASH_ROW_BYTES].view(torch.int64).view(-1, _WORDS), _weights(data.device),
               out[:blocks])
    if blocks < out.numel():
        out[blocks:].copy_(data[blocks * HASH_ROW_BYTES:])


def _first_hashed_change(r: _Region, before: torch.Tensor, after: torch.Tensor) -> str:
    first = int((before != after).nonzero()[0, 0])
    blocks = r.data.numel() // HASH_ROW_BYTES
    if first >= blocks:                                    # in the tail, kept byte for byte
        return r.place(blocks * HASH_ROW_BYTES + first - blocks)
    return r.place(first * HASH_ROW_BYTES, f" (in the {HASH_ROW_BYTES}-byte block that starts there)")


def changed_flags(witnesses: list[Witness]) -> list[bool]:
    """Whether each witness saw a change: one transfer for all of them."""
    if not witnesses:
        return []
    flags = [w.changed for w in witnesses]
    device = flags[0].device
    return torch.stack([f.to(device) for f in flags]).tolist()
