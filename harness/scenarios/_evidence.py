"""What scenarios keep of a kernel's answer as evidence: a fixed sample of out for the report, and bitwise
comparisons between two answers with the first place they differ."""

import torch

from ..building.transfer import to_device

SAMPLE_SIZE = 64


def sample_positions(seed: int, n: int) -> torch.Tensor:
    """``SAMPLE_SIZE`` positions of an out of ``n`` elements, drawn from the case's seed: the same on every
    backend, so the report can set kernels against each other without storing whole tensors."""
    return torch.randint(0, n, (min(SAMPLE_SIZE, n),), generator=torch.Generator().manual_seed(seed))


def out_samples(taken: list[tuple]) -> list[dict]:
    """Each ``(case seed, out)``'s out at its sample positions: one copy of the positions to the device,
    one transfer of the values back."""
    positions = [sample_positions(seed, out.numel()) if out.numel() else torch.zeros(0, dtype=torch.long)
                 for seed, out in taken]
    if not taken:
        return []
    device = taken[0][1].device
    sent = to_device([p.to(torch.int32) for p in positions], device)
    gathered = [out.reshape(-1)[p.to(out.device)].double().to(device) for (_, out), p in zip(taken, sent)]
    values = torch.cat(gathered).tolist()
    samples, at = [], 0
    for p in positions:
        samples.append({"positions": p.tolist(), "values": values[at:at + len(p)]})
        at += len(p)
    return samples


def bitwise_equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Same shape, dtype and bits (NaN payloads included); two missing LSEs are equal."""
    if a is None or b is None:
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)   # noqa: E731
    return bool(torch.equal(as_bytes(a), as_bytes(b)))


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    diff = ~((a == b) | (torch.isnan(a.float()) & torch.isnan(b.float())))
    if not bool(diff.any()):
        return "bit patterns differ (e.g. NaN payload or -0.0)"
    idx = [int(i) for i in diff.nonzero()[0]]
    return f"first at index {idx}: {float(a[tuple(idx)]):.6g} vs {float(b[tuple(idx)]):.6g}"
