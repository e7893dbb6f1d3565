"""Run one of FlashMLA's own test scripts (a ``__main__`` script, not a pytest file) as ``__main__``, with
``use_legacy=True`` added to every ``flash_mla_with_kvcache`` call: the sgl-flash-mla wheel has dense and
sparse decoding on its legacy (SM90) side only.  Nothing else of the test is changed.

    python3 scripts/gpu/run_legacy.py .upstream/flashmla-tests/test_flash_mla_dense_decoding.py [args...]
"""

import functools
import runpy
import sys

import flash_mla

original = flash_mla.flash_mla_with_kvcache


@functools.wraps(original)
def legacy(*args, **kwargs):
    kwargs.setdefault("use_legacy", True)
    return original(*args, **kwargs)


flash_mla.flash_mla_with_kvcache = legacy
path = sys.argv[1]
sys.path.insert(0, path.rsplit("/", 1)[0])      # the test imports its neighbours (lib, ref, quant, kernelkit)
sys.argv = sys.argv[1:]
runpy.run_path(path, run_name="__main__")
