"""Host-built integer tensors onto the device in one copy that does not wait for the device.

A plain ``cpu_tensor.to("cuda")`` copies from pageable memory and waits for the stream to drain:
each of a small case's dozen index tensors would stall the host until the GPU had finished
everything queued before it.  Here the tensors are packed into one pinned buffer and sent with a
single asynchronous copy; the device tensors are views of its segments.  Each segment starts
``ALIGN`` elements (256 bytes) in, as a tensor of its own would be aligned by the allocator.
"""

import torch

ALIGN = 64


def to_device(tensors: list[torch.Tensor], device) -> list[torch.Tensor]:
    """The same tensors on ``device`` (one int32 copy); on the CPU, the tensors themselves.

    Every tensor must be int32 (indices, lengths, tables): one buffer carries them all.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return list(tensors)
    if any(t.dtype != torch.int32 for t in tensors):
        raise TypeError(f"to_device packs int32 tensors, got {sorted({str(t.dtype) for t in tensors})}")
    sizes = [t.numel() for t in tensors]
    starts, total = [], 0
    for n in sizes:
        starts.append(total)
        total += -(-n // ALIGN) * ALIGN
    packed = torch.empty(max(total, 1), dtype=torch.int32, pin_memory=True)
    for t, start, n in zip(tensors, starts, sizes):
        packed[start:start + n].copy_(t.reshape(-1))
    sent = packed.to(device, non_blocking=True)     # the pinned buffer is kept until the copy is done
    return [sent[start:start + n].view(t.shape) for t, start, n in zip(tensors, starts, sizes)]
