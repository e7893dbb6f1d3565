"""A Ray actor of a fuzz campaign across machines (``ray_campaign``): one per GPU of the cluster, or one per
``--workers`` on a cluster without GPUs.  It runs what the driver hands it through the single-machine
campaign's own code (``Campaign.run_round``, ``Campaign.rerun``): ``run_cases``, its worker processes and
their crash isolation, on the one GPU Ray gave it.  It returns rows and writes nothing; the driver writes
the results file and the corpus.

A plain class: ``ray_cluster`` makes it an actor, so this module imports no Ray, and the nodes import it
from the installed mla-verify.
"""

import dataclasses
import socket

from ..allocator import keep_freed_blocks
from ..cores import passive_openmp
from ..running.run_summary import RunSummary

CPU_THREADS = 1       # a CPU actor's torch threads: the one CPU Ray gives it


class CampaignActor:
    def __init__(self, settings, refusal):
        """``settings``: the driver's ``campaign.Settings``, its workers still to settle here (None: as
        ``run`` would for this node's GPUs); ``refusal(case, backend, device, memory)``: why a case would
        not run here (``list_cmd.why_not_run``, passed in, as this layer may not import the commands)."""
        passive_openmp()             # before torch loads OpenMP, as in the CLI
        keep_freed_blocks()
        import torch

        from ..running.backend_loader import load_backend
        from ..running.placement import WorkerSet
        from ..running.worker_pool import WorkerPool
        from .campaign import Campaign
        if settings.device == "cpu":
            # the threads a row's float64 sums split over decide their last bits: one, the actor's one CPU,
            # whatever the size of the cluster (its worker processes take the same count, worker_job)
            torch.set_num_threads(CPU_THREADS)
        workers = 1 if settings.device == "cpu" else settings.workers
        if workers is None:
            workers = _default_gpu_workers()
        self.settings = dataclasses.replace(settings, workers=workers, sets=[WorkerSet()])
        self.refusal = refusal
        self.pool = WorkerPool()
        self.backend = load_backend(settings.backend_spec)
        self.campaign = Campaign(self.settings, self.backend, self.pool, memory=None)
        self.placement = _placement(settings.device)

    def hello(self) -> dict:
        """Where it runs and what its device has free, measured before any of its workers started; spare
        workers are started meanwhile, for its first round."""
        from ..running import resources
        if self.campaign.memory is None:
            self.campaign.memory = resources.available_bytes(self.settings.device)
            self.pool.start_spares(max(self.settings.workers, 1) + 1)
        return {"placement": self.placement, "memory": self.campaign.memory}

    def use_memory(self, memory: tuple):
        """The memory every case must fit: the least any actor has (a round may run on any of them)."""
        self.campaign.memory = memory

    def refused(self, case) -> str | None:
        """Why ``case`` would not run on this actor's device (the draw's check)."""
        return self.refusal(case, self.backend, self.settings.device, self.campaign.memory)

    def run_round(self, cases: list, spec: str) -> list[dict]:
        """A round's rows, in the order of ``cases``, each saying where it ran."""
        from .campaign import Collect
        collect = Collect()
        self.campaign.run_round(cases, spec, collect, RunSummary())
        order = {c.id: i for i, c in enumerate(cases)}
        return [self._placed(r) for r in sorted(collect.rows, key=lambda r: order[r["case_id"]])]

    def rerun(self, cases: list, spec: str) -> list[dict]:
        """A shrink step's candidates, each alone, in one worker process (``Campaign.rerun``)."""
        return [self._placed(r) for r in self.campaign.rerun(cases, spec)]

    def close(self):
        self.pool.close()

    def _placed(self, row: dict) -> dict:
        row["placement"] = self.placement
        return row


def _placement(device: str) -> dict:
    """What its rows record of where they ran: the node, and on a GPU which one (``placement``'s keys)."""
    import ray
    import torch
    node = {"node": ray.util.get_node_ip_address(), "host": socket.gethostname()}
    if device != "cuda":
        return node
    given = str((ray.get_gpu_ids() or [0])[0])          # the node's index of the GPU Ray gave it
    gpu = int(given) if given.isdigit() else given
    props = torch.cuda.get_device_properties(0)
    return node | {"gpu": gpu, "name": props.name, "uuid": str(getattr(props, "uuid", "")) or None}


def _default_gpu_workers() -> int:
    """``run``'s worker processes per GPU, for this node's cores shared over its GPUs."""
    import ray

    from ..running.worker_pool import default_workers
    here = ray.get_runtime_context().get_node_id()
    gpus = next((n["Resources"].get("GPU", 1) for n in ray.nodes() if n["NodeID"] == here), 1)
    return default_workers("cuda", max(int(gpus), 1))
