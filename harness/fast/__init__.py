"""The fast paths: Triton passes on CUDA, each giving the numbers of a PyTorch form that stays the definition.

- ``widen_kernel``: the oracle's keys gathered and widened (``reference.block_attention``'s
  ``_gather_and_widen``); the harness's oracle (``judging.oracle``) hands its ``fill`` to
  ``reference.mla_attention_many``, so ``reference`` imports nothing from here;
- ``compare_kernel``: the comparison's statistics (``judging.compare_statistics``);
- ``sparse_write_kernel`` and ``sparse_keys_kernel``: the sparse records written and read
  (``building.sparse_cache``);
- ``sparse_softmax_kernel``: the sparse oracle's softmax (``reference.sparse.attend_listed``);
- ``triton_probe``: how each comes to be used: defined on first use, probed by its first launch, and
  PyTorch's form wherever Triton cannot build or run it (so a Triton costs speed, never a verdict).

Each module's test bears its name, ``tests/fast/test_<module>.py``, and proves it equal to its PyTorch form: on
CUDA compiled, on the CPU under Triton's interpreter.  The folder sits above ``planning`` (the sparse
kernels read the record formats) and below ``building`` and ``judging``, which call it.
"""
