"""Where the device time of each phase goes, for the cases of a suite that match a filter.

Usage: python scripts/gpu/profile_device.py SUITE BACKEND FILTER [N] [--steps] [--stacks] > device-profile.txt
(FILTER: a substring of the case's seqlen spec, e.g. 4096; N: how many cases, default 40, or every:K;
--steps: the inputs' steps (``STEPS`` below) as ranges of their own, ``step:NAME``, inside ``phase:inputs``;
--stacks: the copies, clones, fills and concatenations by the Python lines that made them)
"""
import collections
import importlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from harness.planning import cases as case_mod
from harness.running import chunk, phases
from harness.running.backend_loader import load_backend

steps, stacks = "--steps" in sys.argv, "--stacks" in sys.argv
args = [a for a in sys.argv[1:] if a not in ("--steps", "--stacks")]
suite, spec, wanted = args[:3]
n = args[3] if len(args) > 3 else "40"
# the functions the inputs' builders call by their module-level names (so a wrapper put there is what runs)
STEPS = {"harness.building.sparse_inputs": ["draw_normal", "quantize", "write_records", "guarded", "selected_writes",
                                            "batched_positions", "to_device_named", "assign_pages", "req_to_token_of",
                                            "written_slots", "slots_of", "index_stats"],
         "harness.building.sparse_write_kernel": ["write_tokens"],
         "harness.building.inputs": ["draw_normal"]}
cases = [c for c in case_mod.load_suite(suite).cases if wanted in c.seqlen]
cases = cases[::int(n.split(":")[1])] if n.startswith("every:") else cases[:int(n)]
backend = load_backend(spec)
chunk.run_chunk(cases[:4], backend, spec, "cuda")            # warm-up
real_phase = phases.phase


def labelled(name):                                           # each phase as a profiler range
    class Both:
        def __enter__(self):
            self.a, self.b = record_function(f"phase:{name}"), real_phase(name)
            self.a.__enter__()
            return self.b.__enter__()

        def __exit__(self, *exc):
            try:
                return self.b.__exit__(*exc)
            finally:
                self.a.__exit__(*exc)
    return Both()


for module in list(sys.modules.values()):                  # every module that imported ``phase`` by name
    if getattr(module, "phase", None) is real_phase:
        module.phase = labelled


def ranged(name, function):
    def call(*a, **k):
        with record_function(f"step:{name}"):
            return function(*a, **k)
    return call


if steps:
    for module_name, names in STEPS.items():
        module = importlib.import_module(module_name)
        for name in names:
            setattr(module, name, ranged(name, getattr(module, name)))
# the Python stack of each operator called from Python (``verbose``: without it the stacks come back empty)
config = torch._C._profiler._ExperimentalConfig(verbose=True) if stacks else None
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=stacks,
             experimental_config=config) as prof:
    rows = [row for group in chunk.plan(cases) for row in chunk.run_chunk(group, backend, spec, "cuda")]
torch.cuda.synchronize()
averages = prof.key_averages()
on_device = [e for e in averages                          # kernels, not the ranges around them
             if e.device_type == torch.autograd.DeviceType.CUDA and not e.key.startswith(("phase:", "step:"))]
launches, device_us = sum(e.count for e in on_device), sum(e.self_device_time_total for e in on_device)
print(f"{len(cases)} cases matching '{wanted}': {launches} device operations (kernels, copies, fills), "
      f"{launches / len(cases):.0f} a case; {device_us / 1e3:.1f} ms of device time, "
      f"{device_us / len(cases):.0f} us a case, {device_us / max(launches, 1):.1f} us an operation")
print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=110))
print(prof.key_averages(group_by_input_shape=False).table(sort_by="cuda_time_total", row_limit=12,
                                                          max_name_column_width=60))
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
if stacks:        # each operator called from Python, with its kernels' device time, by the lines that called it
    made = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.stack and e.name.startswith("aten::"):
            own = [line for line in e.stack if "harness/" in line or "reference/" in line][:3] or e.stack[:3]
            made[(e.name, " <- ".join(own))][0] += e.self_device_time_total      # its own kernels: no double count
            made[(e.name, " <- ".join(own))][1] += 1
    print("\nDevice time by operator and the lines that called it (ms, calls):")
    for (name, where), (us, count) in sorted(made.items(), key=lambda item: -item[1][0])[:60]:
        print(f"{us / 1e3:8.2f} ms {count:6d}  {name}  {where}")
