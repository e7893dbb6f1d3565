"""The report's findings: failing rows clustered as the console clusters them (``recording.findings``),
and a finding whose verdict differs by GPU model naming the models it sets apart."""

from dataclasses import replace

from ..recording import findings as clustering
from ..recording.findings import Finding
from .gpu_models import describe


def cluster(records: list[dict]) -> list[Finding]:
    """Findings from the failing records (each carrying its ``sig``), most cases first; one that differs by
    GPU model says so first."""
    return [replace(f, evidence=f"Differs by GPU model ({describe(f.smallest['status'], *f.gpus)}): {f.evidence}")
            if f.gpus else f for f in clustering.cluster(records)]
