"""The cluster side of ``fuzz --ray``: connecting, one actor per GPU (``ray_actor.CampaignActor``; one per
``--workers`` on a cluster without GPUs), and jobs handed to whichever actor is free.

A job whose actor is lost (its node gone, its process killed) goes back to the front of the queue and runs
on the next actor free, with the reason kept; an actor is restarted once by Ray, and is used again when it
answers.  A job that has lost ``LOSSES`` actors is not run again: its caller records its cases as crashed.
Ray is imported here inside functions only: ``fuzz`` without ``--ray`` never imports it.
"""

import contextlib
import logging
import socket
from collections import deque
from dataclasses import dataclass, field

from ..errors import InputError

RAY_MISSING = "--ray needs Ray, an optional extra: pip install 'mla-verify[ray]'"
START_S = 300.0       # seconds the actors may take to start (each node imports torch and the kernels)
LOSSES = 2            # actors one job may lose before its cases are recorded as crashed
CLOSE_S = 30.0        # seconds the actors may take to stop their worker processes
PROBE_S = 10.0        # seconds an address may take to accept a connection
ASK = "ask"           # the actors' concurrency group for the draw's questions, beside the rounds they run


def import_ray():
    try:
        import ray
    except ImportError:
        raise InputError(RAY_MISSING) from None
    return ray


@contextlib.contextmanager
def connected(address: str):
    """Connected to the cluster at ``address`` (``ray.init``'s: ``auto``, ``host:6379``, ``ray://host:10001``)
    for the block; a connection this process had already is used as it is, and kept."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    _check_reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as e:       # ConnectionError, ValueError, ...: Ray's own, one line of it
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"--ray {address}: cannot connect to a Ray cluster: {first[:300]}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _check_reachable(address: str):
    """A ``host:port`` (or ``ray://host:port``) that nothing answers at is one line, at once: ``ray.init``
    would retry it for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return          # auto, or a form Ray reads itself
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as e:
        raise InputError(f"--ray {address}: nothing answers at {host}:{port} ({e.strerror or e})") from None


def cluster_device(asked: str | None) -> str:
    """``--device`` on the cluster: cuda where it has GPUs, unless the CPU is asked for."""
    gpus = int(import_ray().cluster_resources().get("GPU", 0))
    if asked == "cuda" and not gpus:
        raise InputError("--device cuda: the Ray cluster has no GPU")
    return asked or ("cuda" if gpus else "cpu")


def actor_count(device: str, workers: int | None) -> int:
    """One actor per GPU; on the CPU one per ``--workers`` (default: one per CPU of the cluster)."""
    resources = import_ray().cluster_resources()
    if workers is not None and workers < 0:
        raise InputError(f"--workers must be 0 or more, got {workers}")
    if device == "cuda":
        return int(resources["GPU"])
    if workers == 0:
        raise InputError("--workers 0 with --ray on the CPU: the actors are --workers, one per CPU; give 1 or more")
    return workers or max(int(resources.get("CPU", 1)), 1)


@dataclass(eq=False)
class Job:
    """A call of an actor's method; ``losses``: why each actor that had it was lost."""
    method: str
    args: tuple
    tag: object = None
    losses: list = field(default_factory=list)
    done: bool = False
    result: object = None        # the method's answer; None where it lost LOSSES actors or none was left


class Actors:
    """The campaign's actors: jobs queued, handed to the free ones, answers collected, losses handled."""

    def __init__(self, ray, handles: list, memory: tuple):
        self.ray, self.handles, self.memory = ray, handles, memory
        self.idle = list(range(len(handles)))
        self.running: dict = {}        # object ref -> (actor index, job)
        self.restarting: dict = {}     # object ref of a restarted actor's first answer -> actor index
        self.lost: dict = {}           # actor index -> why it is out of the campaign
        self.queue: deque = deque()

    @classmethod
    @contextlib.contextmanager
    def started(cls, settings, refusal, count: int):
        """``count`` actors, started and asked where they run; those not up within ``START_S`` are left out.
        Each uses the least memory any of them has.  Yields (actors, what each said); stops them after."""
        from .ray_actor import CampaignActor
        ray = import_ray()
        resources = {"num_gpus": 1} if settings.device == "cuda" else {}
        actor = ray.remote(num_cpus=1, max_restarts=1, max_task_retries=0, concurrency_groups={ASK: 1},
                           **resources)(CampaignActor)
        handles = [actor.remote(settings, refusal) for _ in range(count)]
        up = []
        try:
            hellos = [h.hello.remote() for h in handles]
            ready, _ = ray.wait(hellos, num_returns=len(hellos), timeout=START_S)
            up, failed = _answers(ray, handles, hellos, ready)
            for h, r in zip(handles, hellos):
                if r not in ready:
                    ray.kill(h, no_restart=True)      # not started yet: its GPU freed for others
            if not up:
                why = failed[0] if failed else f"none answered within {START_S:.0f} s"
                raise InputError(f"--ray: none of the {count} actor(s) started ({why}; is mla-verify, with the "
                                 "backend's package, installed on every node?)")
            memory = min((said["memory"] for _, said in up), key=lambda m: m[0])
            ray.get([h.use_memory.remote(memory) for h, _ in up])
            yield cls(ray, [h for h, _ in up], memory), [said for _, said in up]
        finally:
            with contextlib.suppress(Exception):     # their worker processes stopped first, where they answer
                ray.get([h.close.remote() for h, _ in up], timeout=CLOSE_S)
            for h in handles:
                ray.kill(h, no_restart=True)

    def alive(self) -> bool:
        return len(self.lost) < len(self.handles)

    def submit(self, job: Job, first: bool = False):
        (self.queue.appendleft if first else self.queue.append)(job)

    def hand_out(self, more=None):
        """Every free actor gets the next queued job, or else ``more()``'s (None: no more work)."""
        while self.idle:
            job = self.queue.popleft() if self.queue else (more() if more else None)
            if job is None:
                return
            index = self.idle.pop(0)
            ref = getattr(self.handles[index], job.method).remote(*job.args)
            self.running[ref] = (index, job)

    def ask(self, method: str, *args):
        """A quick question of any live actor, beside the job it runs; None where none is left."""
        for index in [i for i in range(len(self.handles)) if i not in self.lost and i not in self.restarting.values()]:
            call = getattr(self.handles[index], method).options(concurrency_group=ASK)
            try:
                return self.ray.get(call.remote(*args))
            except self.ray.exceptions.RayActorError as e:
                self._lose(index, None, e)
        return None

    def wait(self):
        """The next answer: a job done, lost (queued again) or failed; or an actor back after its restart."""
        refs = list(self.running) + list(self.restarting)
        if not refs:
            return self._fail_all("no Ray actor is left to run it")
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=None if self.running else START_S)
        if not ready:                  # only restarts pending, for too long: their nodes are gone
            for ref, index in list(self.restarting.items()):
                self.lost[index] = f"did not come back within {START_S:.0f} s"
                del self.restarting[ref]
            return self._fail_all("no Ray actor is left to run it") if not self.alive() else None
        ref = ready[0]
        if ref in self.restarting:
            self._answer_of_restart(ref)
        else:
            self._answer(ref)

    def _answer(self, ref):
        index, job = self.running.pop(ref)
        try:
            job.result = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self._lose(index, job, e)
            return
        job.done = True
        self.idle.append(index)

    def _answer_of_restart(self, ref):
        index = self.restarting.pop(ref)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self.lost[index] = _first_line(e)
            return
        if index not in self.idle and not any(i == index for i, _ in self.running.values()):
            self.idle.append(index)       # (a job it lost before its restart may still be to hear of)

    def _lose(self, index: int, job: Job | None, error: Exception):
        """Actor ``index`` lost: its job queued again (first), or failed after ``LOSSES``; the actor told the
        campaign's memory again, which it answers once Ray has restarted it, and is used from then on."""
        if index not in self.restarting.values():
            self.restarting[self.handles[index].use_memory.remote(self.memory)] = index
        if job is None:
            return
        job.losses.append(f"Ray actor {index} lost: {_first_line(error)}")
        if len(job.losses) >= LOSSES:
            job.done = True
        else:
            self.submit(job, first=True)

    def _fail_all(self, why: str):
        while self.queue:
            job = self.queue.popleft()
            job.losses.append(why)
            job.done = True


def _answers(ray, handles: list, refs: list, ready: list) -> tuple[list, list]:
    """(handle, answer) of each actor that answered, and the first line of each that raised instead."""
    up, failed = [], []
    for handle, ref in zip(handles, refs):
        if ref in ready:
            try:
                up.append((handle, ray.get(ref)))
            except Exception as e:        # its __init__ raised (no such backend there), or its node died
                failed.append(_first_line(e))
    return up, failed


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
