"""Host-built integer tensors onto the device without waiting for the device.

A plain ``cpu_tensor.to("cuda")`` copies from pageable memory and waits for the stream to drain:
each of a small case's dozen index tensors would stall the host until the GPU had finished
everything queued before it.  Here the tensors are packed into one pinned buffer, sent with one
asynchronous copy, and copied on the device into tensors of their own: a kernel gets a table or
a length vector as the engine hands it over, a whole allocation with no storage offset, never a
view into a shared buffer.
"""

import itertools

import torch


def to_device(tensors: list[torch.Tensor], device) -> list[torch.Tensor]:
    """The same tensors on ``device``, copied without a wait; on the CPU, the tensors themselves.

    Every tensor must be int32 (indices, lengths, tables): one pinned buffer carries them all.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return list(tensors)
    if any(t.dtype != torch.int32 for t in tensors):
        raise TypeError(f"to_device packs int32 tensors, got {sorted({str(t.dtype) for t in tensors})}")
    sizes = [t.numel() for t in tensors]
    starts = list(itertools.accumulate(sizes[:-1], initial=0))
    total = sum(sizes)
    packed = torch.empty(max(total, 1), dtype=torch.int32, pin_memory=True)
    if tensors:
        torch.cat([t.reshape(-1) for t in tensors], out=packed[:total])
    staged = packed.to(device, non_blocking=True)      # the pinned buffer is kept until the copy is done
    return [staged[start:start + n].view(t.shape).clone() for t, start, n in zip(tensors, starts, sizes)]


def to_device_named(tensors: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    """``to_device`` for a pack whose tensors have names: the same names, their tensors on ``device``."""
    return dict(zip(tensors, to_device(list(tensors.values()), device)))
