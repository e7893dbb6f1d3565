"""Which GPUs a run may use, found without importing torch (``run --gpus``).

Found through NVML (``libnvidia-ml``), or else ``nvidia-smi -L``; indices are NVML's, which
``nvidia-smi`` shows too (PCI bus order).  A worker is pinned to its GPU by the GPU's UUID in
``CUDA_VISIBLE_DEVICES``: CUDA orders devices fastest first unless told otherwise, so an index
could name another GPU there, a UUID cannot.  Where the user set ``CUDA_VISIBLE_DEVICES``, only the
GPUs it names (by index or UUID) are found; a form not understood here (MIG instances) leaves the run
on its one default device, unpinned, as before.

Test hook: ``MLA_VERIFY_FAKE_GPUS=N`` makes this module report N pretend GPUs (index ``i``, name
``Fake GPU``, pinned by index: ``CUDA_VISIBLE_DEVICES=i``).  Only this module reads it; kernels still
run on the device ``--device`` says, so the pinning, the worker sets and a lost GPU's reruns are
tested on the CPU.
"""

import ctypes
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache

from ..errors import InputError
from .gpu_memory import nvml_session

FAKE_ENV = "MLA_VERIFY_FAKE_GPUS"
PIN_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Gpu:
    index: int           # NVML's (nvidia-smi's) index
    name: str
    uuid: str
    fake: bool = False

    @property
    def pin(self) -> str:
        """``CUDA_VISIBLE_DEVICES`` for a worker on this GPU alone."""
        return str(self.index) if self.fake or not self.uuid else self.uuid

    def placement(self) -> dict:
        """What a row records of the GPU its case ran on."""
        return {"gpu": self.index, "name": self.name, "uuid": self.uuid}


def fake_gpus() -> list[Gpu] | None:
    """The pretend GPUs of the test hook, or None when it is not set."""
    text = os.environ.get(FAKE_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise InputError(f"{FAKE_ENV}={text!r}: must be a number of pretend GPUs (a test hook)")
    return [Gpu(i, "Fake GPU", f"GPU-fake-{i}", fake=True) for i in range(int(text))]


_SMI_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)\s*$")


def parse_smi_list(text: str) -> list[Gpu]:
    """The GPUs of ``nvidia-smi -L`` output (MIG lines, indented, are left out)."""
    found = []
    for line in text.splitlines():
        m = _SMI_LINE.match(line)
        if m:
            found.append(Gpu(int(m.group(1)), m.group(2).strip(), m.group(3)))
    return found


def _nvml_gpus() -> list[Gpu] | None:
    with nvml_session() as nvml:
        if nvml is None:
            return None
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        found = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                return None
            nvml.nvmlDeviceGetName(handle, name, len(name))
            nvml.nvmlDeviceGetUUID(handle, uuid, len(uuid))
            found.append(Gpu(i, name.value.decode(errors="replace") or "GPU", uuid.value.decode(errors="replace")))
        return found


def _smi_gpus() -> list[Gpu] | None:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi_list(out.stdout) if out.returncode == 0 else None


def visible(gpus: list[Gpu], setting: str | None) -> list[Gpu] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES=setting`` leaves visible, in its order; None when it uses a
    form this module does not map to whole GPUs (MIG instances, a UUID prefix it cannot find)."""
    if setting is None:
        return list(gpus)
    by_index = {str(g.index): g for g in gpus}
    chosen = []
    for item in (s.strip() for s in setting.split(",")):
        if not item:
            continue
        if item in by_index:
            chosen.append(by_index[item])
            continue
        if item.isdigit() or item.startswith("-"):     # CUDA stops at the first invalid index
            break
        match = [g for g in gpus if g.uuid and g.uuid.startswith(item if item.startswith("GPU-") else f"GPU-{item}")]
        if len(match) != 1:
            return None
        chosen.append(match[0])
    return chosen


def discover() -> tuple[Gpu, ...]:
    """The GPUs this process may use: the test hook's, else NVML's, else ``nvidia-smi -L``'s, narrowed by
    ``CUDA_VISIBLE_DEVICES``.  Empty where none is found (a CPU box, or a setting this module cannot map)."""
    fake = fake_gpus()
    if fake is not None:
        return tuple(fake)
    return _found(os.environ.get(PIN_ENV))


@cache      # asked by the cli before the spares start and by run: the driver is asked once
def _found(setting: str | None) -> tuple[Gpu, ...]:
    found = _nvml_gpus()
    if found is None:
        found = _smi_gpus() or []
    return tuple(visible(found, setting) or [])


def select(spec: str, found) -> list[Gpu]:
    """The GPUs ``--gpus spec`` names among those ``found``: ``all``, or indices such as ``0,2,5``."""
    indices = parse(spec)
    if indices is None:
        return list(found)
    by_index = {g.index: g for g in found}
    for index in indices:
        if index not in by_index:
            have = ", ".join(str(i) for i in by_index) or "none"
            raise InputError(f"--gpus {spec}: there is no GPU {index} here (GPUs found: {have})")
    return [by_index[i] for i in indices]


def parse(spec: str | None) -> list[int] | None:
    """``--gpus spec`` read: None for ``all`` (or not given), else the indices named, each once.  Bad
    input whatever the device, so a typo is found on the CPU too."""
    spec = (spec or "all").strip()
    if spec == "all":
        return None
    indices = []
    for item in spec.split(","):
        item = item.strip()
        if not item.isdigit():
            raise InputError(f"--gpus {spec}: expected 'all' or GPU indices such as 0,2,5, got {item!r}")
        if int(item) in indices:
            raise InputError(f"--gpus {spec}: GPU {item} is named twice")
        indices.append(int(item))
    return indices


def worker_sets(chosen: list[Gpu], found) -> list[tuple[str | None, dict | None]]:
    """``(pin, placement)`` of each worker set: one set per chosen GPU, pinned to it.  A run on the one
    GPU there is stays unpinned, as it has always run (its rows still say which GPU); no GPU at all:
    one set, unpinned, recording nothing."""
    if not chosen:
        return [(None, None)]
    if len(chosen) == 1 and len(found) == 1 and not chosen[0].fake:
        return [(None, chosen[0].placement())]
    return [(g.pin, g.placement()) for g in chosen]


def workers_per_gpu(cores: int, gpus: int, most: int, cores_each: int) -> int:
    """A GPU's worker set by default: the host's cores shared out, ``cores_each`` a worker, at most ``most``."""
    return max(1, min(most, cores // cores_each // max(gpus, 1)))


def plan(spec: str | None, device: str) -> tuple[list[tuple[str | None, dict | None]], str | None]:
    """The worker sets of a run (``worker_sets``) and a note for the user, or None.  On the CPU
    ``--gpus`` is not used (unless the test hook pretends there are GPUs)."""
    if device != "cuda" and fake_gpus() is None:
        parse(spec)
        note = None if spec is None else f"--gpus {spec}: not used, the run is on the CPU"
        return [(None, None)], note
    found = discover()
    return worker_sets(select(spec or "all", found), found), None
