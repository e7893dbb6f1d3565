"""``mla-verify bench``: verified speed of paged MLA kernels, read against measured ceilings.

- ``counting``: FLOPs, bytes, arithmetic intensity, the bound and the % of ceiling (pure arithmetic);
- ``ceilings``: the device's copy bandwidth and bf16 matmul rate, measured and cached per device;
- ``timing``: kernel time (kineto with the L2 flushed, or wall clock on the CPU) and percentiles;
- ``launchers``: what is timed for a backend: the kernel launch, and the end-to-end step;
- ``crosscheck``: an independent measurement of the same launch (``triton.testing.do_bench_cudagraph``);
- ``runner``: verify first, then time, one row per (case, backend);
- ``output``: the console table and the CSV.
"""
